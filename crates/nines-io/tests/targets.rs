//! Targets and write safety on real files, loop devices and zram devices the tests create.

mod common;

use std::io::Write;
use std::path::Path;

use common::*;
use nines_io::safety::SafetyError;
use nines_io::target::{Target, TargetError, TargetOptions, check_region};

fn read_opts() -> TargetOptions {
    TargetOptions::default()
}

fn write_opts(size: Option<u64>) -> TargetOptions {
    TargetOptions {
        write: true,
        create_size_bytes: size,
        ..Default::default()
    }
}

fn one_line(e: &impl std::fmt::Display) -> String {
    let s = e.to_string();
    assert!(!s.contains('\n'), "multi-line error: {s}");
    s
}

#[test]
fn files_are_created_extended_and_described() {
    let dir = direct_dir();
    let p = dir.path().join("new.dat");
    // Reading a missing file: a clear error, nothing created.
    let e = Target::open(&p, &read_opts()).unwrap_err();
    assert!(matches!(e, TargetError::Missing { .. }), "{e:?}");
    assert!(one_line(&e).contains("new.dat") && one_line(&e).contains("no such file"));
    assert!(!p.exists());
    // Writing without a size cannot create it either.
    let e = Target::open(&p, &write_opts(None)).unwrap_err();
    assert!(one_line(&e).contains("--size"), "{e}");
    assert!(!p.exists());

    let t = Target::open(&p, &write_opts(Some(3 << 20))).unwrap();
    assert_eq!(t.size_bytes(), 3 << 20);
    assert_eq!(std::fs::metadata(&p).unwrap().len(), 3 << 20);
    assert_eq!(t.name(), "new.dat");
    assert_eq!(t.path(), p);
    assert!(!t.is_block_device() && t.dev_t().is_none());
    let lbs = t.logical_block_bytes();
    assert!(
        lbs.is_power_of_two() && (512..=4096).contains(&lbs),
        "{lbs}"
    );
    // O_DIRECT really is on.
    // SAFETY: fcntl on an open descriptor.
    let fl = unsafe { libc::fcntl(t.fd(), libc::F_GETFL) };
    assert_ne!(fl & libc::O_DIRECT, 0);
    drop(t);

    // Extended when a write workload needs more; never shrunk.
    let t = Target::open(&p, &write_opts(Some(5 << 20))).unwrap();
    assert_eq!(t.size_bytes(), 5 << 20);
    drop(t);
    let t = Target::open(&p, &write_opts(Some(1 << 20))).unwrap();
    assert_eq!(t.size_bytes(), 5 << 20);
    drop(t);

    // A read workload that needs more than the file has is refused and names the fix.
    let ro = TargetOptions {
        create_size_bytes: Some(8 << 20),
        ..Default::default()
    };
    let e = Target::open(&p, &ro).unwrap_err();
    assert!(
        matches!(e, TargetError::TooSmall { size_bytes, needed_bytes, .. } if size_bytes == 5 << 20 && needed_bytes == 8 << 20)
    );
    assert!(one_line(&e).contains("--size"));
    assert_eq!(
        std::fs::metadata(&p).unwrap().len(),
        5 << 20,
        "a read never grows a file"
    );

    // Buffered: no O_DIRECT.
    let b = TargetOptions {
        buffered: true,
        ..Default::default()
    };
    let t = Target::open(&p, &b).unwrap();
    // SAFETY: as above.
    assert_eq!(
        unsafe { libc::fcntl(t.fd(), libc::F_GETFL) } & libc::O_DIRECT,
        0
    );

    // An empty file cannot be read.
    let empty = dir.path().join("empty");
    std::fs::File::create(&empty).unwrap();
    let e = Target::open(&empty, &read_opts()).unwrap_err();
    assert!(
        matches!(e, TargetError::TooSmall { size_bytes: 0, .. }),
        "{e:?}"
    );
}

