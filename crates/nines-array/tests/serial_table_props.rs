//! `nines check --layout serial` reads a mapping table off a member, which may hold anything:
//! for arbitrary tables the check never panics, counts every entry as mapped, bad or empty,
//! and `--repair` leaves a table the check passes whose good entries name distinct places that
//! exist, with the same units mapped as before.

use nines_array::serial::{SuperCheck, check_superblock, check_table, ident};
use proptest::prelude::*;

/// Tables of mostly small entries (so duplicates and in-range places are common), some
/// arbitrary ones, some zero.
fn table() -> impl Strategy<Value = Vec<u32>> {
    prop::collection::vec(
        prop_oneof![
            3 => Just(0u32),
            6 => 1u32..40,
            1 => any::<u32>(),
        ],
        0..300,
    )
}

fn bytes(t: &[u32]) -> Vec<u8> {
    t.iter().flat_map(|e| e.to_le_bytes()).collect()
}

proptest! {
    #[test]
    fn check_and_repair_of_any_table(t in table(), units in 0u64..300, places in 0u64..48) {
        let mut b = bytes(&t);
        let before = check_table(&mut b, units, places, 1000, false);
        prop_assert_eq!(&b, &bytes(&t), "a check without --repair changes nothing");
        let nonzero = t.iter().filter(|&&e| e != 0).count() as u64;
        prop_assert_eq!(before.mapped + before.bad, nonzero);
        prop_assert_eq!(before.listed.len() as u64, before.bad);
        let repaired = check_table(&mut b, units, places, 1000, true);
        prop_assert_eq!(repaired.mapped, before.mapped);
        let after = check_table(&mut b, units, places, 1000, false);
        prop_assert_eq!(after.bad, 0);
        prop_assert_eq!(after.mapped, before.mapped);
        let mut seen = std::collections::HashSet::new();
        for (v, e) in b.chunks_exact(4).enumerate() {
            let e = u32::from_le_bytes([e[0], e[1], e[2], e[3]]);
            if e != 0 {
                prop_assert!((v as u64) < units && u64::from(e - 1) < places);
                prop_assert!(seen.insert(e), "place {} named twice after repair", e - 1);
            }
        }
    }

    #[test]
    fn any_superblock_page_gets_an_answer(page in prop::collection::vec(any::<u8>(), 0..200),
                                          geometry in prop::array::uniform7(any::<u64>())) {
        // Arbitrary bytes are never a valid superblock of this geometry...
        prop_assert_ne!(check_superblock(&page, &geometry), SuperCheck::Ok);
        // ...while the pages nines writes are, and one flipped byte of them never is.
        for mut sb in [ident::encode(&geometry, &[1; 16], 0, 3, true), ident::encode_legacy(&geometry)] {
            prop_assert_eq!(check_superblock(&sb, &geometry), SuperCheck::Ok);
            let at = page.len() % sb.len();
            sb[at] ^= 1 + (page.len() as u8 % 255);
            prop_assert_ne!(check_superblock(&sb, &geometry), SuperCheck::Ok);
        }
    }
}
