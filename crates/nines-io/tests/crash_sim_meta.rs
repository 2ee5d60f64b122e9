//! The crash simulator (nines_array::crashsim, issue 38) over raid0 and raid5 as `nines serve`
//! serves them over files: with member superblocks and, for raid5, the write-intent bitmap, its
//! resync of dirty regions before serving, the D/ND policy (turns, write-back buffer), a
//! rebuild onto a replacement and a degraded array. After every crash the members' images are
//! written to files and brought back by `array_meta::open_array`, the server's own start-up
//! (superblocks assembled, dirty regions resynced, the bitmap cleared, the start's superblocks
//! written), read back, and the volume is built with the layout and sizes it returned.
//!
//! A raid5 that crashed while degraded (or rebuilding) and had writes in flight is refused by
//! the start-up (the RAID5 write hole: `--start-dirty-degraded`); the hook then starts it as
//! the refusal says, and the simulator allows garbage only in the failed member's chunks of
//! the regions the bitmap marked dirty (counted as suspect units; anywhere else is a
//! violation).
//!
//! Seeds and crash points: `NINES_CRASH_SIM_SEEDS`, `NINES_CRASH_SIM_POINTS`,
//! `NINES_CRASH_SIM_SEED` as in nines-array's tests/crash_sim.rs.

use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use nines_array::crashsim::{CrashConfig, Fault, Outcome, Recovered, Recovery, explore};
use nines_array::meta::{SB_BYTES, Superblock};
use nines_array::raid5::{BITMAP_PAGE_BYTES, parse_bitmap_page};
use nines_array::{DndSpec, LayoutSpec, Raid5, Raid5Options, RebuildSpec};
use nines_io::array_meta::{self, MetaArgs, MetaError, Verb};

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

const PAGE: usize = 4096;

/// Writes `img` to `path` sparsely (all-zero pages stay holes, as a member never written is).
fn write_member(path: &PathBuf, img: &[u8]) -> std::io::Result<()> {
    let f = std::fs::File::create(path)?;
    f.set_len(img.len() as u64)?;
    for (i, page) in img.chunks(PAGE).enumerate() {
        if page.iter().any(|&b| b != 0) {
            f.write_all_at(page, (i * PAGE) as u64)?;
        }
    }
    Ok(())
}

/// The failed member's chunks, as volume byte ranges, in the rows of the regions any member's
/// bitmap marks dirty: what a degraded start over a dirty array may serve wrong.
fn write_hole(images: &[Vec<u8>], chunk: u64, left_out: u32) -> Result<Vec<(u64, u64)>, String> {
    let n = images.len() as u32;
    let mut sb = None;
    let mut dirty: Vec<bool> = Vec::new();
    for (k, img) in images.iter().enumerate() {
        if k as u32 == left_out {
            continue;
        }
        let Ok(s) = Superblock::decode(&img[img.len() - SB_BYTES as usize..]) else {
            continue;
        };
        let rows = s.member_data_bytes / chunk;
        let regions = rows.div_ceil(s.bitmap_region_rows.max(1));
        let at = s.member_data_bytes as usize;
        let page = &img[at..at + BITMAP_PAGE_BYTES as usize];
        if let Some(bits) = parse_bitmap_page(page, s.bitmap_region_rows, regions) {
            dirty.resize(bits.len(), false);
            for (d, b) in dirty.iter_mut().zip(bits) {
                *d |= b;
            }
        }
        sb = Some(s);
    }
    let sb = sb.ok_or("no member in service has a superblock")?;
    let rows = sb.member_data_bytes / chunk;
    let sizes = vec![sb.member_data_bytes + BITMAP_PAGE_BYTES as u64; n as usize];
    let geometry =
        Raid5::new(chunk, &sizes, 512, 1, Raid5Options::default()).map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    for (r, _) in dirty.iter().enumerate().filter(|x| *x.1) {
        let first = r as u64 * sb.bitmap_region_rows;
        for row in first..(first + sb.bitmap_region_rows).min(rows) {
            if let Some(j) = (0..n - 1).find(|&j| geometry.data_member(row, j) == left_out) {
                let at = (row * u64::from(n - 1) + u64::from(j)) * chunk;
                out.push((at, at + chunk));
            }
        }
    }
    Ok(out)
}

