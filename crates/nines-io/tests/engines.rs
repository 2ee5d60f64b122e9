//! Every engine on real O_DIRECT files and zram devices: data written is data read, across
//! engines; many targets through one engine context; the queue bound; the IOPOLL refusal.

mod common;

use std::path::Path;

use common::*;
use nines_core::op::Op;
use nines_io::buf::AlignedBuf;
use nines_io::engine::{self, Completion, EngineError, EngineKind, EngineOptions, IoDesc};
use nines_io::target::{Target, TargetOptions};

/// The engines that work on any device here (IOPOLL needs poll queues, which nothing here has).
fn working_engines() -> Vec<(EngineKind, EngineOptions, &'static str)> {
    vec![
        (EngineKind::Psync, EngineOptions::default(), "psync"),
        (EngineKind::Libaio, EngineOptions::default(), "libaio"),
        (EngineKind::IoUring, EngineOptions::default(), "io_uring"),
        (
            EngineKind::IoUring,
            EngineOptions {
                sqpoll: true,
                sqpoll_cpu: Some(0),
            },
            "io_uring+sqpoll",
        ),
    ]
}

fn file_target(dir: &Path, name: &str, size_bytes: u64) -> Target {
    let opts = TargetOptions {
        write: true,
        create_size_bytes: Some(size_bytes),
        ..Default::default()
    };
    Target::open(&dir.join(name), &opts).expect("open temp file target")
}

fn device_target(path: &Path) -> Target {
    let opts = TargetOptions {
        write: true,
        allow_writes: true,
        ..Default::default()
    };
    Target::open(path, &opts).expect("open blank zram")
}

/// Writes with each engine, then reads the whole region back with every engine and compares.
fn cross_check(targets: &[Target], bs: u32, blocks: u64) {
    let fds: Vec<_> = targets.iter().map(|t| t.fd()).collect();
    for (wi, (wkind, wopts, wname)) in working_engines().into_iter().enumerate() {
        let tag = 1 + wi as u8;
        let depth = if wkind.is_async() { 16 } else { 1 };
        let mut w = engine::build(wkind, depth as u32, wopts).expect(wname);
        for &fd in &fds {
            w.add_target(fd).unwrap();
        }
        let plan = plan_all_blocks(fds.len(), blocks, bs, Op::Write);
        let res = drive(w.as_mut(), &plan, depth, tag, |_, _| {});
        assert!(
            res.iter().all(|&r| r == bs as i64),
            "{wname} writes: {:?}",
            &res[..8.min(res.len())]
        );
        drop(w);
        for (rkind, ropts, rname) in working_engines() {
            let depth = if rkind.is_async() { 8 } else { 1 };
            let mut r = engine::build(rkind, depth as u32, ropts).expect(rname);
            for &fd in &fds {
                r.add_target(fd).unwrap();
            }
            let plan = plan_all_blocks(fds.len(), blocks, bs, Op::Read);
            let mut checked = 0usize;
            let mut want = expect_pattern(tag);
            let res = drive(r.as_mut(), &plan, depth, tag, |io, data| {
                want(io, data);
                checked += 1;
            });
            assert!(
                res.iter().all(|&x| x == bs as i64),
                "{rname} reads of {wname}'s data: {res:?}"
            );
            assert_eq!(
                checked,
                plan.len(),
                "{rname} checked every block written by {wname}"
            );
        }
    }
}

#[test]
fn engines_cross_check_on_direct_files() {
    let dir = direct_dir();
    let targets: Vec<Target> = (0..3)
        .map(|i| file_target(dir.path(), &format!("t{i}"), 1 << 20))
        .collect();
    for t in &targets {
        assert_eq!(t.size_bytes(), 1 << 20);
        assert!(!t.is_block_device());
    }
    cross_check(&targets, 4096, 64);
}

#[test]
fn engines_cross_check_on_zram() {
    let Some(z1) = Zram::create("32M") else {
        return;
    };
    let Some(z2) = Zram::create("32M") else {
        return;
    };
    let targets = vec![device_target(&z1.path), device_target(&z2.path)];
    assert_eq!(targets[0].logical_block_bytes(), 4096);
    cross_check(&targets, 16384, 32);
    drop(targets);
}

