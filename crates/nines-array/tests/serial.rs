//! The serial array (paper 003) against a flat shadow: random writes, trims and reads, some of
//! them in flight together, through the synchronous in-memory driver, over members so small that
//! the front-end rotates and xGC cleans segments many times; every read is verified. And the
//! invariants: xGC and its trims never touch the front-end, client writes only go to it.

use nines_array::testing::SyncDriver;
use nines_array::{
    BufRef, CmdOp, LayoutSpec, SerialSpec, VolIo, VolOp, Volume, VolumeParams, build,
};
use proptest::prelude::*;

const UNIT: u64 = 4096;

fn spec(column_members: u32, gc_depth: u32) -> SerialSpec {
    SerialSpec {
        column_members,
        stripe_bytes: 8192,
        segment_bytes: 16 * 1024 * u64::from(column_members),
        unit_bytes: UNIT as u32,
        rotate_free: 1,
        gc_start: 2,
        gc_stop: 3,
        gc_depth,
        move_bytes: 8192,
        start_full_bytes: 0,
        persist: false,
        zone_size_bytes: 0,
        zone_capacity_bytes: 0,
    }
}

#[derive(Clone, Debug)]
enum Step {
    /// `ios` requests submitted together (distinct tags): (write?, unit, units, seed).
    Batch(Vec<(u8, u64, u32, u8)>),
}

fn steps(units: u64, tags: u32) -> impl Strategy<Value = Vec<Step>> {
    let io = (0u8..10, 0..units, 1u32..9, any::<u8>());
    prop::collection::vec(
        prop::collection::vec(io, 1..=tags as usize).prop_map(Step::Batch),
        50..250,
    )
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
    d.trace = Some(Vec::new());
    d
}

