//! The serial array over zoned members (issue 33): random writes, trims and reads against a flat
//! shadow through the synchronous driver whose members enforce zones (writes only at a zone's
//! write pointer, zone append, reset), over members so small that the front-end rotates and xGC
//! cleans and resets zones many times; every read is verified. No command is off a write
//! pointer, no TRIM is sent, xGC writes only by zone append.

use nines_array::testing::SyncDriver;
use nines_array::{
    BufRef, CmdOp, IoResult, LayoutSpec, SerialSpec, VolIo, VolOp, Volume, VolumeParams, build,
};
use proptest::prelude::*;

const UNIT: u64 = 4096;
/// Zones of 32 KiB, 16 KiB of them writable (the rest a hole, as on ZN540-like drives).
const ZONE: u64 = 32 * 1024;
const CAP: u64 = 16 * 1024;

fn spec(column_members: u32, gc_depth: u32) -> SerialSpec {
    SerialSpec {
        column_members,
        stripe_bytes: 8192,
        segment_bytes: CAP * u64::from(column_members),
        unit_bytes: UNIT as u32,
        rotate_free: 1,
        gc_start: 2,
        gc_stop: 3,
        gc_depth,
        move_bytes: 8192,
        start_full_bytes: 0,
        persist: false,
        zone_size_bytes: ZONE,
        zone_capacity_bytes: CAP,
    }
}

fn driver(s: SerialSpec, members: u32, member_bytes: u64, tags: u32) -> SyncDriver {
    let sizes = vec![member_bytes; members as usize];
    let v = build(
        &LayoutSpec::Serial(s),
        &VolumeParams {
            member_sizes_bytes: &sizes,
            block_bytes: 512,
            tags,
            len_bytes_max: 8 * UNIT as u32,
        },
    )
    .unwrap();
    let mut d = SyncDriver::new(v, &sizes, tags, 8 * UNIT as u32);
    d.members_mut().set_zoned(ZONE);
    d.trace = Some(Vec::new());
    d
}

type Batch = Vec<(u8, u64, u32, u8)>;

fn run(d: &mut SyncDriver, tags: u32, steps: &[Batch]) -> Result<(), TestCaseError> {
    let size = d.host().volume().size_bytes();
    let units = size / UNIT;
    let mut shadow = vec![0u8; size as usize];
    for ios in steps {
        let (mut vios, mut reads, mut taken) = (Vec::new(), Vec::new(), Vec::<(u64, u64)>::new());
        for (tag, &(kind, u, n, seed)) in ios.iter().take(tags as usize).enumerate() {
            let u = u % units;
            let n = u64::from(n).min(units - u);
            let (off, len) = (u * UNIT, n * UNIT);
            if taken.iter().any(|&(a, b)| off < b && a < off + len) {
                continue;
            }
            taken.push((off, off + len));
            let tag = tag as u32;
            let op = match kind {
                0..=5 => VolOp::Write,
                6 => VolOp::Trim,
                _ => VolOp::Read,
            };
            match op {
                VolOp::Write => {
                    let bytes: Vec<u8> = (0..len)
                        .map(|i| ((i / 512) as u8).wrapping_mul(31) ^ seed ^ (u as u8))
                        .collect();
                    d.data_mut().client[tag as usize][..len as usize].copy_from_slice(&bytes);
                    shadow[off as usize..(off + len) as usize].copy_from_slice(&bytes);
                }
                VolOp::Trim => shadow[off as usize..(off + len) as usize].fill(0),
                _ => {
                    d.data_mut().client[tag as usize].fill(0xEE);
                    reads.push((tag, off, len));
                }
            }
            vios.push(VolIo {
                tag,
                op,
                offset_bytes: off,
                len_bytes: len as u32,
                fua: false,
            });
        }
        for (tag, r) in d.run(&vios) {
            prop_assert_eq!(r, IoResult::Ok, "tag {}", tag);
        }
        for (tag, off, len) in reads {
            prop_assert_eq!(
                &d.data_mut().client[tag as usize][..len as usize],
                &shadow[off as usize..(off + len) as usize],
                "read at {} of {}",
                off,
                len
            );
        }
    }
    for off in (0..size).step_by(8 * UNIT as usize) {
        let len = (size - off).min(8 * UNIT) as u32;
        prop_assert_eq!(
            &d.read(off, len).unwrap()[..],
            &shadow[off as usize..off as usize + len as usize]
        );
    }
    Ok(())
}