#[test]
fn wrong_kinds_of_paths_are_refused() {
    let dir = direct_dir();
    let e = Target::open(dir.path(), &read_opts()).unwrap_err();
    assert!(
        one_line(&e).contains("is a directory, not a regular file or block device"),
        "{e}"
    );
    let e = Target::open(Path::new("/dev/null"), &read_opts()).unwrap_err();
    assert!(one_line(&e).contains("character device"), "{e}");
}

#[test]
fn o_direct_refusal_suggests_buffered() {
    // procfs files cannot do O_DIRECT: open(2) fails with EINVAL.
    let p = Path::new("/proc/self/stat");
    let e = Target::open(p, &read_opts()).unwrap_err();
    assert!(matches!(e, TargetError::DirectRefused { .. }), "{e:?}");
    assert!(one_line(&e).contains("--buffered"));
}

#[test]
fn permission_denied_is_named() {
    // Root bypasses file modes, but not the immutable attribute: writing to a +i file is EPERM.
    let dir = direct_dir();
    let p = dir.path().join("immutable");
    std::fs::File::create(&p)
        .unwrap()
        .write_all(&[0u8; 8192])
        .unwrap();
    let chattr = std::process::Command::new("chattr")
        .arg("+i")
        .arg(&p)
        .status();
    if !matches!(chattr, Ok(s) if s.success()) {
        eprintln!("SKIP: chattr +i is not available here");
        return;
    }
    let r = Target::open(&p, &write_opts(None));
    let _ = std::process::Command::new("chattr")
        .arg("-i")
        .arg(&p)
        .status();
    let e = r.unwrap_err();
    assert!(
        matches!(
            e,
            TargetError::PermissionDenied {
                access: "write",
                ..
            }
        ),
        "{e:?}"
    );
    assert!(one_line(&e).contains("permission denied"));
}

/// Runs in a child process (the open-file limit is per process): see `too_many_open_files`.
#[test]
fn emfile_child() {
    if std::env::var_os("NINES_EMFILE_CHILD").is_none() {
        return;
    }
    let dir = direct_dir();
    let p = dir.path().join("f");
    Target::open(&p, &write_opts(Some(1 << 20))).unwrap();
    let lim = libc::rlimit {
        rlim_cur: 64,
        rlim_max: 64,
    };
    // SAFETY: setrlimit with a valid struct.
    assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) }, 0);
    let mut open = Vec::new();
    for _ in 0..100 {
        match Target::open(&p, &read_opts()) {
            Ok(t) => open.push(t),
            Err(e) => {
                assert!(
                    matches!(e, TargetError::TooManyOpenFiles { limit: 64, .. }),
                    "{e:?}"
                );
                assert!(one_line(&e).contains("ulimit -n"));
                println!("EMFILE-OK after {} targets", open.len());
                return;
            }
        }
    }
    panic!("100 targets opened under a limit of 64");
}

