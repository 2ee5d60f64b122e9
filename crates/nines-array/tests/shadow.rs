//! Every layout against a shadow copy: random writes, trims and reads of random sizes and
//! offsets through the synchronous in-memory driver must read back exactly what a flat byte
//! array would.

use nines_array::testing::SyncDriver;
use nines_array::{LayoutSpec, Volume, VolumeParams, build};
use proptest::prelude::*;

#[derive(Clone, Debug)]
enum Step {
    Write { off: u64, len: u32, seed: u8 },
    Read { off: u64, len: u32 },
}

fn steps(size: u64) -> impl Strategy<Value = Vec<Step>> {
    let blocks = size / 512;
    let step =
        (0..blocks, 1u32..64, any::<u8>(), any::<bool>()).prop_map(move |(b, n, seed, w)| {
            let n = n.min((blocks - b) as u32);
            if w {
                Step::Write {
                    off: b * 512,
                    len: n * 512,
                    seed,
                }
            } else {
                Step::Read {
                    off: b * 512,
                    len: n * 512,
                }
            }
        });
    prop::collection::vec(step, 1..40)
}

fn check(layout: LayoutSpec, sizes: &[u64], steps: &[Step]) -> Result<(), TestCaseError> {
    let len_max = 64 * 512;
    let v = build(
        &layout,
        &VolumeParams {
            member_sizes_bytes: sizes,
            block_bytes: 512,
            tags: 1,
            len_bytes_max: len_max,
        },
    )
    .unwrap();
    let size = v.size_bytes();
    let mut d = SyncDriver::new(v, sizes, 1, len_max);
    let mut shadow = vec![0u8; size as usize];
    for s in steps {
        match *s {
            Step::Write { off, len, seed } => {
                if off + u64::from(len) > size {
                    continue;
                }
                let bytes: Vec<u8> = (0..len)
                    .map(|i| (i as u8).wrapping_mul(31) ^ seed)
                    .collect();
                d.write(off, &bytes).unwrap();
                shadow[off as usize..(off + u64::from(len)) as usize].copy_from_slice(&bytes);
            }
            Step::Read { off, len } => {
                if off + u64::from(len) > size {
                    continue;
                }
                let got = d.read(off, len).unwrap();
                prop_assert_eq!(
                    &got[..],
                    &shadow[off as usize..(off + u64::from(len)) as usize]
                );
            }
        }
    }
    Ok(())
}

proptest! {
    #[test]
    fn raid0_matches_a_flat_array(s in steps(6 * 64 * 1024), stripe_kib in prop::sample::select(vec![4u64, 8, 16, 64])) {
        check(LayoutSpec::Raid0 { stripe_bytes: stripe_kib * 1024 }, &[128 * 1024, 128 * 1024, 160 * 1024], &s)?;
    }

    #[test]
    fn passthrough_matches_a_flat_array(s in steps(256 * 1024)) {
        check(LayoutSpec::Independent, &[256 * 1024], &s)?;
    }
}

/// Every row's chunks XOR to zero over all members (data and parity): the parity invariant.
fn parity_holds(d: &SyncDriver, n: u32, chunk: usize) -> Result<(), TestCaseError> {
    let len = d.members().bytes(0).len();
    let rows = len / chunk;
    for r in 0..rows {
        for i in 0..chunk {
            let mut x = 0u8;
            for m in 0..n {
                x ^= d.members().byte(m, (r * chunk + i) as u64);
            }
            prop_assert_eq!(x, 0, "row {} byte {} breaks parity", r, i);
        }
    }
    Ok(())
}

fn raid5(sizes: &[u64], chunk: u64, failed: Option<u32>, tags: u32, len_max: u32) -> SyncDriver {
    let v = build(
        &LayoutSpec::Raid5 {
            chunk_bytes: chunk,
            failed,
            dnd: None,
            rebuild: None,
            fast_fail_ns: None,
            bitmap_region_rows: None,
        },
        &VolumeParams {
            member_sizes_bytes: sizes,
            block_bytes: 512,
            tags,
            len_bytes_max: len_max,
        },
    )
    .unwrap();
    SyncDriver::new(v, sizes, tags, len_max)
}

