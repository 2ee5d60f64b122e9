//! The member-metadata parsers read what is on a member, which may be anything: arbitrary
//! pages never panic and are either refused or read back exactly as they were written, and any
//! superblock or bitmap written is read back unchanged.

use nines_array::meta::{MetaLayout, SbError, Superblock};
use nines_array::raid5::{BITMAP_PAGE_BYTES, BITMAP_REGIONS_MAX, bitmap_page, parse_bitmap_page};
use proptest::prelude::*;

fn superblock() -> impl Strategy<Value = Superblock> {
    (
        any::<bool>(),
        any::<[u8; 16]>(),
        (
            any::<u32>(),
            any::<u32>(),
            any::<u64>(),
            any::<u64>(),
            any::<u64>(),
        ),
        (
            any::<u64>(),
            any::<(bool, bool)>(),
            any::<u64>(),
            any::<u64>(),
        ),
    )
        .prop_map(
            |(
                r5,
                uuid,
                (members, role, unit, data, size),
                (events, (clean, creating), failed, rr),
            )| {
                Superblock {
                    layout: if r5 {
                        MetaLayout::Raid5
                    } else {
                        MetaLayout::Raid0
                    },
                    array_uuid: uuid,
                    members,
                    role,
                    unit_bytes: unit,
                    member_data_bytes: data,
                    member_bytes: size,
                    events,
                    clean,
                    creating,
                    failed_mask: failed,
                    bitmap_region_rows: rr,
                }
            },
        )
}

proptest! {
    #[test]
    fn any_superblock_round_trips(sb in superblock()) {
        prop_assert_eq!(Superblock::decode(&sb.encode()), Ok(sb));
    }

    #[test]
    fn a_flipped_byte_is_refused(sb in superblock(), at in 0usize..100, bit in 0u8..8) {
        let mut page = sb.encode();
        page[at] ^= 1 << bit;
        // Every byte of the fields and the checksum is covered: never read as a superblock.
        prop_assert!(Superblock::decode(&page).is_err());
    }

    #[test]
    fn arbitrary_pages_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..4200), magic in any::<bool>()) {
        let mut page = bytes;
        if magic && page.len() >= 8 {
            page[..8].copy_from_slice(b"NINESMB1");
        }
        match Superblock::decode(&page) {
            // Read from one of the page's two slots, exactly as written there.
            Ok(sb) => prop_assert!(
                sb.encode()[..100] == page[..100] || sb.encode()[..100] == page[2048..2148]
            ),
            Err(e) => prop_assert!(matches!(e, SbError::NoMagic | SbError::Checksum | SbError::Unknown)),
        }
        let _ = parse_bitmap_page(&page, 1, 8);
    }

    #[test]
    fn any_page_written_over_any_page_reads_back(sb in superblock(), prev in prop::collection::vec(any::<u8>(), 4096)) {
        prop_assert_eq!(Superblock::decode(&sb.encode_after(&prev)), Ok(sb));
    }

    #[test]
    fn bitmap_pages_round_trip(bits in prop::collection::vec(any::<bool>(), 1..2000), rr in 1u64..1000) {
        let page = bitmap_page(rr, &bits);
        prop_assert_eq!(page.len(), BITMAP_PAGE_BYTES as usize);
        prop_assert_eq!(parse_bitmap_page(&page, rr, bits.len() as u64), Some(bits.clone()));
        // Another geometry is not this bitmap.
        prop_assert_eq!(parse_bitmap_page(&page, rr + 1, bits.len() as u64), None);
        prop_assert_eq!(parse_bitmap_page(&page, rr, BITMAP_REGIONS_MAX + 1), None);
    }
}