/// A recovery that runs `nines serve`'s start-up over files holding the images.
fn serve_startup(spec: LayoutSpec, sizes: Vec<u64>) -> Recovery {
    let base = if std::path::Path::new("/dev/shm").is_dir() {
        PathBuf::from("/dev/shm")
    } else {
        std::env::temp_dir()
    };
    let dir = tempfile::tempdir_in(base).expect("a temporary directory");
    let paths: Vec<PathBuf> = (0..sizes.len())
        .map(|k| dir.path().join(format!("m{k}")))
        .collect();
    let lock = Mutex::new(dir);
    let (chunk, left_out) = match &spec {
        LayoutSpec::Raid5 {
            chunk_bytes,
            failed,
            rebuild,
            ..
        } => (*chunk_bytes, rebuild.map(|r| r.member).or(*failed)),
        _ => (0, None),
    };
    Recovery(Arc::new(move |images: &mut [Vec<u8>]| {
        let _dir = lock.lock().expect("the hook's directory");
        for (p, img) in paths.iter().zip(images.iter()) {
            write_member(p, img).map_err(|e| format!("cannot write {}: {e}", p.display()))?;
        }
        let mut args = MetaArgs {
            paths: &paths,
            create: false,
            read_only: false,
            start_dirty_degraded: false,
            created: &[],
            verb: Verb::Serve,
        };
        let mut suspect_bytes = Vec::new();
        let opened = match array_meta::open_array(&spec, &sizes, &args, &mut |_| {}) {
            Err(MetaError::Refused(m)) if m.contains("RAID5 write hole") && left_out.is_some() => {
                // What the refusal says to do; the write hole is where it may show.
                suspect_bytes = write_hole(images, chunk, left_out.expect("left out"))?;
                args.start_dirty_degraded = true;
                array_meta::open_array(&spec, &sizes, &args, &mut |_| {})
            }
            r => r,
        }
        .map_err(|e| e.to_string())?;
        for (p, img) in paths.iter().zip(images.iter_mut()) {
            let f = std::fs::File::open(p).map_err(|e| e.to_string())?;
            f.read_exact_at(img, 0).map_err(|e| e.to_string())?;
        }
        if chunk > 0 && left_out.is_none() {
            // A healthy raid5 is served only with every row's parity agreeing with its data.
            let data_bytes = opened.sizes[0] - BITMAP_PAGE_BYTES as u64;
            for at in (0..data_bytes as usize).step_by(chunk as usize) {
                let c = chunk as usize;
                let bad = (0..c).any(|i| images.iter().fold(0u8, |x, m| x ^ m[at + i]) != 0);
                if bad {
                    return Err(format!(
                        "row {} has parity disagreeing with its data after the start-up",
                        at / c
                    ));
                }
            }
        }
        // The writer is dropped unstopped: the next crash comes before any clean stop.
        drop(opened.writer);
        Ok(Recovered {
            spec: opened.spec,
            member_sizes_bytes: opened.sizes,
            suspect_bytes,
        })
    }))
}

/// Members of 256 KiB of data plus the bitmap page and the superblock: one bitmap region
/// (regions cover at least 1 MiB of each member), so any write dirties it.
const MEMBER_BYTES: u64 = 256 * 1024 + BITMAP_PAGE_BYTES as u64 + SB_BYTES;

fn config(spec: LayoutSpec, fault: Fault, member_bytes: u64) -> CrashConfig {
    let sizes = vec![member_bytes; 3];
    CrashConfig {
        recovery: Some(serve_startup(spec.clone(), sizes.clone())),
        spec,
        member_sizes_bytes: sizes,
        unit_bytes: 4096,
        tags: 6,
        units_max: 8,
        fault,
        commands_per_crash: 200,
        region_units: 0,
        zeroes: true,
    }
}

fn raid5(failed: Option<u32>, dnd: Option<DndSpec>, rebuild: Option<RebuildSpec>) -> LayoutSpec {
    LayoutSpec::Raid5 {
        chunk_bytes: 8192,
        failed,
        dnd,
        rebuild,
        fast_fail_ns: None,
        // The start-up sets it from the superblocks.
        bitmap_region_rows: None,
    }
}

/// D/ND turns of 40 member commands (the simulator's clock moves 1 us a command) and a
/// write-back buffer of 64 KiB: writes wait in it for their member's turn, flushes drain it.
fn dnd(plm: bool) -> Option<DndSpec> {
    Some(DndSpec {
        window_ns: 40_000,
        write_back_bytes: 64 * 1024,
        plm,
    })
}