#[test]
fn many_targets_share_one_context() {
    let dir = direct_dir();
    let n = 12;
    let targets: Vec<Target> = (0..n)
        .map(|i| file_target(dir.path(), &format!("m{i}"), 256 << 10))
        .collect();
    for (kind, opts, name) in working_engines()
        .into_iter()
        .filter(|(k, _, _)| k.is_async())
    {
        let mut e = engine::build(kind, 32, opts).expect(name);
        for (i, t) in targets.iter().enumerate() {
            assert_eq!(e.add_target(t.fd()).unwrap(), i, "{name} slots are dense");
        }
        // Each target gets its own pattern (the pattern depends on the target slot).
        let plan = plan_all_blocks(n, 64, 4096, Op::Write);
        let res = drive(e.as_mut(), &plan, 32, 9, |_, _| {});
        assert!(res.iter().all(|&r| r == 4096), "{name}");
        let plan = plan_all_blocks(n, 64, 4096, Op::Read);
        let res = drive(e.as_mut(), &plan, 32, 9, expect_pattern(9));
        assert!(res.iter().all(|&r| r == 4096), "{name}");
    }
    // And a plain read of one file agrees: the bytes really are on the file, per target.
    let mut buf = AlignedBuf::new(4096);
    let t = &targets[7];
    // SAFETY: buf is 4096 aligned bytes.
    let got = unsafe { libc::pread(t.fd(), buf.as_mut_ptr().cast(), 4096, 8192) };
    assert_eq!(got, 4096);
    for (i, &b) in buf.as_slice().iter().enumerate() {
        assert_eq!(b, pattern_byte(9, 7, 8192, i));
    }
}

#[test]
fn io_uring_fixed_buffers_move_the_same_bytes() {
    let dir = direct_dir();
    let targets: Vec<Target> = (0..2)
        .map(|i| file_target(dir.path(), &format!("fb{i}"), 1 << 20))
        .collect();
    let uring = |opts| {
        let mut e = engine::build(EngineKind::IoUring, 16, opts).unwrap();
        for t in &targets {
            e.add_target(t.fd()).unwrap();
        }
        e
    };
    let writes = plan_all_blocks(2, 128, 8192, Op::Write);
    let reads = plan_all_blocks(2, 128, 8192, Op::Read);
    for (opts, name) in [
        (EngineOptions::default(), "io_uring"),
        (
            EngineOptions {
                sqpoll: true,
                sqpoll_cpu: None,
            },
            "io_uring+sqpoll",
        ),
    ] {
        // Writes from fixed buffers (each engine is dropped with the pool it registered).
        let (res, registered) = drive_with(uring(opts).as_mut(), &writes, 16, 21, true, |_, _| {});
        assert!(registered, "{name}: root may register buffers");
        assert!(res.iter().all(|&r| r == 8192), "{name}");
        // Read back by another engine, and by io_uring into fixed buffers.
        let mut r = engine::build(EngineKind::Libaio, 16, EngineOptions::default()).unwrap();
        for t in &targets {
            r.add_target(t.fd()).unwrap();
        }
        let res = drive(r.as_mut(), &reads, 16, 21, expect_pattern(21));
        assert!(res.iter().all(|&x| x == 8192), "{name}");
        let (res, _) = drive_with(
            uring(opts).as_mut(),
            &reads,
            16,
            21,
            true,
            expect_pattern(21),
        );
        assert!(res.iter().all(|&x| x == 8192), "{name}: fixed-buffer reads");
        // Buffers outside the registered ones still work (plain READ).
        let mut other = AlignedBuf::new(4096);
        let mut e = uring(opts);
        assert!(e.register_buffers(&[(other.as_mut_ptr(), 4096)]).unwrap());
        let res = drive(e.as_mut(), &reads, 16, 21, expect_pattern(21));
        assert!(
            res.iter().all(|&x| x == 8192),
            "{name}: unregistered buffers"
        );
        drop(e);
        drop(other);
    }
    // Other engines decline.
    let mut p = engine::build(EngineKind::Libaio, 4, EngineOptions::default()).unwrap();
    let mut b = AlignedBuf::new(4096);
    assert!(!p.register_buffers(&[(b.as_mut_ptr(), 4096)]).unwrap());
}