proptest! {
    #[test]
    fn raid5_matches_a_flat_array(s in steps(4 * 32 * 1024), chunk_kib in prop::sample::select(vec![4u64, 8, 16]), n in 3usize..6) {
        let sizes = vec![64 * 1024; n];
        check(LayoutSpec::Raid5 { chunk_bytes: chunk_kib * 1024, failed: None, dnd: None, rebuild: None, fast_fail_ns: None, bitmap_region_rows: None }, &sizes, &s)?;
    }

    /// Random writes keep the parity right; then any one member fails and every byte still
    /// reads back (rebuilt), and writes go on degraded and read back too.
    #[test]
    fn raid5_survives_any_one_member(s in steps(3 * 32 * 1024), chunk_kib in prop::sample::select(vec![4u64, 8]), n in 3u32..6, victim in 0u32..6, s2 in steps(3 * 32 * 1024)) {
        let victim = victim % n;
        let chunk = chunk_kib * 1024;
        let sizes = vec![48 * 1024; n as usize];
        let len_max = 64 * 512;
        let mut d = raid5(&sizes, chunk, None, 1, len_max);
        let size = d.host().volume().size_bytes();
        let mut shadow = vec![0u8; size as usize];
        let apply = |d: &mut SyncDriver, shadow: &mut Vec<u8>, steps: &[Step]| -> Result<(), TestCaseError> {
            for st in steps {
                if let Step::Write { off, len, seed } = *st {
                    if off + u64::from(len) > size {
                        continue;
                    }
                    let bytes: Vec<u8> = (0..len).map(|i| (i as u8).wrapping_mul(29) ^ seed).collect();
                    d.write(off, &bytes).unwrap();
                    shadow[off as usize..(off + u64::from(len)) as usize].copy_from_slice(&bytes);
                }
            }
            Ok(())
        };
        apply(&mut d, &mut shadow, &s)?;
        parity_holds(&d, n, chunk as usize)?;
        d.members_mut().fail(victim);
        // Everything reads back through the failure (the first read that hits the member fails
        // it and is redone degraded).
        for off in (0..size).step_by(len_max as usize) {
            let len = (size - off).min(u64::from(len_max)) as u32;
            prop_assert_eq!(&d.read(off, len).unwrap()[..], &shadow[off as usize..(off + u64::from(len)) as usize]);
        }
        apply(&mut d, &mut shadow, &s2)?;
        for off in (0..size).step_by(len_max as usize) {
            let len = (size - off).min(u64::from(len_max)) as u32;
            prop_assert_eq!(&d.read(off, len).unwrap()[..], &shadow[off as usize..(off + u64::from(len)) as usize]);
        }
        let stats = d.host().volume().stats();
        prop_assert_eq!(stats["failed_member"].as_u64(), Some(u64::from(victim)));
    }
}