/// Seeds that once broke an invariant; each runs on every test run.
/// raid5-dnd-power: a FUA write (and FUA TRIM/WRITE_ZEROES) under D/ND was acknowledged from
/// the write-back buffer, before it reached any member; a power loss then lost it.
const REGRESSIONS: &[(&str, u64)] = &[
    ("raid5-dnd-power", 1_592_590_336),
    ("raid5-dnd-power", 1_592_590_337),
];

fn run(name: &str, cfg: &CrashConfig) -> Outcome {
    let seeds = env_u64("NINES_CRASH_SIM_SEEDS", 8);
    let points = env_u64("NINES_CRASH_SIM_POINTS", 160);
    let one = std::env::var("NINES_CRASH_SIM_SEED")
        .ok()
        .and_then(|v| v.parse::<u64>().ok());
    let mut list: Vec<u64> = match one {
        Some(s) => vec![s],
        None => (0..seeds).map(|i| 0x5eed_0000 + i).collect(),
    };
    list.extend(REGRESSIONS.iter().filter(|r| r.0 == name).map(|r| r.1));
    let mut total = Outcome::default();
    for seed in list {
        let o = explore(cfg, seed, points);
        total.crash_points += o.crash_points;
        total.member_commands += o.member_commands;
        total.acked_writes += o.acked_writes;
        total.flushes += o.flushes;
        total.suspect_units += o.suspect_units;
        total.violations.extend(o.violations);
    }
    eprintln!(
        "crash-sim {name}: {} crash points, {} member commands, {} acknowledged writes, {} \
         flushes, {} suspect units, {} violations",
        total.crash_points,
        total.member_commands,
        total.acked_writes,
        total.flushes,
        total.suspect_units,
        total.violations.len()
    );
    for v in total.violations.iter().take(5) {
        eprintln!(
            "crash-sim {name}: seed {} crash {}: {}",
            v.seed, v.crash_point, v.what
        );
    }
    total
}

fn assert_none(name: &str, o: &Outcome) {
    assert!(
        o.acked_writes > 0 && o.flushes > 0,
        "{name}: nothing was exercised"
    );
    assert!(
        o.violations.is_empty(),
        "{name}: {} violations; first: seed {} crash {}: {} (replay with NINES_CRASH_SIM_SEED={})",
        o.violations.len(),
        o.violations[0].seed,
        o.violations[0].crash_point,
        o.violations[0].what,
        o.violations[0].seed
    );
}

#[test]
fn raid0_with_superblocks_survives_power_loss() {
    let spec = LayoutSpec::Raid0 { stripe_bytes: 8192 };
    let o = run(
        "raid0-sb-power",
        &config(spec, Fault::PowerLoss, 256 * 1024 + SB_BYTES),
    );
    assert_none("raid0-sb-power", &o);
}

#[test]
fn raid5_with_bitmap_and_resync_survives_power_loss() {
    let c = config(raid5(None, None, None), Fault::PowerLoss, MEMBER_BYTES);
    let o = run("raid5-bitmap-power", &c);
    assert_none("raid5-bitmap-power", &o);
    assert_eq!(o.suspect_units, 0, "a healthy array serves no write hole");
}

#[test]
fn raid5_dnd_with_bitmap_survives_power_loss() {
    let c = config(raid5(None, dnd(true), None), Fault::PowerLoss, MEMBER_BYTES);
    let o = run("raid5-dnd-power", &c);
    assert_none("raid5-dnd-power", &o);
    assert_eq!(o.suspect_units, 0, "a healthy array serves no write hole");
}

#[test]
fn raid5_sched_with_bitmap_survives_process_kills() {
    let c = config(
        raid5(None, dnd(false), None),
        Fault::ProcessKill,
        MEMBER_BYTES,
    );
    let o = run("raid5-sched-kill", &c);
    assert_none("raid5-sched-kill", &o);
    assert_eq!(o.suspect_units, 0, "a healthy array serves no write hole");
}

#[test]
fn raid5_degraded_loses_nothing_outside_the_write_hole() {
    let c = config(raid5(Some(1), None, None), Fault::PowerLoss, MEMBER_BYTES);
    let o = run("raid5-degraded-power", &c);
    assert_none("raid5-degraded-power", &o);
}

#[test]
fn raid5_rebuilding_loses_nothing_outside_the_write_hole() {
    let rb = RebuildSpec {
        member: 2,
        rate_bytes_per_s: 8192 * 10_000,
    };
    let c = config(
        raid5(None, None, Some(rb)),
        Fault::ProcessKill,
        MEMBER_BYTES,
    );
    let o = run("raid5-rebuild-kill", &c);
    assert_none("raid5-rebuild-kill", &o);
}