#[test]
fn queue_full_is_an_error_not_a_hang() {
    let dir = direct_dir();
    let t = file_target(dir.path(), "q", 1 << 20);
    for (kind, opts, name) in working_engines() {
        let mut e = engine::build(kind, 2, opts).expect(name);
        e.add_target(t.fd()).unwrap();
        let mut bufs: Vec<AlignedBuf> = (0..3).map(|_| AlignedBuf::new(4096)).collect();
        let io = |i: usize, bufs: &mut Vec<AlignedBuf>| IoDesc {
            target: 0,
            op: Op::Read,
            offset_bytes: 4096 * i as u64,
            len_bytes: 4096,
            buf: bufs[i].as_mut_ptr(),
            user_data: 100 + i as u64,
        };
        e.queue(io(0, &mut bufs)).unwrap();
        e.queue(io(1, &mut bufs)).unwrap();
        match e.queue(io(2, &mut bufs)) {
            Err(EngineError::QueueFull { depth_max: 2, .. }) => {}
            other => panic!("{name}: third I/O with depth 2: {other:?}"),
        }
        e.commit().unwrap();
        let mut out = [Completion::default(); 4];
        let mut got = Vec::new();
        for _ in 0..1000 {
            let n = e.reap(1, &mut out).unwrap();
            got.extend(out[..n].iter().map(|c| (c.user_data, c.result)));
            if got.len() == 2 {
                break;
            }
        }
        got.sort_unstable();
        assert_eq!(got, vec![(100, 4096), (101, 4096)], "{name}");
        // Reaping into an empty slice takes nothing.
        assert_eq!(e.reap(0, &mut []).unwrap(), 0, "{name}");
        // Room again once reaped.
        e.queue(io(2, &mut bufs)).unwrap();
        e.commit().unwrap();
        let n = e.reap(1, &mut out).unwrap();
        assert_eq!(
            (n, out[0].user_data, out[0].result),
            (1, 102, 4096),
            "{name}"
        );
    }
}

/// `submit_one` (the worker's per-I/O submission, fused in libaio) is `queue` then `commit` of
/// that one I/O: a refused descriptor fails its own I/O and frees its slot, an I/O already
/// queued goes with it, a full queue is an error and loses nothing.
#[test]
fn submit_one_is_queue_then_commit() {
    let dir = direct_dir();
    let t = file_target(dir.path(), "one", 1 << 20);
    for (kind, opts, name) in working_engines() {
        let mut e = engine::build(kind, 2, opts).expect(name);
        let bad = e.add_target(-1).unwrap();
        let good = e.add_target(t.fd()).unwrap();
        let mut bufs: Vec<AlignedBuf> = (0..3).map(|_| AlignedBuf::new(4096)).collect();
        let mut io = |target: usize, i: usize, user_data: u64| IoDesc {
            target,
            op: Op::Read,
            offset_bytes: 4096 * i as u64,
            len_bytes: 4096,
            buf: bufs[i].as_mut_ptr(),
            user_data,
        };
        let mut out = [Completion::default(); 4];
        let mut reap_all = |e: &mut dyn engine::Engine, want: usize| {
            let mut got = Vec::new();
            for _ in 0..1000 {
                let n = e.reap(1, &mut out).unwrap();
                got.extend(out[..n].iter().map(|c| (c.user_data, c.result)));
                if got.len() >= want {
                    break;
                }
            }
            got.sort_unstable();
            got
        };
        let ebadf = -(libc::EBADF as i64);
        // More rounds than slots: every slot, the failed ones too, is freed when reaped.
        for round in 0..3u64 {
            e.submit_one(io(bad, 0, round * 10)).unwrap();
            e.submit_one(io(good, 1, round * 10 + 1)).unwrap();
            assert_eq!(
                reap_all(e.as_mut(), 2),
                vec![(round * 10, ebadf), (round * 10 + 1, 4096)],
                "{name}: round {round}"
            );
        }
        // One queued, then one submitted: both go.
        e.queue(io(good, 0, 100)).unwrap();
        e.submit_one(io(good, 1, 101)).unwrap();
        // Full: refused, and the two in flight still complete.
        match e.submit_one(io(good, 2, 102)) {
            Err(EngineError::QueueFull { depth_max: 2, .. }) => {}
            other => panic!("{name}: third I/O with depth 2: {other:?}"),
        }
        assert_eq!(
            reap_all(e.as_mut(), 2),
            vec![(100, 4096), (101, 4096)],
            "{name}"
        );
    }
}