proptest! {
    /// A member replaced by a blank one is rebuilt row by row while clients read and write:
    /// every read during the rebuild returns the shadow's bytes, the parity holds on every row
    /// afterwards, the replacement's rows are the lost member's (any other member can then fail
    /// and every byte still reads back), and the progress counters say so.
    #[test]
    fn raid5_rebuilds_a_replacement_under_load(s in steps(3 * 32 * 1024), n in 3u32..6, victim in 0u32..6, s2 in steps(3 * 32 * 1024), other in 0u32..5) {
        use nines_array::RebuildSpec;
        use nines_array::testing::SyncDriver;
        let victim = victim % n;
        let chunk = 4096u64;
        let sizes = vec![32 * 1024; n as usize];
        let len_max = 64 * 512;
        let mut d = raid5(&sizes, chunk, None, 1, len_max);
        let size = d.host().volume().size_bytes();
        let mut shadow = vec![0u8; size as usize];
        for st in &s {
            if let Step::Write { off, len, seed } = *st && off + u64::from(len) <= size {
                let bytes: Vec<u8> = (0..len).map(|i| (i as u8).wrapping_mul(13) ^ seed).collect();
                d.write(off, &bytes).unwrap();
                shadow[off as usize..(off + u64::from(len)) as usize].copy_from_slice(&bytes);
            }
        }
        let mut members = d.members().clone();
        members.replace(victim);
        // One row per millisecond, so client I/O lands on rebuilt and unrebuilt rows alike.
        let v = build(
            &LayoutSpec::Raid5 {
                chunk_bytes: chunk,
                failed: None,
                dnd: None,
                rebuild: Some(RebuildSpec { member: victim, rate_bytes_per_s: chunk * 1000 }),
                fast_fail_ns: None,
                bitmap_region_rows: None,
            },
            &VolumeParams { member_sizes_bytes: &sizes, block_bytes: 512, tags: 1, len_bytes_max: len_max },
        )
        .unwrap();
        let mut d = SyncDriver::with_members(v, members, 1, len_max);
        d.cmd_ns = 10_000;
        let rows = sizes[0] / chunk;
        for st in &s2 {
            let t = d.now_ns() + 700_000;
            d.advance_to(t);
            match *st {
                Step::Write { off, len, seed } if off + u64::from(len) <= size => {
                    let bytes: Vec<u8> = (0..len).map(|i| (i as u8).wrapping_mul(7) ^ seed).collect();
                    d.write(off, &bytes).unwrap();
                    shadow[off as usize..(off + u64::from(len)) as usize].copy_from_slice(&bytes);
                }
                Step::Read { off, len } if off + u64::from(len) <= size => {
                    let got = d.read(off, len).unwrap();
                    prop_assert_eq!(&got[..], &shadow[off as usize..(off + u64::from(len)) as usize]);
                }
                _ => {}
            }
        }
        let t = d.now_ns() + (rows + 2) * 1_000_000;
        d.advance_to(t);
        let stats = d.host().volume().stats();
        prop_assert_eq!(stats["rebuild"]["rows_rebuilt"].as_u64(), Some(rows));
        prop_assert!(stats["rebuild"]["done_ns"].as_u64().is_some());
        prop_assert!(stats["rebuild"]["aborted"].is_null());
        prop_assert!(stats["failed_member"].is_null());
        parity_holds(&d, n, chunk as usize)?;
        // The replacement now carries the array: lose any other member and read it all back.
        let other = (victim + 1 + other % (n - 1)) % n;
        d.members_mut().fail(other);
        for off in (0..size).step_by(len_max as usize) {
            let len = (size - off).min(u64::from(len_max)) as u32;
            prop_assert_eq!(&d.read(off, len).unwrap()[..], &shadow[off as usize..(off + u64::from(len)) as usize]);
        }
    }
}

proptest! {
    /// Reads with a fast-fail threshold: members answering busy (beyond it) have their pieces
    /// rebuilt from the others, one per row; a second busy piece in a row is read again and
    /// waits; every byte read is the shadow's, whichever members are busy.
    #[test]
    fn raid5_fast_fail_reads_rebuild_busy_pieces(s in steps(3 * 32 * 1024), n in 3u32..6, busy_mask in 1u32..32, read_kib in prop::sample::select(vec![4u32, 12, 32])) {
        use nines_array::testing::SyncDriver;
        let chunk = 4096u64;
        let sizes = vec![32 * 1024; n as usize];
        let len_max = 64 * 512;
        let v = build(
            &LayoutSpec::Raid5 { chunk_bytes: chunk, failed: None, dnd: None, rebuild: None, fast_fail_ns: Some(1_000_000), bitmap_region_rows: None },
            &VolumeParams { member_sizes_bytes: &sizes, block_bytes: 512, tags: 1, len_bytes_max: len_max },
        )
        .unwrap();
        let size = v.size_bytes();
        let mut d = SyncDriver::new(v, &sizes, 1, len_max);
        let mut shadow = vec![0u8; size as usize];
        for st in &s {
            if let Step::Write { off, len, seed } = *st && off + u64::from(len) <= size {
                let bytes: Vec<u8> = (0..len).map(|i| (i as u8).wrapping_mul(11) ^ seed).collect();
                d.write(off, &bytes).unwrap();
                shadow[off as usize..(off + u64::from(len)) as usize].copy_from_slice(&bytes);
            }
        }
        // Busy members: 5 ms left (beyond the 1 ms threshold); one at 0.5 ms (within it).
        let mask = busy_mask % ((1 << n) - 1) + 1;
        let busy: Vec<u32> = (0..n).filter(|m| mask & (1 << m) != 0).collect();
        d.busy = busy.iter().map(|&m| (m, 5_000_000)).collect();
        if let Some(m) = (0..n).find(|m| !busy.contains(m)) {
            d.busy.push((m, 500_000));
        }
        let step = read_kib * 1024;
        for off in (0..size).step_by(step as usize) {
            let len = (size - off).min(u64::from(step)) as u32;
            prop_assert_eq!(&d.read(off, len).unwrap()[..], &shadow[off as usize..(off + u64::from(len)) as usize]);
        }
        let st = d.host().volume().stats();
        prop_assert!(st["failed_member"].is_null(), "busy is not failed: {}", st);
        prop_assert!(st["fast_fail_rebuilt"].as_u64().unwrap() > 0, "{}", st);
        if busy.len() == 1 {
            prop_assert_eq!(st["fast_fail_reread"].as_u64(), Some(0));
        }
    }
}