#[test]
fn too_many_open_files() {
    let exe = std::env::current_exe().unwrap();
    let out = std::process::Command::new(exe)
        .args(["--exact", "emfile_child", "--nocapture", "--test-threads=1"])
        .env("NINES_EMFILE_CHILD", "1")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("EMFILE-OK"),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn regions_are_checked() {
    let dir = direct_dir();
    let t = Target::open(&dir.path().join("r"), &write_opts(Some(1 << 20))).unwrap();
    let lbs = t.logical_block_bytes() as u64;
    assert!(check_region(&t, 0, 1 << 20, 4096).is_ok());
    assert!(check_region(&t, 4096, (1 << 20) - 4096, 4096).is_ok());
    let e = check_region(&t, 4096, 1 << 20, 4096).unwrap_err();
    assert!(matches!(e, TargetError::RegionTooLarge { .. }), "{e:?}");
    assert!(one_line(&e).contains("--size"));
    let e = check_region(&t, u64::MAX / 4096 * 4096, 8192, 4096).unwrap_err();
    assert!(
        matches!(e, TargetError::RegionTooLarge { .. }),
        "overflow: {e:?}"
    );
    let e = check_region(&t, 0, 1 << 20, lbs + 1).unwrap_err();
    assert!(
        matches!(e, TargetError::BlockSizeNotMultiple { .. }),
        "{e:?}"
    );
    assert!(one_line(&e).contains(&format!("--bs {}", 2 * lbs)), "{e}");
    assert!(matches!(
        check_region(&t, 0, 1 << 20, 0),
        Err(TargetError::BlockSizeNotMultiple { .. })
    ));
    if lbs > 1 {
        assert!(matches!(
            check_region(&t, lbs / 2, 4096, 4096),
            Err(TargetError::OffsetNotAligned { .. })
        ));
    }
    assert!(matches!(
        check_region(&t, 0, 2048, 4096),
        Err(TargetError::RegionTooSmall { .. })
    ));
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(512))]
    /// check_region accepts exactly the aligned regions that fit and hold at least one block.
    #[test]
    fn check_region_matches_its_definition(
        offset_blocks in 0u64..600,
        size_blocks in 0u64..600,
        bs_units in 1u64..20,
        odd in proptest::bool::ANY,
    ) {
        static DIR: std::sync::OnceLock<(tempfile::TempDir, std::path::PathBuf)> = std::sync::OnceLock::new();
        let (_, path) = DIR.get_or_init(|| {
            let d = direct_dir();
            let p = d.path().join("prop");
            Target::open(&p, &write_opts(Some(1 << 20))).unwrap();
            (d, p)
        });
        let t = Target::open(path, &read_opts()).unwrap();
        let lbs = t.logical_block_bytes() as u64;
        let bs = bs_units * 512 + if odd { 1 } else { 0 };
        let (offset, size) = (offset_blocks * 512, size_blocks * 512);
        let ok = bs.is_multiple_of(lbs)
            && offset.is_multiple_of(lbs)
            && offset + size <= t.size_bytes()
            && size >= bs;
        let r = check_region(&t, offset, size, bs);
        proptest::prop_assert_eq!(r.is_ok(), ok, "{:?}", r.as_ref().err().map(|e| e.to_string()));
        if let Err(e) = r {
            proptest::prop_assert!(!e.to_string().contains('\n'));
        }
    }
}

#[test]
fn zram_is_described_and_its_block_size_enforced() {
    let Some(z) = Zram::create("64M") else { return };
    let t = Target::open(&z.path, &read_opts()).unwrap();
    assert!(t.is_block_device());
    assert_eq!(t.size_bytes(), 64 << 20);
    assert_eq!(t.logical_block_bytes(), 4096);
    assert_eq!(t.name(), z.name());
    let dev = std::fs::read_to_string(format!("/sys/block/{}/dev", z.name())).unwrap();
    let (a, b) = t.dev_t().unwrap();
    assert_eq!(format!("{a}:{b}"), dev.trim());
    // 512-byte blocks are fine on a file but not on zram (4096-byte logical blocks).
    let e = check_region(&t, 0, 64 << 20, 512).unwrap_err();
    assert!(
        one_line(&e).contains("not a multiple of") && one_line(&e).contains("--bs 4096"),
        "{e}"
    );
    let e = check_region(&t, 0, 65 << 20, 4096).unwrap_err();
    assert!(one_line(&e).contains("larger than"), "{e}");
    // Reading a block device needs no permission to write.
    assert!(Target::open(&z.path, &read_opts()).is_ok());
}

fn blockdev_write(allow: bool, force: bool) -> TargetOptions {
    TargetOptions {
        write: true,
        allow_writes: allow,
        force,
        ..Default::default()
    }
}

#[test]
fn blank_zram_is_writable_only_with_allow_writes() {
    let Some(z) = Zram::create("32M") else { return };
    let e = Target::open(&z.path, &blockdev_write(false, false)).unwrap_err();
    assert!(
        matches!(e, TargetError::Unsafe(SafetyError::WritesNotAllowed { .. })),
        "{e:?}"
    );
    assert!(one_line(&e).contains("--allow-writes"));
    let t = Target::open(&z.path, &blockdev_write(true, false))
        .expect("blank device with --allow-writes");
    // SAFETY: fcntl on an open descriptor.
    let fl = unsafe { libc::fcntl(t.fd(), libc::F_GETFL) };
    assert_eq!(fl & libc::O_ACCMODE, libc::O_RDWR);
}

