//! Write safety for block devices: the product's promise that nines never destroys data the
//! user did not explicitly hand over.
//!
//! Signatures are probed twice: first by libblkid (loaded at run time, see `blkid`), so that
//! everything `blkid -p` recognises is refused, then by the small hand-written probe below, which
//! is also the fallback where libblkid is absent: its absence must not silently remove the check.
//! Every refusal names the probe that found the signature. `Target::open` calls
//! `check_writable` before it opens a block device for writing, so no caller can skip it.
//!
//! A block device may be written only with `--allow-writes`, and even then it is refused unless
//! `--force` is given when it (or one of its partitions) is mounted, is active swap, has holders
//! (LVM, md, dm-crypt...), has partitions, or carries a filesystem, partition-table, RAID, swap,
//! LVM or LUKS signature at the offsets probed below. Without libblkid the built-in probe, which
//! reads the device's first 68 KiB and last 128 KiB, fails closed: data it does not recognise
//! there is refused unless `--force`.

use std::path::{Path, PathBuf};

use crate::buf::AlignedBuf;
use crate::target::Target;

/// Why nines refuses to write to a block device.
#[derive(Debug, thiserror::Error)]
pub enum SafetyError {
    #[error(
        "refusing to write to block device {path}: pass --allow-writes to allow it (destroys the data on it)"
    )]
    WritesNotAllowed { path: PathBuf },
    #[error(
        "refusing to write to {path}: {device} is mounted at {mount_point}; unmount it, or pass --force to write anyway (destroys the filesystem)"
    )]
    Mounted {
        path: PathBuf,
        device: String,
        mount_point: String,
    },
    #[error(
        "refusing to write to {path}: it is active swap; swapoff it, or pass --force to write anyway"
    )]
    Swap { path: PathBuf },
    #[error(
        "refusing to write to {path}: it is in use by {holders} (LVM, md or dm-crypt); release it, or pass --force to write anyway"
    )]
    Held { path: PathBuf, holders: String },
    #[error(
        "refusing to write to {path}: it has partitions ({partitions}); pick an unused partition, or pass --force to write anyway (destroys them)"
    )]
    Partitioned { path: PathBuf, partitions: String },
    #[error(
        "refusing to write to {path}: it holds {what} (found by {probe}); pass --force to overwrite it (destroys that data)"
    )]
    Signature {
        path: PathBuf,
        what: String,
        /// Which probe found it: "libblkid 2.38.1" or "nines' built-in probe (libblkid not loaded)".
        probe: String,
    },
    #[error(
        "cannot verify that {path} is safe to write ({what}: {error}); fix that, or pass --force to skip the check"
    )]
    Probe {
        path: PathBuf,
        what: &'static str,
        error: std::io::Error,
    },
    #[error(
        "refusing to write to {path}: libblkid is not loaded{why} and nines' built-in probe does not recognise the data on it (it read the first 68 KiB and the last 128 KiB for {known} signatures); install libblkid (libblkid1), or pass --force to overwrite it (destroys that data)"
    )]
    Unverified {
        path: PathBuf,
        /// " (NINES_NO_LIBBLKID is set)" or "".
        why: &'static str,
        known: usize,
    },
}

/// Bytes read from the start of the device for the signature probe: covers the btrfs
/// superblock magic at 65600 and reiserfs's at 65588.
pub const PROBE_BYTES: usize = 69632;

/// Bytes read from the end of the device: covers the md 0.90 superblock (64 to 128 KiB before
/// the end), md 1.0's (8 to 12 KiB before it) and the GPT backup header (the last LBA).
pub const TAIL_BYTES: usize = 131072;

/// How many signatures the built-in probe knows (head and tail), for the refusal's message.
pub const BUILTIN_SIGNATURES: usize = 26;