/// A rebuild whose replacement fails stops, says why, and leaves the volume degraded around
/// it, every byte still readable.
#[test]
fn raid5_rebuild_onto_a_failing_replacement_stops_and_stays_degraded() {
    use nines_array::RebuildSpec;
    use nines_array::testing::SyncDriver;
    let sizes = vec![32 * 1024u64; 3];
    let chunk = 4096u64;
    let mut d = raid5(&sizes, chunk, None, 1, 16 * 1024);
    let size = d.host().volume().size_bytes();
    let bytes: Vec<u8> = (0..size).map(|i| (i * 7 % 251) as u8).collect();
    for off in (0..size).step_by(16 * 1024) {
        d.write(off, &bytes[off as usize..off as usize + 16 * 1024])
            .unwrap();
    }
    let mut members = d.members().clone();
    members.replace(1);
    members.fail(1);
    let v = build(
        &LayoutSpec::Raid5 {
            chunk_bytes: chunk,
            failed: None,
            dnd: None,
            rebuild: Some(RebuildSpec {
                member: 1,
                rate_bytes_per_s: 0,
            }),
            fast_fail_ns: None,
            bitmap_region_rows: None,
        },
        &VolumeParams {
            member_sizes_bytes: &sizes,
            block_bytes: 512,
            tags: 1,
            len_bytes_max: 16 * 1024,
        },
    )
    .unwrap();
    let mut d = SyncDriver::with_members(v, members, 1, 16 * 1024);
    d.advance_to(1_000_000);
    let stats = d.host().volume().stats();
    assert!(
        stats["rebuild"]["aborted"]
            .as_str()
            .is_some_and(|w| w.contains("replacement member 1 failed")),
        "{stats}"
    );
    assert_eq!(stats["failed_member"].as_u64(), Some(1));
    for off in (0..size).step_by(16 * 1024) {
        assert_eq!(
            d.read(off, 16 * 1024).unwrap(),
            bytes[off as usize..off as usize + 16 * 1024]
        );
    }
}

/// Overlapping writes in flight together: the row lock keeps parity consistent.
#[test]
fn raid5_concurrent_writes_to_one_row_keep_parity() {
    use nines_array::{VolIo, VolOp};
    let sizes = [64 * 1024u64; 4];
    let mut d = raid5(&sizes, 4096, None, 4, 16 * 1024);
    for round in 0..20u32 {
        let mut ios = Vec::new();
        for t in 0..4u32 {
            let off = u64::from((round * 7 + t * 3) % 8) * 1024;
            let len = 1024 * (1 + (t + round) % 6);
            for (i, b) in d.data_mut().client[t as usize][..len as usize]
                .iter_mut()
                .enumerate()
            {
                *b = (i as u8) ^ (t as u8 * 17) ^ round as u8;
            }
            ios.push(VolIo {
                tag: t,
                op: VolOp::Write,
                offset_bytes: off,
                len_bytes: len,
                fua: false,
            });
        }
        d.run(&ios);
    }
    let chunk = 4096usize;
    for r in 0..(64 * 1024 / chunk) {
        for i in 0..chunk {
            let x = (0..4).fold(0u8, |x, m| x ^ d.members().byte(m, (r * chunk + i) as u64));
            assert_eq!(x, 0, "row {r} byte {i}");
        }
    }
    let stats = d.host().volume().stats();
    assert!(
        stats["row_lock_waits"].as_u64().unwrap() > 0,
        "the test overlapped rows: {stats}"
    );
}