#[test]
fn a_bad_descriptor_fails_its_own_io_only() {
    let dir = direct_dir();
    let t = file_target(dir.path(), "good", 1 << 20);
    for (kind, opts, name) in working_engines() {
        let mut e = engine::build(kind, 4, opts).expect(name);
        let bad = e.add_target(-1).unwrap();
        let good = e.add_target(t.fd()).unwrap();
        let mut bufs: Vec<AlignedBuf> = (0..3).map(|_| AlignedBuf::new(4096)).collect();
        let mut got = Vec::new();
        // Twice, so the failed I/O's slot is reused.
        for round in 0..2u64 {
            for (i, target) in [bad, good, bad].into_iter().enumerate() {
                e.queue(IoDesc {
                    target,
                    op: Op::Read,
                    offset_bytes: 0,
                    len_bytes: 4096,
                    buf: bufs[i].as_mut_ptr(),
                    user_data: round * 10 + i as u64,
                })
                .unwrap();
            }
            e.commit().unwrap();
            let mut out = [Completion::default(); 4];
            let mut n = 0;
            for _ in 0..1000 {
                n += e.reap(1, &mut out[n..]).unwrap();
                if n == 3 {
                    break;
                }
            }
            got.extend(out[..n].iter().map(|c| (c.user_data, c.result)));
        }
        got.sort_unstable();
        let ebadf = -(libc::EBADF as i64);
        assert_eq!(
            got,
            vec![
                (0, ebadf),
                (1, 4096),
                (2, ebadf),
                (10, ebadf),
                (11, 4096),
                (12, ebadf)
            ],
            "{name}"
        );
    }
}

#[test]
fn misaligned_direct_io_completes_with_einval() {
    // On a block device (a filesystem may quietly fall back to buffered I/O instead).
    let Some(z) = Zram::create("16M") else { return };
    let t = device_target(&z.path);
    let lbs = t.logical_block_bytes() as u64;
    assert_eq!(lbs, 4096);
    for (kind, opts, name) in working_engines() {
        let mut e = engine::build(kind, 4, opts).expect(name);
        e.add_target(t.fd()).unwrap();
        let mut buf = AlignedBuf::new(8192);
        // Offset not a multiple of the logical block size: O_DIRECT refuses it.
        e.queue(IoDesc {
            target: 0,
            op: Op::Read,
            offset_bytes: lbs / 2,
            len_bytes: 4096,
            buf: buf.as_mut_ptr(),
            user_data: 7,
        })
        .unwrap();
        e.commit().unwrap();
        let mut out = [Completion::default(); 2];
        let mut n = 0;
        for _ in 0..1000 {
            n = e.reap(1, &mut out).unwrap();
            if n > 0 {
                break;
            }
        }
        assert_eq!(n, 1, "{name}");
        assert_eq!(
            out[0],
            Completion {
                user_data: 7,
                result: -(libc::EINVAL as i64)
            },
            "{name}"
        );
    }
}