/// Runs the steps against a shadow; every read (and a final read of everything) must match.
fn run(d: &mut SyncDriver, tags: u32, steps: &[Step]) -> Result<(), TestCaseError> {
    let size = d.host().volume().size_bytes();
    let units = size / UNIT;
    let mut shadow = vec![0u8; size as usize];
    for st in steps {
        let Step::Batch(ios) = st;
        let mut vios = Vec::new();
        let mut reads = Vec::new();
        // Writes of a batch must not overlap each other or a read of the batch (the order
        // in flight decides those), so later overlapping requests are dropped.
        let mut taken: Vec<(u64, u64)> = Vec::new();
        for (tag, &(kind, u, n, seed)) in ios.iter().take(tags as usize).enumerate() {
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
            if op == VolOp::Write {
                let bytes: Vec<u8> = (0..len)
                    .map(|i| ((i / 512) as u8).wrapping_mul(31) ^ seed ^ (u as u8))
                    .collect();
                d.data_mut().client[tag as usize][..len as usize].copy_from_slice(&bytes);
                shadow[off as usize..(off + len) as usize].copy_from_slice(&bytes);
            }
            if op == VolOp::Trim {
                shadow[off as usize..(off + len) as usize].fill(0);
            }
            if op == VolOp::Read {
                d.data_mut().client[tag as usize].fill(0xEE);
                reads.push((tag, off, len));
            }
            vios.push(VolIo {
                tag,
                op,
                offset_bytes: off,
                len_bytes: len as u32,
                fua: false,
            });
        }
        let done = d.run(&vios);
        for (tag, r) in done {
            prop_assert_eq!(r, nines_array::IoResult::Ok, "tag {}", tag);
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

/// xGC (scratch-buffer reads and writes) never goes to the front-end's members, nor does the
/// trim of a cleaned segment (a segment never written, trimmed before its first write, may be
/// on the front-end). Checked when each command executes: GC leaves a column before it can
/// become the front-end, and the rotation waits for its commands there to complete. Segments
/// are 16 KiB per member here.
fn front_untouched_by_gc(d: &SyncDriver) -> Result<u32, TestCaseError> {
    let mut written = std::collections::HashSet::new();
    let mut gc_cmds = 0;
    for (c, front) in d.trace.as_ref().unwrap() {
        let front = front.clone().unwrap();
        let seg = (c.member, c.offset_bytes / (16 * 1024));
        let gc = matches!(c.buf, BufRef::Scratch { .. })
            || (c.op == CmdOp::Trim && written.contains(&seg));
        gc_cmds += u32::from(gc);
        prop_assert!(
            !(gc && front.contains(&c.member)),
            "GC command {:?} on the front-end {:?}",
            c,
            front
        );
        if c.op == CmdOp::Write {
            written.insert(seg);
        }
    }
    Ok(gc_cmds)
}

/// Every member receives its writes (client and GC alike) one segment at a time: a segment is
/// written whole before the next segment of that member gets a write. A segment left part-written
/// (a GC segment sealed when its column became the front-end) shares the members' flash blocks
/// with the next one, so trimming either leaves the device's own GC data to move, on the
/// front-end too. Returns the number of segments completed. Segments are 16 KiB per member.
fn segments_written_whole(d: &SyncDriver) -> Result<u32, TestCaseError> {
    const SEG: u64 = 16 * 1024;
    let mut cur: std::collections::HashMap<u32, (u64, u64)> = Default::default();
    let mut whole = 0;
    for (c, _) in d.trace.as_ref().unwrap() {
        if c.op != CmdOp::Write {
            continue;
        }
        let seg = c.offset_bytes / SEG;
        let e = cur.entry(c.member).or_insert((seg, 0));
        // A new segment, or the same one again after it was cleaned and trimmed.
        if e.0 != seg || e.1 == SEG {
            prop_assert_eq!(
                e.1,
                SEG,
                "member {} segment {} left with {} bytes written when segment {} was started",
                c.member,
                e.0,
                e.1,
                seg
            );
            *e = (seg, 0);
            whole += 1;
        }
        e.1 += u64::from(c.len_bytes);
    }
    Ok(whole)
}

/// GC moves (a scratch read, then the write of that scratch slot): how many wrote to the member
/// they read from, of how many.
fn gc_moves_onto_their_source(d: &SyncDriver) -> (u32, u32) {
    let mut read_from: std::collections::HashMap<u32, u32> = Default::default();
    let (mut same, mut all) = (0, 0);
    for (c, _) in d.trace.as_ref().unwrap() {
        if let BufRef::Scratch { index, .. } = c.buf {
            match c.op {
                CmdOp::Read => {
                    read_from.insert(index, c.member);
                }
                CmdOp::Write => {
                    if let Some(m) = read_from.remove(&index) {
                        all += 1;
                        same += u32::from(m == c.member);
                    }
                }
                _ => {}
            }
        }
    }
    (same, all)
}

/// The most GC writes in flight to one member at once. A GC write is sent when its read
/// completes, which the synchronous driver does right after executing the read, so it is in
/// flight from its read's place in the trace to its own.
fn gc_writes_in_flight_max(d: &SyncDriver) -> u32 {
    let trace = d.trace.as_ref().unwrap();
    let mut read_at: std::collections::HashMap<u32, usize> = Default::default();
    let mut spans = Vec::new();
    for (i, (c, _)) in trace.iter().enumerate() {
        if let BufRef::Scratch { index, .. } = c.buf {
            match c.op {
                CmdOp::Read => {
                    read_at.insert(index, i);
                }
                CmdOp::Write => {
                    if let Some(r) = read_at.remove(&index) {
                        spans.push((c.member, r, i));
                    }
                }
                _ => {}
            }
        }
    }
    let mut max = 0;
    for i in 0..trace.len() {
        for m in 0..4 {
            let n = spans
                .iter()
                .filter(|&&(mm, r, w)| mm == m && r < i && i <= w)
                .count() as u32;
            max = max.max(n);
        }
    }
    max
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    /// Four columns of one member, one request at a time and up to four together.
    #[test]
    fn serial_matches_a_flat_array(s in steps(60, 4), tags in 1u32..5, depth in 1u32..4) {
        let mut d = driver(spec(1, depth), 4, 128 * 1024, tags);
        run(&mut d, tags, &s)?;
        front_untouched_by_gc(&d)?;
        segments_written_whole(&d)?;
    }

    /// Two columns of two members striped (the only back-end is the next front-end, so a
    /// rotation waits for GC to leave it).
    #[test]
    fn serial_two_wide_columns_match_a_flat_array(s in steps(60, 3), tags in 1u32..4) {
        let mut d = driver(spec(2, 2), 4, 128 * 1024, tags);
        run(&mut d, tags, &s)?;
        front_untouched_by_gc(&d)?;
    }

    /// Started full (every unit mapped in order over members of zeros): GC has no free
    /// back-end segment at first and must make room from what the writes invalidate.
    #[test]
    fn serial_started_full_matches_a_flat_array(s in steps(60, 2), tags in 1u32..3) {
        let mut sp = spec(1, 2);
        sp.start_full_bytes = sp.size_bytes(128 * 1024, 4);
        let mut d = driver(sp, 4, 128 * 1024, tags);
        let st = d.host().volume().stats();
        prop_assert_eq!(st["valid_bytes"].as_u64(), Some(d.host().volume().size_bytes()));
        run(&mut d, tags, &s)?;
        front_untouched_by_gc(&d)?;
    }
}

/// Overwriting a region many times over keeps the front-end rotating and xGC busy: check it
/// happened, that the counters add up, and that everything still reads back.
#[test]
fn serial_rotates_collects_and_trims_under_overwrites() {
    let mut d = driver(spec(1, 2), 4, 128 * 1024, 1);
    // Each member command takes 1 us, so waits take time.
    d.cmd_ns = 1000;
    let size = d.host().volume().size_bytes();
    // 3/4 of the volume, overwritten in 8-unit writes at pseudo-random places, 20 times over.
    let region = size / UNIT * 3 / 4;
    let mut shadow = vec![0u8; size as usize];
    let mut x = 12345u64;
    let mut written = 0u64;
    while written < 20 * region * UNIT {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let u = (x >> 33) % (region - 7);
        let bytes: Vec<u8> = (0..8 * UNIT).map(|i| (i as u8) ^ (x >> 56) as u8).collect();
        d.write(u * UNIT, &bytes).unwrap();
        shadow[(u * UNIT) as usize..((u + 8) * UNIT) as usize].copy_from_slice(&bytes);
        written += 8 * UNIT;
    }
    for off in (0..size).step_by(8 * UNIT as usize) {
        let len = (size - off).min(8 * UNIT) as u32;
        assert_eq!(
            d.read(off, len).unwrap(),
            &shadow[off as usize..off as usize + len as usize],
            "at {off}"
        );
    }
    let st = d.host().volume().stats();
    let n = |k: &str| st[k].as_u64().unwrap();
    assert!(n("rotations") >= 10, "{st}");
    assert!(n("gc_victims") >= 10 && n("gc_units_moved") > 0, "{st}");
    assert!(n("segments_trimmed") >= n("gc_victims"), "{st}");
    // Writes waited (the first for the trims, later ones for GC), and the time the queue was
    // blocked is split by cause, within the run's time.
    let blocked =
        n("write_wait_ns_rotation_drain") + n("write_wait_ns_trim") + n("write_wait_ns_no_room");
    assert!(n("write_waits") > 0 && n("write_wait_ns_trim") > 0, "{st}");
    assert!(blocked > 0 && blocked <= d.now_ns(), "{st}");
    assert_eq!(n("client_write_bytes"), written);
    // Every GC byte read was written (no move failed), and the WAF counts them.
    assert_eq!(n("gc_read_bytes"), n("gc_write_bytes"));
    let waf = st["array_write_amplification"].as_f64().unwrap();
    let expect = (written + n("gc_write_bytes")) as f64 / written as f64;
    assert!((waf - expect).abs() < 1e-9 && waf > 1.0, "{st}");
    // What is valid is exactly what the shadow holds outside never-written units.
    assert_eq!(n("valid_bytes"), {
        let mut w = vec![false; (size / UNIT) as usize];
        let mut x = 12345u64;
        let mut done = 0u64;
        while done < written {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let u = (x >> 33) % (region - 7);
            w[u as usize..u as usize + 8].fill(true);
            done += 8 * UNIT;
        }
        w.iter().filter(|&&b| b).count() as u64 * UNIT
    });
    // Roles over time: one entry per rotation, each a different column than the one before.
    let roles = st["rotation_front"].as_array().unwrap();
    assert_eq!(roles.len() as u64, n("rotations"));
    assert_eq!(st["rotation_t_ns"].as_array().unwrap().len(), roles.len());
    let mut prev = 0;
    for r in roles {
        let f = r.as_u64().unwrap();
        assert_ne!(f, prev);
        prev = f;
    }
    assert!(front_untouched_by_gc(&d).unwrap() > 100, "GC ran");
    // xGC writes to another back-end than the victim's where one has room (two back-ends
    // besides the victim's here): its reads do not queue behind its programs, and its writes
    // are not bound by one member. Before, 19 of 27 moves wrote onto their source member.
    let (same, all) = gc_moves_onto_their_source(&d);
    assert!(
        all > 20 && same * 10 <= all,
        "{same} of {all} GC moves onto their source"
    );
    // GC writes in flight to one column at most gc_depth / (columns - 1), rounded up: 2 moves
    // over 3 back-ends, so one per member (before the cap: 2).
    assert_eq!(gc_writes_in_flight_max(&d), 1);
    assert!(
        segments_written_whole(&d).unwrap() > 50,
        "segments completed"
    );
}

/// Unaligned requests are refused with EINVAL (the mapping unit is the volume's block), and
/// options that cannot work are refused with the option named.
#[test]
fn serial_refuses_unaligned_ios_and_bad_options() {
    let mut d = driver(spec(1, 1), 4, 128 * 1024, 1);
    assert_eq!(d.write(512, &[1u8; 4096]), Err(22));
    assert_eq!(d.read(0, 512), Err(22));
    assert_eq!(d.host().volume().block_bytes(), 4096);
    let e = |s: SerialSpec, n: usize, bytes: u64| {
        build(
            &LayoutSpec::Serial(s),
            &VolumeParams {
                member_sizes_bytes: &vec![bytes; n],
                block_bytes: 512,
                tags: 1,
                len_bytes_max: 4096,
            },
        )
        .err()
        .unwrap()
        .to_string()
    };
    assert!(e(spec(1, 1), 1, 1 << 20).contains("two columns"));
    assert!(e(spec(2, 1), 3, 1 << 20).contains("two columns"));
    assert!(e(spec(1, 1), 4, 32 * 1024).contains("--segment"));
    let mut s = spec(1, 1);
    s.rotate_free = 0;
    assert!(e(s, 4, 1 << 20).contains("--rotate-free"));
    let mut s = spec(1, 1);
    s.stripe_bytes = 6000;
    assert!(e(s, 4, 1 << 20).contains("--stripe"));
}

/// A FLUSH on a tag whose last request was a write completes once every member flushed (it
/// used to wait for the write's units forever).
#[test]
fn a_flush_after_a_write_on_the_same_tag_completes() {
    let mut d = driver(spec(1, 2), 4, 128 * 1024, 1);
    d.write(0, &[7u8; 8192]).unwrap();
    d.flush().unwrap();
    let flushed: Vec<u32> = d
        .trace
        .as_ref()
        .unwrap()
        .iter()
        .filter(|(c, _)| c.op == CmdOp::Flush)
        .map(|(c, _)| c.member)
        .collect();
    assert_eq!(flushed, vec![0, 1, 2, 3]);
    assert_eq!(d.read(0, 8192).unwrap(), vec![7u8; 8192]);
}