/// Started degraded (--failed): writes and reads work, the failed member is never touched.
#[test]
fn raid5_started_degraded_never_touches_the_failed_member() {
    let sizes = [32 * 1024u64; 3];
    let mut d = raid5(&sizes, 4096, Some(1), 1, 16 * 1024);
    let bytes: Vec<u8> = (0..16 * 1024u32).map(|i| (i * 7) as u8).collect();
    for off in [0u64, 5120, 40960] {
        d.write(off, &bytes[..8192]).unwrap();
        assert_eq!(d.read(off, 8192).unwrap(), &bytes[..8192]);
    }
    assert_eq!(
        d.members().commands[1],
        0,
        "the failed member was sent commands"
    );
    // Two failed members are more than one parity covers.
    d.members_mut().fail(0);
    assert!(d.read(0, 8192).is_err());
}

/// D/ND (and sched): writes wait in the write-back buffer for their member's turn while reads
/// avoid the member whose turn it is; whatever the turns, every read returns what was last
/// written, and after a FLUSH the buffer is empty and the members hold data and parity.
#[test]
fn raid5_dnd_reads_what_was_written_through_the_turns() {
    use nines_array::DndSpec;
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig::with_cases(48));
    runner
        .run(
            &(
                steps(2 * 32 * 1024),
                any::<bool>(),
                1u64..6,
                proptest::option::of(0u32..3),
            ),
            |(s, plm, step_ms, fail_at)| {
                let n = 3u32;
                let chunk = 4096u64;
                let sizes = vec![32 * 1024u64; n as usize];
                let len_max = 64 * 512;
                let v = build(
                    &LayoutSpec::Raid5 {
                        chunk_bytes: chunk,
                        failed: None,
                        // A small buffer (4 rows), so writes also wait for room.
                        dnd: Some(DndSpec {
                            window_ns: 10_000_000,
                            write_back_bytes: 4 * u64::from(n) * chunk,
                            plm,
                        }),
                        rebuild: None,
                        fast_fail_ns: None,
                        bitmap_region_rows: None,
                    },
                    &VolumeParams {
                        member_sizes_bytes: &sizes,
                        block_bytes: 512,
                        tags: 1,
                        len_bytes_max: len_max,
                    },
                )
                .unwrap();
                let size = v.size_bytes();
                let mut d = SyncDriver::new(v, &sizes, 1, len_max);
                d.cmd_ns = 100_000;
                let mut shadow = vec![0u8; size as usize];
                for (i, st) in s.iter().enumerate() {
                    let t = d.now_ns() + step_ms * 1_000_000;
                    d.advance_to(t);
                    if fail_at == Some(i as u32 % 8) && i == s.len() / 2 {
                        d.members_mut().fail(i as u32 % n);
                    }
                    match *st {
                        Step::Write { off, len, seed } => {
                            if off + u64::from(len) > size {
                                continue;
                            }
                            let bytes: Vec<u8> = (0..len)
                                .map(|i| (i as u8).wrapping_mul(13) ^ seed)
                                .collect();
                            d.write(off, &bytes).unwrap();
                            shadow[off as usize..(off + u64::from(len)) as usize]
                                .copy_from_slice(&bytes);
                        }
                        Step::Read { off, len } => {
                            if off + u64::from(len) > size {
                                continue;
                            }
                            let got = d.read(off, len).unwrap();
                            prop_assert_eq!(
                                &got[..],
                                &shadow[off as usize..(off + u64::from(len)) as usize]
                            );
                        }
                    }
                }
                d.flush().unwrap();
                let stats = d.host().volume().stats();
                prop_assert_eq!(stats["dnd"]["occupancy_bytes"].as_u64(), Some(0));
                if stats["failed_member"].is_null() {
                    parity_holds(&d, n, chunk as usize)?;
                }
                for off in (0..size).step_by(len_max as usize) {
                    let len = (size - off).min(u64::from(len_max)) as u32;
                    prop_assert_eq!(
                        &d.read(off, len).unwrap()[..],
                        &shadow[off as usize..(off + u64::from(len)) as usize]
                    );
                }
                Ok(())
            },
        )
        .unwrap();
}