/// Refuses writes to a block device unless the user allowed them and the device looks unused
/// (see the module comment). Regular files always pass: they are fair targets.
pub fn check_writable(target: &Target, force: bool) -> Result<(), SafetyError> {
    if !target.is_block_device() {
        return Ok(());
    }
    let path = target.path().to_path_buf();
    if !target.options().allow_writes {
        return Err(SafetyError::WritesNotAllowed { path });
    }
    if force {
        return Ok(());
    }
    let (major, minor) = target.dev_t().expect("block device without dev_t");
    let mountinfo =
        std::fs::read_to_string("/proc/self/mountinfo").map_err(|source| SafetyError::Probe {
            path: path.clone(),
            what: "reading /proc/self/mountinfo",
            error: source,
        })?;
    let devices = check_usage(
        Path::new("/sys/dev/block"),
        &mountinfo,
        &path,
        (major, minor),
        target.name(),
    )?;

    if let Ok(swaps) = std::fs::read_to_string("/proc/swaps") {
        for line in swaps.lines().skip(1) {
            let Some(dev_path) = line.split_whitespace().next() else {
                continue;
            };
            if let Some((maj, min)) = rdev_of(Path::new(dev_path))
                && devices.iter().any(|(a, b, _)| (*a, *b) == (maj, min))
            {
                return Err(SafetyError::Swap { path });
            }
        }
    }

    match crate::blkid::probe(&path) {
        Some(Ok(crate::blkid::Found::Nothing)) | None => {}
        Some(Ok(found)) => {
            let what = match found {
                crate::blkid::Found::Format(t) => {
                    let article = if t.starts_with(['a', 'e', 'i', 'o', 'u']) {
                        "an"
                    } else {
                        "a"
                    };
                    format!("{article} {t} signature")
                }
                _ => "several conflicting signatures".to_string(),
            };
            return Err(SafetyError::Signature {
                path,
                what,
                probe: probe_name(),
            });
        }
        Some(Err(e)) => {
            return Err(SafetyError::Probe {
                path,
                what: "probing signatures with libblkid",
                error: match e {
                    crate::blkid::BlkidError::Open(e) => e,
                    crate::blkid::BlkidError::Probe => std::io::Error::other("probe failed"),
                },
            });
        }
    }
    let head = read_at(target, 0, PROBE_BYTES).map_err(|source| SafetyError::Probe {
        path: path.clone(),
        what: "reading the device's first blocks",
        error: source,
    })?;
    let size = target.size_bytes();
    let lbs = u64::from(target.logical_block_bytes()).max(1);
    let tail_start = size.saturating_sub(TAIL_BYTES as u64) / lbs * lbs;
    let tail = read_at(target, tail_start, (size - tail_start) as usize).map_err(|source| {
        SafetyError::Probe {
            path: path.clone(),
            what: "reading the device's last blocks",
            error: source,
        }
    })?;
    let builtin = "nines' built-in probe".to_string();
    let libblkid = crate::blkid::version().is_some();
    if let Some(what) =
        find_signature(&head).or_else(|| find_end_signature(&tail, tail_start, size))
    {
        return Err(SafetyError::Signature {
            path,
            what: what.to_string(),
            probe: builtin
                + if libblkid {
                    ""
                } else {
                    " (libblkid not loaded)"
                },
        });
    }
    // Without libblkid the built-in probe is all there is, and it knows a few dozen formats: data
    // it does not recognise may be one it does not know (ZFS, a vendor's RAID metadata), so it
    // fails closed. A blank device (all zeros where it looked) is what nines is usually handed.
    if !libblkid && (!is_blank(&head) || !is_blank(&tail)) {
        return Err(SafetyError::Unverified {
            path,
            why: if crate::blkid::disabled_by_env() {
                " (NINES_NO_LIBBLKID is set)"
            } else {
                ""
            },
            known: BUILTIN_SIGNATURES,
        });
    }
    Ok(())
}

fn is_blank(b: &[u8]) -> bool {
    b.iter().all(|&x| x == 0)
}

/// The signature probe that runs first: "libblkid 2.38.1", or the built-in one when libblkid
/// cannot be loaded (or NINES_NO_LIBBLKID is set).
pub fn probe_name() -> String {
    match crate::blkid::version() {
        Some(v) => format!("libblkid {v}"),
        None => "nines' built-in probe (libblkid not loaded)".to_string(),
    }
}