/// What the trace says: no TRIM, every GC write an append, no write inside a zone's hole;
/// returns (appends, resets).
fn zoned_commands(d: &SyncDriver) -> Result<(u32, u32), TestCaseError> {
    let (mut appends, mut resets) = (0, 0);
    for (c, _) in d.trace.as_ref().unwrap() {
        prop_assert!(c.op != CmdOp::Trim, "a TRIM to a zoned member: {:?}", c);
        let gc = matches!(c.buf, BufRef::Scratch { .. });
        match c.op {
            CmdOp::Write => {
                prop_assert!(!gc, "a GC write not by append: {:?}", c);
                prop_assert!(
                    c.offset_bytes % ZONE + u64::from(c.len_bytes) <= CAP,
                    "{:?}",
                    c
                );
            }
            CmdOp::ZoneAppend => {
                prop_assert!(gc && c.offset_bytes % ZONE == 0, "{:?}", c);
                appends += 1;
            }
            CmdOp::ZoneReset => {
                prop_assert_eq!((c.offset_bytes % ZONE, u64::from(c.len_bytes)), (0, ZONE));
                resets += 1;
            }
            _ => {}
        }
    }
    Ok((appends, resets))
}

fn batches(units: u64, tags: u32) -> impl Strategy<Value = Vec<Batch>> {
    let io = (0u8..10, 0..units, 1u32..9, any::<u8>());
    prop::collection::vec(prop::collection::vec(io, 1..=tags as usize), 80..250)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    /// Four columns of one member; data read back equals data written across zone resets.
    #[test]
    fn serial_over_zoned_members_matches_a_flat_array(
        s in batches(40, 4), tags in 1u32..5, depth in 1u32..4
    ) {
        let mut d = driver(spec(1, depth), 4, 16 * ZONE, tags);
        run(&mut d, tags, &s)?;
        prop_assert_eq!(d.members().zone_errors, 0);
        let (appends, resets) = zoned_commands(&d)?;
        let st = d.host().volume().stats();
        prop_assert_eq!(st["trim_errors"].as_u64(), Some(0));
        prop_assert_eq!(st["gc_errors"].as_u64(), Some(0));
        // Resets: the first write's one per segment, then one per cleaned victim (victims
        // left when their column became the front-end are sealed, not reset).
        let victims = st["gc_victims"].as_u64().unwrap() - st["gc_victims_left"].as_u64().unwrap();
        prop_assert_eq!(u64::from(resets), 64 + victims, "resets {} victims {}", resets, victims);
        prop_assert_eq!(d.members().zone_resets, u64::from(resets));
        if st["gc_units_moved"].as_u64().unwrap() > 0 {
            prop_assert!(appends > 0);
        }
    }

    /// Columns of two members striped (a segment is a zone on each).
    #[test]
    fn striped_columns_over_zoned_members(s in batches(40, 3), tags in 1u32..4) {
        let mut d = driver(spec(2, 3), 4, 16 * ZONE, tags);
        run(&mut d, tags, &s)?;
        prop_assert_eq!(d.members().zone_errors, 0);
        zoned_commands(&d)?;
    }
}

/// A long run: the front-end rotates and xGC cleans (and resets) many times.
#[test]
fn long_run_moves_by_append_and_resets_zones() {
    let tags = 4;
    let mut d = driver(spec(1, 3), 4, 16 * ZONE, tags);
    let size = d.host().volume().size_bytes();
    let mut x = 7u64;
    let batches: Vec<Batch> = (0..600)
        .map(|_| {
            (0..tags)
                .map(|_| {
                    x = x
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    (
                        (x >> 60) as u8 % 8,
                        (x >> 20) % (size / UNIT),
                        1 + (x >> 8) as u32 % 4,
                        x as u8,
                    )
                })
                .collect()
        })
        .collect();
    run(&mut d, tags, &batches).unwrap();
    let st = d.host().volume().stats();
    let (appends, resets) = zoned_commands(&d).unwrap();
    assert!(st["gc_victims"].as_u64().unwrap() > 20, "{st}");
    assert!(st["gc_units_moved"].as_u64().unwrap() > 0, "{st}");
    assert!(
        appends > 0 && resets > 64,
        "appends {appends} resets {resets}"
    );
    assert_eq!(d.members().zone_errors, 0);
}

fn refusal(s: SerialSpec) -> String {
    let sizes = [16 * ZONE; 4];
    match build(
        &LayoutSpec::Serial(s),
        &VolumeParams {
            member_sizes_bytes: &sizes,
            block_bytes: 512,
            tags: 1,
            len_bytes_max: 65536,
        },
    ) {
        Ok(_) => panic!("built"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn geometries_that_do_not_fit_zones_are_refused() {
    let e = refusal(SerialSpec {
        segment_bytes: 2 * CAP,
        ..spec(1, 2)
    });
    assert!(e.contains("use --segment 16384"), "{e}");
    let e = refusal(SerialSpec {
        segment_bytes: CAP,
        ..spec(2, 2)
    });
    assert!(e.contains("use --segment 32768"), "{e}");
    let e = refusal(SerialSpec {
        persist: true,
        ..spec(1, 2)
    });
    assert!(e.contains("--persist"), "{e}");
    let e = refusal(SerialSpec {
        start_full_bytes: 65536,
        ..spec(1, 2)
    });
    assert!(e.contains("--start-full"), "{e}");
    assert!(!e.contains('\n'));
}