#[test]
fn ext4_zram_is_refused_and_left_unchanged() {
    let Some(z) = Zram::create("64M") else { return };
    run(&format!("mkfs.ext4 -q -F {}", z.path.display()));
    let head = z.sha256(Some(1));
    let whole = z.sha256(None);

    let e = Target::open(&z.path, &blockdev_write(false, false)).unwrap_err();
    assert!(
        matches!(e, TargetError::Unsafe(SafetyError::WritesNotAllowed { .. })),
        "{e:?}"
    );
    let e = Target::open(&z.path, &blockdev_write(true, false)).unwrap_err();
    assert!(
        matches!(e, TargetError::Unsafe(SafetyError::Signature { .. })),
        "{e:?}"
    );
    let msg = one_line(&e);
    assert!(
        (msg.contains("ext4 signature") || msg.contains("ext2/ext3/ext4 filesystem"))
            && msg.contains("--force"),
        "{msg}"
    );
    // --force alone (without --allow-writes) is not enough.
    let e = Target::open(&z.path, &blockdev_write(false, true)).unwrap_err();
    assert!(
        matches!(e, TargetError::Unsafe(SafetyError::WritesNotAllowed { .. })),
        "{e:?}"
    );
    // Buffered opens are checked the same way.
    let buffered = TargetOptions {
        buffered: true,
        ..blockdev_write(true, false)
    };
    assert!(Target::open(&z.path, &buffered).is_err());

    assert_eq!(
        z.sha256(Some(1)),
        head,
        "first MiB changed by refused opens"
    );
    assert_eq!(z.sha256(None), whole, "device changed by refused opens");

    // Mounted: refused for the mount first, naming the mount point.
    let mnt = tempfile::tempdir().unwrap();
    run(&format!(
        "mount -o ro {} {}",
        z.path.display(),
        mnt.path().display()
    ));
    let r = Target::open(&z.path, &blockdev_write(true, false));
    run(&format!("umount {}", mnt.path().display()));
    let e = r.unwrap_err();
    assert!(
        matches!(e, TargetError::Unsafe(SafetyError::Mounted { .. })),
        "{e:?}"
    );
    assert!(one_line(&e).contains(&mnt.path().display().to_string()));

    // With --allow-writes --force the user takes responsibility.
    let t = Target::open(&z.path, &blockdev_write(true, true)).expect("forced");
    assert!(t.is_block_device());
    drop(t);
    assert_eq!(z.sha256(None), whole, "opening never writes");
}

#[test]
fn swap_and_raw_signatures_are_refused() {
    let Some(z) = Zram::create("16M") else { return };
    run(&format!("mkswap -q {} >/dev/null", z.path.display()));
    let e = Target::open(&z.path, &blockdev_write(true, false)).unwrap_err();
    assert!(one_line(&e).contains("swap"), "{e}");
    // Active swap is named as such.
    if std::process::Command::new("swapon")
        .arg(&z.path)
        .status()
        .is_ok_and(|s| s.success())
    {
        let r = Target::open(&z.path, &blockdev_write(true, false));
        run(&format!("swapoff {}", z.path.display()));
        let e = r.unwrap_err();
        assert!(
            matches!(e, TargetError::Unsafe(SafetyError::Swap { .. })),
            "{e:?}"
        );
    } else {
        eprintln!("SKIP (active swap part): swapon failed");
    }

    // A GPT header written by hand at 512 (after wiping the swap signature).
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .open(&z.path)
        .unwrap();
    use std::io::{Seek, SeekFrom};
    f.write_all(&vec![0u8; 1 << 20]).unwrap();
    f.seek(SeekFrom::Start(512)).unwrap();
    f.write_all(b"EFI PART").unwrap();
    f.sync_all().unwrap();
    drop(f);
    let e = Target::open(&z.path, &blockdev_write(true, false)).unwrap_err();
    let msg = one_line(&e);
    assert!(
        msg.contains("GPT partition table") || msg.contains("gpt"),
        "{e}"
    );
}