/// The checks that read sysfs and mountinfo, with sysfs's `dev/block` directory as a parameter
/// so tests can run them on a made-up tree: refuses a device that is mounted (itself or a
/// partition), has holders (itself or a partition) or has partitions. Returns the device and its
/// partitions as (major, minor, name).
pub fn check_usage(
    sys_dev_block: &Path,
    mountinfo: &str,
    path: &Path,
    (major, minor): (u32, u32),
    name: &str,
) -> Result<Vec<(u32, u32, String)>, SafetyError> {
    let sys = sys_dev_block.join(format!("{major}:{minor}"));
    // Partitions: sysfs subdirectories of the disk that have a `partition` file.
    let partitions = list_partitions(&sys);
    let mut devices: Vec<(u32, u32, String)> = vec![(major, minor, name.to_string())];
    devices.extend(partitions.iter().cloned());

    for (maj, min, dev_name) in &devices {
        if let Some(mount_point) = find_mount(mountinfo, *maj, *min) {
            return Err(SafetyError::Mounted {
                path: path.to_path_buf(),
                device: dev_name.clone(),
                mount_point,
            });
        }
    }

    let mut holders = list_dir(&sys.join("holders"));
    for (_, _, part) in &partitions {
        holders.extend(list_dir(&sys.join(part).join("holders")));
    }
    if !holders.is_empty() {
        return Err(SafetyError::Held {
            path: path.to_path_buf(),
            holders: holders.join(", "),
        });
    }

    if !partitions.is_empty() {
        let names: Vec<&str> = partitions.iter().map(|(_, _, n)| n.as_str()).collect();
        return Err(SafetyError::Partitioned {
            path: path.to_path_buf(),
            partitions: names.join(", "),
        });
    }
    Ok(devices)
}

/// Looks for known on-disk signatures in the first bytes of a device. `head` may be shorter
/// than `PROBE_BYTES` for tiny devices; offsets beyond it are skipped.
pub fn find_signature(head: &[u8]) -> Option<&'static str> {
    let at = |off: usize, magic: &[u8]| head.get(off..off + magic.len()) == Some(magic);
    if at(0, b"LUKS\xba\xbe") {
        return Some("a LUKS encrypted volume");
    }
    if at(0, b"XFSB") {
        return Some("an XFS filesystem");
    }
    if at(1080, &0xEF53u16.to_le_bytes()) {
        return Some("an ext2/ext3/ext4 filesystem");
    }
    if at(65600, b"_BHRfS_M") {
        return Some("a btrfs filesystem");
    }
    // Offsets and magics as util-linux libblkid has them (superblocks/f2fs.c, bcache.c, jfs.c,
    // nilfs.c), for hosts without libblkid.
    if at(1024, &0xF2F5_2010u32.to_le_bytes()) {
        return Some("an f2fs filesystem");
    }
    if at(
        4096 + 24,
        b"\xc6\x85\x73\xf6\x4e\x1a\x45\xca\x82\x65\xf5\x7f\x48\xba\x6d\x81",
    ) {
        return Some("a bcache device");
    }
    if at(32768, b"JFS1") {
        return Some("a JFS filesystem");
    }
    // nilfs2: s_magic 0x3434 at 1024 + 6, and a plausible s_bytes (the superblock's size).
    if at(1030, &0x3434u16.to_le_bytes())
        && head
            .get(1032..1034)
            .map(|b| u16::from_le_bytes([b[0], b[1]]))
            .is_some_and(|n| n > 0 && n <= 1024)
    {
        return Some("a nilfs2 filesystem");
    }
    // Read-only and archive formats, and the small filesystems util-linux makes (libblkid's
    // superblocks/squashfs.c, romfs.c, cramfs.c, minix.c, bfs.c, iso9660.c, udf.c, reiserfs.c).
    if at(0, b"hsqs") || at(0, b"sqsh") {
        return Some("a squashfs filesystem");
    }
    // romfs: "-rom1fs-" at offset 0 (Linux Documentation/filesystems/romfs.rst).
    if at(0, b"-rom1fs-") {
        return Some("a romfs filesystem");
    }
    if at(0, &0x28cd_3d45u32.to_le_bytes())
        || at(0, &0x28cd_3d45u32.to_be_bytes())
        || at(512, &0x28cd_3d45u32.to_le_bytes())
    {
        return Some("a cramfs filesystem");
    }
    if at(0, &0x1bad_faceu32.to_le_bytes()) {
        return Some("a bfs filesystem");
    }
    // iso9660 / UDF: the volume descriptor set at sector 16 (of 2048 bytes), its identifier at
    // byte 1 (ECMA-119 8.1; ECMA-167 2/9.1 for UDF's BEA01/NSR02/NSR03).
    if at(32769, b"CD001") {
        return Some("an iso9660 filesystem");
    }
    if at(32769, b"BEA01") || at(32769, b"NSR02") || at(32769, b"NSR03") {
        return Some("a UDF filesystem");
    }
    if at(65588, b"ReIsErFs") || at(65588, b"ReIsEr2Fs") || at(65588, b"ReIsEr3Fs") {
        return Some("a reiserfs filesystem");
    }
    // minix: s_magic at 1024 + 16 (v1, v2), at 1024 + 24 (v3); a superblock's first field,
    // s_ninodes, is never 0.
    let le16 = |off: usize| {
        head.get(off..off + 2)
            .map(|b| u16::from_le_bytes([b[0], b[1]]))
    };
    if head.get(1024..1028).is_some_and(|b| b != [0, 0, 0, 0])
        && (matches!(le16(1040), Some(0x137f | 0x138f | 0x2468 | 0x2478))
            || le16(1048) == Some(0x4d5a))
    {
        return Some("a minix filesystem");
    }
    for sector in 0..4 {
        if at(sector * 512, b"LABELONE") {
            return Some("an LVM physical volume");
        }
    }
    for page in [4096usize, 8192, 16384, 65536] {
        if at(page - 10, b"SWAPSPACE2") || at(page - 10, b"SWAP-SPACE") {
            return Some("a swap area");
        }
    }
    if at(4096, &0xa92b4efcu32.to_le_bytes()) || at(0, &0xa92b4efcu32.to_le_bytes()) {
        return Some("an md RAID member");
    }
    if at(512, b"EFI PART") || at(4096, b"EFI PART") {
        return Some("a GPT partition table");
    }
    if at(510, &[0x55, 0xAA]) {
        return Some("an MBR partition table or boot sector");
    }
    None
}