#[test]
fn io_uring_poll_refuses_devices_without_poll_queues() {
    // A file on the machine's disk (virtio here: no poll queues).
    let dir = direct_dir();
    let t = file_target(dir.path(), "p", 1 << 20);
    let mut e =
        engine::build(EngineKind::IoUringPoll, 8, EngineOptions::default()).expect("IOPOLL ring");
    let poll_file =
        std::fs::read_to_string(format!("/sys/dev/block/{}/queue/io_poll", dev_of_file(&t)))
            .or_else(|_| {
                std::fs::read_to_string(format!(
                    "/sys/dev/block/{}/../queue/io_poll",
                    dev_of_file(&t)
                ))
            });
    match (e.add_target(t.fd()), poll_file.as_deref().map(str::trim)) {
        (Err(EngineError::PollUnsupported { detail }), Ok("0")) => {
            let msg = EngineError::PollUnsupported {
                detail: detail.clone(),
            }
            .to_string();
            assert!(detail.contains("io_poll is 0"), "{detail}");
            assert!(
                msg.contains("poll_queues") && msg.contains("--engine io_uring"),
                "{msg}"
            );
        }
        (Ok(_), Ok("1")) | (Ok(_), Err(_)) => eprintln!("note: this file's device has poll queues"),
        (r, p) => panic!("add_target {r:?} with io_poll {p:?}"),
    }

    let Some(z) = Zram::create("16M") else { return };
    let zt = device_target(&z.path);
    let mut e = engine::build(EngineKind::IoUringPoll, 8, EngineOptions::default()).unwrap();
    let err = e.add_target(zt.fd()).unwrap_err();
    let msg = err.to_string();
    assert!(
        matches!(err, EngineError::PollUnsupported { .. }),
        "{err:?}"
    );
    assert!(
        msg.contains(&z.name()) && msg.contains("io_poll is 0"),
        "{msg}"
    );
    assert!(!msg.contains('\n'));

    drop(e);
    drop(zt);

    // The other detection path, for targets sysfs cannot describe: a tmpfs file has no block
    // device, so add_target accepts it, and the kernel fails the polled I/O with EOPNOTSUPP,
    // which the engine reports as PollUnsupported instead of an I/O error.
    let shm = tempfile::tempdir_in("/dev/shm").expect("tmpfs dir");
    let buffered = TargetOptions {
        write: true,
        buffered: true,
        create_size_bytes: Some(1 << 20),
        ..Default::default()
    };
    let bt = Target::open(&shm.path().join("poll"), &buffered).unwrap();
    let mut e = engine::build(EngineKind::IoUringPoll, 8, EngineOptions::default()).unwrap();
    // Polled I/O is O_DIRECT only: a buffered target is refused up front.
    let err = e.add_target(bt.fd()).unwrap_err();
    assert!(err.to_string().contains("O_DIRECT"), "{err}");
    drop(bt);
    let opts = TargetOptions {
        buffered: false,
        ..buffered
    };
    let st = match Target::open(&shm.path().join("poll"), &opts) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("SKIP (EOPNOTSUPP part): tmpfs refuses O_DIRECT on this kernel: {e}");
            return;
        }
    };
    e.add_target(st.fd())
        .expect("no sysfs queue to check for tmpfs");
    let mut buf = AlignedBuf::new(4096);
    e.queue(IoDesc {
        target: 0,
        op: Op::Read,
        offset_bytes: 0,
        len_bytes: 4096,
        buf: buf.as_mut_ptr(),
        user_data: 1,
    })
    .unwrap();
    e.commit().unwrap();
    let mut out = [Completion::default(); 1];
    let mut res = Ok(0);
    for _ in 0..1000 {
        res = e.reap(1, &mut out);
        if !matches!(res, Ok(0)) {
            break;
        }
    }
    match res {
        Err(EngineError::PollUnsupported { detail }) => {
            assert!(detail.contains("EOPNOTSUPP"), "{detail}")
        }
        other => panic!("polled read on tmpfs: {other:?} {out:?}"),
    }
}

fn dev_of_file(t: &Target) -> String {
    use std::os::unix::fs::MetadataExt;
    let d = t.file().unwrap().metadata().unwrap().dev();
    format!("{}:{}", libc::major(d), libc::minor(d))
}