#[test]
fn partitioned_and_held_devices_are_refused() {
    let Some(z) = Zram::create("32M") else { return };
    // A device-mapper linear device over the zram makes dm-N a holder of it.
    let dm_name = format!("nines-test-{}", z.index);
    let sectors = 32 * 2048;
    let dm = std::process::Command::new("dmsetup")
        .args([
            "create",
            &dm_name,
            "--table",
            &format!("0 {sectors} linear {} 0", z.path.display()),
        ])
        .output();
    match dm {
        Ok(o) if o.status.success() => {
            let r = Target::open(&z.path, &blockdev_write(true, false));
            let _ = std::process::Command::new("dmsetup")
                .args(["remove", &dm_name])
                .status();
            let e = r.unwrap_err();
            assert!(
                matches!(e, TargetError::Unsafe(SafetyError::Held { .. })),
                "{e:?}"
            );
            assert!(one_line(&e).contains("dm-"), "{e}");
        }
        _ => eprintln!("SKIP (holders part): dmsetup cannot create devices here"),
    }

    // Partitions: a loop device over a file that carries an MBR with one partition.
    let dir = direct_dir();
    let img = dir.path().join("disk.img");
    let mut mbr = vec![0u8; 8 << 20];
    // Partition entry 1 at 446: type 0x83, first LBA 2048, 8192 sectors.
    mbr[446 + 4] = 0x83;
    mbr[446 + 8..446 + 12].copy_from_slice(&2048u32.to_le_bytes());
    mbr[446 + 12..446 + 16].copy_from_slice(&8192u32.to_le_bytes());
    mbr[510] = 0x55;
    mbr[511] = 0xAA;
    std::fs::write(&img, &mbr).unwrap();
    let Ok(out) = std::process::Command::new("losetup")
        .args(["-P", "-f", "--show"])
        .arg(&img)
        .output()
    else {
        eprintln!("SKIP (partitions part): losetup is missing");
        return;
    };
    if !out.status.success() {
        eprintln!(
            "SKIP (partitions part): losetup failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        return;
    }
    let loopdev = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let part = format!("{loopdev}p1");
    // The kernel may have no partition-table parsers (minimal VM kernels): add it by hand.
    std::thread::sleep(std::time::Duration::from_millis(50));
    if !Path::new(&part).exists() {
        let _ = std::process::Command::new("partx")
            .args(["-a", &loopdev])
            .status();
    }
    for _ in 0..200 {
        if Path::new(&part).exists() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let whole = Target::open(Path::new(&loopdev), &blockdev_write(true, false));
    let p1 = Target::open(Path::new(&part), &blockdev_write(true, false)).map(|_| ());
    let _ = std::process::Command::new("losetup")
        .args(["-d", &loopdev])
        .status();
    let e = whole.unwrap_err();
    assert!(
        matches!(e, TargetError::Unsafe(SafetyError::Partitioned { .. })),
        "{e:?}"
    );
    assert!(one_line(&e).contains("p1"), "{e}");
    // The blank partition itself is fair game with --allow-writes.
    p1.expect("blank partition with --allow-writes");
}

/// Formats the built-in probe does not know (the hostile runs overwrote each of them) are
/// recognised through libblkid and refused, and the device is left unchanged.
#[test]
fn squashfs_minix_cramfs_and_bfs_are_refused_through_libblkid() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src");
    std::fs::create_dir(&src).unwrap();
    std::fs::write(src.join("data"), b"precious").unwrap();
    let src = src.display().to_string();
    // Each image is made in a file (mkfs.minix and mkfs.bfs refuse zram's 4 KiB sectors) and
    // copied onto the device, as a user's dd would.
    let cases = [
        (
            "squashfs",
            format!("mksquashfs {src} {{img}} -noappend -quiet -no-progress >/dev/null"),
        ),
        (
            "minix",
            "truncate -s 8M {img} && mkfs.minix {img} >/dev/null".to_string(),
        ),
        ("cramfs", format!("mkfs.cramfs {src} {{img}} >/dev/null")),
        (
            "bfs",
            "truncate -s 8M {img} && mkfs.bfs {img} >/dev/null 2>&1".to_string(),
        ),
    ];
    for (fs, mkfs) in cases {
        let Some(z) = Zram::create("16M") else { return };
        let img = tmp.path().join(fs).display().to_string();
        run(&mkfs.replace("{img}", &img));
        run(&format!(
            "dd if={img} of={} bs=1M conv=fsync status=none",
            z.path.display()
        ));
        let whole = z.sha256(None);
        let e = Target::open(&z.path, &blockdev_write(true, false)).unwrap_err();
        let msg = one_line(&e);
        assert!(
            matches!(e, TargetError::Unsafe(SafetyError::Signature { .. })),
            "{fs}: {e:?}"
        );
        assert!(
            msg.contains(fs) && msg.contains("libblkid 2."),
            "{fs}: {msg}"
        );
        assert!(msg.contains("--force"), "{msg}");
        assert_eq!(
            z.sha256(None),
            whole,
            "{fs}: device changed by a refused open"
        );
    }
}

/// A block device opened for writing is opened exclusively: while another exclusive opener holds
/// it, nines is refused and names the holder (this process, here).
#[test]
fn block_devices_are_written_exclusively_and_the_holder_is_named() {
    use std::os::unix::fs::OpenOptionsExt;
    let Some(z) = Zram::create("16M") else { return };
    let holder = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_EXCL)
        .open(&z.path)
        .unwrap();
    let e = Target::open(&z.path, &blockdev_write(true, false)).unwrap_err();
    assert!(matches!(e, TargetError::Busy { .. }), "{e:?}");
    let msg = one_line(&e);
    assert!(
        msg.contains(&format!("pid {}", std::process::id())),
        "the holder is named: {msg}"
    );
    // --force does not override the kernel's exclusivity.
    let e = Target::open(&z.path, &blockdev_write(true, true)).unwrap_err();
    assert!(matches!(e, TargetError::Busy { .. }), "{e:?}");
    // Reading is never exclusive.
    Target::open(&z.path, &read_opts()).expect("a read open while held");
    drop(holder);
    let t = Target::open(&z.path, &blockdev_write(true, false)).expect("free again");
    // Ours is exclusive now: a second writer is refused while `t` is open.
    let e = Target::open(&z.path, &blockdev_write(true, false)).unwrap_err();
    assert!(matches!(e, TargetError::Busy { .. }), "{e:?}");
    drop(t);
}