/// Looks for the signatures kept at the end of a device of `size` bytes, in `tail`, the bytes
/// from offset `tail_start` to the end. Offsets outside `tail` are skipped.
pub fn find_end_signature(tail: &[u8], tail_start: u64, size: u64) -> Option<&'static str> {
    let at = |off: u64, magic: &[u8]| {
        off.checked_sub(tail_start)
            .and_then(|o| usize::try_from(o).ok())
            .and_then(|o| tail.get(o..o.checked_add(magic.len())?))
            == Some(magic)
    };
    let md = 0xa92b_4efcu32;
    // md 1.0: the superblock 8 KiB before the end, rounded down to 4 KiB (Linux
    // drivers/md/md.c, super_1_load: `sb_start = sectors - 8*2; sb_start &= ~(4*2-1)`).
    let sectors = size / 512;
    if sectors >= 16 && at(((sectors - 16) & !7) * 512, &md.to_le_bytes()) {
        return Some("an md RAID member (metadata 1.0, at the end)");
    }
    // md 0.90: 64 KiB before the end rounded down to 64 KiB (include/uapi/linux/raid/md_p.h,
    // MD_NEW_SIZE_SECTORS with MD_RESERVED_SECTORS = 128), in the host's byte order.
    if size >= 131072 {
        let off = (size & !65535) - 65536;
        if at(off, &md.to_le_bytes()) || at(off, &md.to_be_bytes()) {
            return Some("an md RAID member (metadata 0.90, at the end)");
        }
    }
    // GPT's backup header at the last LBA (UEFI 2.10, 5.3.1), for 512 B and 4 KiB sectors.
    for lba in [512u64, 4096] {
        if size >= lba && at(size - lba, b"EFI PART") {
            return Some("a GPT partition table (its backup header at the end)");
        }
    }
    // Intel Matrix (IMSM) metadata two sectors before the end, DDF's anchor at the last sector
    // (libblkid superblocks/isw_raid.c, ddf_raid.c).
    if size >= 1024 && at(size - 1024, b"Intel Raid ISM Cfg Sig. ") {
        return Some("an Intel RAID (IMSM) member");
    }
    if size >= 512 && at(size - 512, &0xde11_de11u32.to_be_bytes()) {
        return Some("a DDF RAID member");
    }
    None
}