/// D/ND with fast-fail (issue 28): the turn's owner is asked with a fast-fail read instead of
/// being rebuilt up front; the members in their deterministic windows get plain reads. Exactly: 4 members of 32 KiB, 4 KiB chunks (8 rows, member 0 holds
/// data in 6 of them), every data chunk read once in member 0's turn. Busy beyond the threshold,
/// each of member 0's 6 pieces is rebuilt (`fast_fail_rebuilt` 6); not busy, none is (read
/// directly); without fast-fail all 6 are rebuilt up front (`fast_fail_rebuilt` 0). Every byte
/// read is what was written.
#[test]
fn raid5_dnd_with_fast_fail_rebuilds_exactly_the_busy_owners_pieces() {
    use nines_array::DndSpec;
    let (n, chunk, len_max) = (4u32, 4096u64, 64 * 512);
    let sizes = vec![32 * 1024u64; n as usize];
    let run = |fast_fail_ns: Option<u64>, busy: Option<(u32, u64)>| {
        let v = build(
            &LayoutSpec::Raid5 {
                chunk_bytes: chunk,
                failed: None,
                dnd: Some(DndSpec {
                    window_ns: 1_000_000_000,
                    write_back_bytes: 8 * u64::from(n) * chunk,
                    plm: true,
                }),
                rebuild: None,
                fast_fail_ns,
                bitmap_region_rows: None,
            },
            &VolumeParams {
                member_sizes_bytes: &sizes,
                block_bytes: 512,
                tags: 1,
                len_bytes_max: len_max,
            },
        )
        .unwrap();
        let size = v.size_bytes();
        let mut d = SyncDriver::new(v, &sizes, 1, len_max);
        // Written and flushed (the members hold data and parity), in member 0's turn.
        let bytes: Vec<u8> = (0..size).map(|i| (i as u8).wrapping_mul(29) ^ 5).collect();
        for off in (0..size).step_by(chunk as usize) {
            d.write(off, &bytes[off as usize..(off + chunk) as usize])
                .unwrap();
        }
        d.flush().unwrap();
        let before = d.host().volume().stats();
        if let Some((m, ns)) = busy {
            d.busy = vec![(m, ns)];
        }
        for off in (0..size).step_by(chunk as usize) {
            let got = d.read(off, chunk as u32).unwrap();
            assert_eq!(&got[..], &bytes[off as usize..(off + chunk) as usize]);
        }
        let st = d.host().volume().stats();
        let delta = |k: &str| st[k].as_u64().unwrap() - before[k].as_u64().unwrap();
        assert!(st["failed_member"].is_null(), "{st}");
        (
            delta("fast_fail_rebuilt"),
            delta("rebuilt_pieces"),
            delta("fast_fail_reread"),
        )
    };
    // Member 0 busy for 5 ms, beyond the 1 ms threshold: its 6 pieces are rebuilt.
    assert_eq!(run(Some(1_000_000), Some((0, 5_000_000))), (6, 6, 0));
    // Busy for 0.5 ms, within it: every piece is read where it is.
    assert_eq!(run(Some(1_000_000), Some((0, 500_000))), (0, 0, 0));
    assert_eq!(run(Some(1_000_000), None), (0, 0, 0));
    // A member in its deterministic window gets plain reads (rebuilding its piece would read
    // the owner): busy or not, nothing of it is rebuilt.
    assert_eq!(run(Some(1_000_000), Some((1, 5_000_000))), (0, 0, 0));
    // Without fast-fail the owner's pieces are rebuilt up front, busy or not.
    assert_eq!(run(None, None), (0, 6, 0));
}