/// Holes are counted exactly over the region asked (SEEK_DATA/SEEK_HOLE on ext4, 4 KiB blocks):
/// a file with 1 MiB of data at 1 MiB and the rest a hole.
#[test]
fn holes_of_a_sparse_file_are_counted_over_the_region() {
    let dir = direct_dir();
    let p = dir.path().join("sparse.dat");
    let mib = 1u64 << 20;
    {
        let f = std::fs::File::create(&p).unwrap();
        f.set_len(8 * mib).unwrap();
        use std::os::unix::fs::FileExt;
        f.write_all_at(&vec![0xa5u8; mib as usize], mib).unwrap();
        f.sync_all().unwrap();
    }
    let t = Target::open(&p, &read_opts()).unwrap();
    assert_eq!(t.hole_bytes(0, 8 * mib), Some(7 * mib));
    assert_eq!(t.hole_bytes(mib, mib), Some(0), "the data extent alone");
    assert_eq!(t.hole_bytes(0, 2 * mib), Some(mib));
    assert_eq!(
        t.hole_bytes(2 * mib, 100 * mib),
        Some(6 * mib),
        "clipped at the end"
    );
    // A filled file has none.
    let full = dir.path().join("full.dat");
    std::fs::write(&full, vec![1u8; 2 * mib as usize]).unwrap();
    let t = Target::open(&full, &read_opts()).unwrap();
    assert_eq!(t.hole_bytes(0, 2 * mib), Some(0));
}