/// Reads up to `len` bytes from `offset` (a multiple of the logical block size), aligned for
/// O_DIRECT; fewer near the end of the device.
fn read_at(target: &Target, offset: u64, len: usize) -> Result<Vec<u8>, std::io::Error> {
    let want = (len as u64).min(target.size_bytes().saturating_sub(offset)) as usize;
    let lbs = target.logical_block_bytes() as usize;
    let want_aligned = want - want % lbs;
    let mut buf = AlignedBuf::new(len.max(lbs));
    let mut got = 0usize;
    // Bounded: every pass reads at least one byte or stops.
    while got < want_aligned {
        // SAFETY: buf holds len >= want_aligned bytes.
        let ret = unsafe {
            libc::pread(
                target.fd(),
                buf.as_mut_ptr().add(got).cast(),
                want_aligned - got,
                (offset + got as u64) as libc::off_t,
            )
        };
        if ret < 0 {
            let e = std::io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            return Err(e);
        }
        if ret == 0 {
            break;
        }
        got += ret as usize;
    }
    Ok(buf.as_slice()[..got].to_vec())
}

/// Who holds block device maj:min open, for the message when an exclusive open fails with
/// EBUSY: processes with it open (pid and command), sysfs holders (dm, md), mounts. Scans /proc;
/// only called on that error path.
pub fn describe_holders(major: u32, minor: u32) -> String {
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    let mut who: Vec<String> = Vec::new();
    if let Ok(rd) = std::fs::read_dir("/proc") {
        for e in rd.flatten() {
            let pid = e.file_name().to_string_lossy().into_owned();
            if !pid.bytes().all(|b| b.is_ascii_digit()) {
                continue;
            }
            let Ok(fds) = std::fs::read_dir(e.path().join("fd")) else {
                continue;
            };
            let holds = fds.flatten().any(|fd| {
                std::fs::metadata(fd.path()).is_ok_and(|m| {
                    m.file_type().is_block_device()
                        && (libc::major(m.rdev()), libc::minor(m.rdev())) == (major, minor)
                })
            });
            if holds {
                let comm = std::fs::read_to_string(e.path().join("comm")).unwrap_or_default();
                who.push(format!("pid {pid} ({})", comm.trim()));
            }
        }
    }
    let sys = Path::new("/sys/dev/block").join(format!("{major}:{minor}"));
    for h in list_dir(&sys.join("holders")) {
        who.push(format!("{h} (device mapper or md)"));
    }
    if let Ok(mi) = std::fs::read_to_string("/proc/self/mountinfo")
        && let Some(m) = find_mount(&mi, major, minor)
    {
        who.push(format!("the mount at {m}"));
    }
    if who.is_empty() {
        "an exclusive opener nines cannot see (the kernel, or a process in another namespace)"
            .to_string()
    } else {
        who.join(", ")
    }
}

/// The mount point of the first mount of device maj:min in a mountinfo text, if any.
pub fn find_mount(mountinfo: &str, major: u32, minor: u32) -> Option<String> {
    let want = format!("{major}:{minor}");
    mountinfo.lines().find_map(|line| {
        let mut f = line.split(' ');
        let (_id, _parent, dev, _root, mount_point) =
            (f.next()?, f.next()?, f.next()?, f.next()?, f.next()?);
        (dev == want).then(|| mount_point.to_string())
    })
}

fn list_dir(dir: &Path) -> Vec<String> {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut v: Vec<String> = rd
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

fn list_partitions(sys: &Path) -> Vec<(u32, u32, String)> {
    let mut v = Vec::new();
    for name in list_dir(sys) {
        let dir = sys.join(&name);
        if !dir.join("partition").exists() {
            continue;
        }
        let Ok(dev) = std::fs::read_to_string(dir.join("dev")) else {
            continue;
        };
        let Some((a, b)) = dev.trim().split_once(':') else {
            continue;
        };
        if let (Ok(a), Ok(b)) = (a.parse(), b.parse()) {
            v.push((a, b, name));
        }
    }
    v
}

fn rdev_of(path: &Path) -> Option<(u32, u32)> {
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    let m = std::fs::metadata(path).ok()?;
    if !m.file_type().is_block_device() {
        return None;
    }
    let rdev = m.rdev();
    Some((libc::major(rdev), libc::minor(rdev)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signatures_are_found_at_their_offsets() {
        let blank = vec![0u8; PROBE_BYTES];
        assert_eq!(find_signature(&blank), None);
        let cases: [(usize, &[u8], &str); 14] = [
            (1024, &[0x10, 0x20, 0xF5, 0xF2], "f2fs"),
            (
                4120,
                &[
                    0xc6, 0x85, 0x73, 0xf6, 0x4e, 0x1a, 0x45, 0xca, 0x82, 0x65, 0xf5, 0x7f, 0x48,
                    0xba, 0x6d, 0x81,
                ],
                "bcache",
            ),
            (32768, b"JFS1", "JFS"),
            (1080, &[0x53, 0xEF], "ext2"),
            (0, b"XFSB", "XFS"),
            (65600, b"_BHRfS_M", "btrfs"),
            (4086, b"SWAPSPACE2", "swap"),
            (1024, b"LABELONE", "LVM"),
            (0, b"LUKS\xba\xbe", "LUKS"),
            (512, b"EFI PART", "GPT"),
            (4096, b"EFI PART", "GPT"),
            (510, &[0x55, 0xAA], "MBR"),
            (4096, &[0xfc, 0x4e, 0x2b, 0xa9], "md"),
            (65526, b"SWAPSPACE2", "swap"),
        ];
        for (off, magic, want) in cases {
            let mut b = blank.clone();
            b[off..off + magic.len()].copy_from_slice(magic);
            let got = find_signature(&b).unwrap_or("none");
            assert!(got.contains(want), "offset {off}: got {got}, want {want}");
            // One byte off is not a signature.
            let mut c = blank.clone();
            c[off + 1..off + 1 + magic.len()].copy_from_slice(magic);
            assert_eq!(find_signature(&c), None, "shifted {want} at {off}");
        }
        // nilfs2: the magic with a superblock size (s_bytes) after it.
        let mut b = blank.clone();
        b[1030..1034].copy_from_slice(&[0x34, 0x34, 0x00, 0x01]);
        assert!(find_signature(&b).unwrap_or("none").contains("nilfs2"));
        b[1032..1034].copy_from_slice(&[0, 0]);
        assert_eq!(
            find_signature(&b),
            None,
            "nilfs2 magic without a superblock size"
        );
        // A short head cannot see far offsets, and does not panic.
        assert_eq!(find_signature(&blank[..100]), None);
    }

    /// The formats the hostile runs overwrote without libblkid, at their offsets, and not one
    /// byte off.
    #[test]
    fn read_only_formats_are_found_at_their_offsets() {
        let blank = vec![0u8; PROBE_BYTES];
        let cases: [(usize, &[u8], &str); 8] = [
            (0, b"hsqs", "squashfs"),
            (0, b"-rom1fs-", "romfs"),
            (32769, b"CD001", "iso9660"),
            (32769, b"NSR02", "UDF"),
            (0, &[0x45, 0x3d, 0xcd, 0x28], "cramfs"),
            (0, &[0xce, 0xfa, 0xad, 0x1b], "bfs"),
            (65588, b"ReIsEr2Fs", "reiserfs"),
            (1040, &[0x8f, 0x13], "minix"),
        ];
        for (off, magic, want) in cases {
            let mut b = blank.clone();
            b[off..off + magic.len()].copy_from_slice(magic);
            b[1024] = 1; // minix's s_ninodes
            let got = find_signature(&b).unwrap_or("none");
            assert!(got.contains(want), "offset {off}: got {got}, want {want}");
            let mut c = blank.clone();
            c[off + 1..off + 1 + magic.len()].copy_from_slice(magic);
            assert_eq!(find_signature(&c), None, "shifted {want} at {off}");
        }
    }

    /// md 1.0 and 0.90 superblocks and GPT's backup header, at the end of devices of sizes that
    /// are and are not multiples of their alignment.
    #[test]
    fn end_of_device_signatures_are_found_at_their_offsets() {
        let md = 0xa92b_4efcu32.to_le_bytes();
        for size in [1u64 << 20, (1 << 20) + 4096 * 3 + 512, 16 << 20] {
            let start = size - TAIL_BYTES as u64;
            let blank = vec![0u8; TAIL_BYTES];
            assert_eq!(find_end_signature(&blank, start, size), None);
            let md10 = ((size / 512 - 16) & !7) * 512;
            let md090 = (size & !65535) - 65536;
            let cases: [(u64, &[u8], &str); 4] = [
                (md10, &md, "1.0"),
                (md090, &md, "0.90"),
                (size - 512, b"EFI PART", "GPT"),
                (size - 4096, b"EFI PART", "GPT"),
            ];
            for (off, magic, want) in cases {
                let o = (off - start) as usize;
                let mut b = blank.clone();
                b[o..o + magic.len()].copy_from_slice(magic);
                let got = find_end_signature(&b, start, size).unwrap_or("none");
                assert!(got.contains(want), "size {size} at {off}: {got}");
                let mut c = blank.clone();
                c[o + 1..o + 1 + magic.len()].copy_from_slice(magic);
                assert_eq!(find_end_signature(&c, start, size), None, "{want} shifted");
            }
        }
        // A tail shorter than the device, or a tiny device, does not panic.
        assert_eq!(find_end_signature(&[0; 10], 0, 10), None);
        assert_eq!(find_end_signature(&[], 1 << 40, u64::MAX), None);
    }

    proptest::proptest! {
        /// Any head, of any length, is probed without panicking, and an ext4 magic placed at
        /// 1080 in otherwise blank data is always found.
        #[test]
        fn probing_never_panics(head in proptest::collection::vec(proptest::num::u8::ANY, 0..5000)) {
            let _ = find_signature(&head);
            let mut blank = vec![0u8; head.len().max(1082)];
            blank[1080] = 0x53;
            blank[1081] = 0xEF;
            proptest::prop_assert!(find_signature(&blank).is_some_and(|w| w.contains("ext")));
        }
    }

    #[test]
    fn usage_checks_on_a_made_up_sysfs() {
        let root = tempfile::tempdir().unwrap();
        let dev = root.path().join("7:0");
        std::fs::create_dir_all(dev.join("holders")).unwrap();
        let p = Path::new("/dev/loop0");
        let none = "";
        // A bare disk: fine, and only itself is listed.
        let d = check_usage(root.path(), none, p, (7, 0), "loop0").unwrap();
        assert_eq!(d, vec![(7, 0, "loop0".to_string())]);
        // Mounted by major:minor.
        let mi = "36 22 7:0 / /mnt/a rw - ext4 /dev/loop0 rw\n";
        let e = check_usage(root.path(), mi, p, (7, 0), "loop0").unwrap_err();
        assert!(e.to_string().contains("mounted at /mnt/a"), "{e}");
        // A holder (LVM, md or dm-crypt on top of it).
        std::fs::create_dir(dev.join("holders/dm-3")).unwrap();
        let e = check_usage(root.path(), none, p, (7, 0), "loop0").unwrap_err();
        assert!(
            matches!(e, SafetyError::Held { ref holders, .. } if holders == "dm-3"),
            "{e}"
        );
        std::fs::remove_dir(dev.join("holders/dm-3")).unwrap();
        // A partition: refused as partitioned; mounted partition named; held partition named.
        let part = dev.join("loop0p1");
        std::fs::create_dir_all(part.join("holders")).unwrap();
        std::fs::write(part.join("partition"), "1\n").unwrap();
        std::fs::write(part.join("dev"), "259:4\n").unwrap();
        let e = check_usage(root.path(), none, p, (7, 0), "loop0").unwrap_err();
        assert!(e.to_string().contains("partitions (loop0p1)"), "{e}");
        let mi = "36 22 259:4 / /boot rw - vfat /dev/loop0p1 rw\n";
        let e = check_usage(root.path(), mi, p, (7, 0), "loop0").unwrap_err();
        assert!(e.to_string().contains("loop0p1 is mounted at /boot"), "{e}");
        std::fs::create_dir(part.join("holders/md0")).unwrap();
        let e = check_usage(root.path(), none, p, (7, 0), "loop0").unwrap_err();
        assert!(e.to_string().contains("in use by md0"), "{e}");
        assert!(!e.to_string().contains('\n'));
    }

    #[test]
    fn mountinfo_lookup() {
        let mi = "22 1 254:0 / / rw,relatime shared:1 - ext4 /dev/vda rw\n\
                  30 22 252:3 / /mnt/x rw - ext4 /dev/zram3 rw\n";
        assert_eq!(find_mount(mi, 252, 3).as_deref(), Some("/mnt/x"));
        assert_eq!(find_mount(mi, 254, 0).as_deref(), Some("/"));
        assert_eq!(find_mount(mi, 252, 30), None);
    }
}
