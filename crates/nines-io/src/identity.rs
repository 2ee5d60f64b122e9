//! Which bytes a path reaches: the one identity members, targets, buffers and outputs are
//! compared by, so that two paths reaching the same bytes are never used as two.
//!
//! A regular file (or any node that is not a block device) is its device and inode. A block
//! device is its device number and, read from sysfs, everything below it:
//! - a loop device: its backing file (`loop/backing_file`), the range `offset` ..
//!   `offset + sizelimit` of it (the whole file past `offset` when `sizelimit` is 0);
//! - a partition (`partition`): the range `start` .. `start + size` of its parent disk;
//! - a device-mapper or md device: each device in its `slaves/`, whole (the mapping is not read).
//!
//! Each of those is followed down again (a partition of a loop device over a file reaches that
//! file's bytes), so two paths share bytes when any object of one overlaps the same object of
//! the other in range. Resolving every path down to what it sits on covers `holders/` too: a
//! disk and the md device holding it both reach the disk.

use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

/// How deep a stack of devices is followed (loops over partitions of loops ...).
const DEPTH_MAX: usize = 16;

/// Something bytes live in: a file (device and inode) or a block device (its number).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Object {
    File { dev: u64, ino: u64 },
    Block { rdev: u64 },
}

/// A byte range `start .. end` of one object that a path reaches (`end` is `u64::MAX` when the
/// range runs to the object's end), and how to name that object in messages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Span {
    pub object: Object,
    pub start: u64,
    pub end: u64,
    pub shown: PathBuf,
}

impl Span {
    fn overlaps(&self, other: &Span) -> bool {
        self.object == other.object && self.start < other.end && other.start < self.end
    }
}

/// Every object (with its range) whose bytes a path reads and writes; see the module comment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    spans: Vec<Span>,
}

impl Identity {
    /// The identity of what `path` names, symlinks followed; errors only when it cannot be
    /// stat'ed (what sysfs does not tell is left out).
    pub fn of(path: &Path) -> std::io::Result<Identity> {
        let m = std::fs::metadata(path)?;
        Ok(Identity::of_metadata(Path::new("/sys"), path, &m))
    }

    /// A file known by its device and inode (an open descriptor's `fstat`).
    pub fn file(dev: u64, ino: u64, shown: &Path) -> Identity {
        Identity {
            spans: vec![Span {
                object: Object::File { dev, ino },
                start: 0,
                end: u64::MAX,
                shown: shown.to_path_buf(),
            }],
        }
    }

    fn of_metadata(sys: &Path, path: &Path, m: &std::fs::Metadata) -> Identity {
        if !m.file_type().is_block_device() {
            return Identity::file(m.dev(), m.ino(), path);
        }
        let mut spans = Vec::new();
        block_spans(sys, m.rdev(), 0, u64::MAX, path, 0, &mut spans);
        Identity { spans }
    }

    /// The objects reached, with their ranges.
    pub fn spans(&self) -> &[Span] {
        &self.spans
    }

    /// Where this identity shares bytes with `other` (named as the one below what a path named,
    /// when one is: a loop device's backing file as the loop sees it): None when the two are
    /// distinct.
    pub fn shared<'a>(&'a self, other: &'a Identity) -> Option<&'a Span> {
        self.spans.iter().enumerate().find_map(|(i, a)| {
            let b = other.spans.iter().find(|b| a.overlaps(b))?;
            Some(if i == 0 { b } else { a })
        })
    }

    /// Whether the two reach the same object as themselves (the same file or the same block
    /// device), not only something below both.
    pub fn same_top(&self, other: &Identity) -> bool {
        match (self.spans.first(), other.spans.first()) {
            (Some(a), Some(b)) => a.object == b.object,
            _ => false,
        }
    }
}

fn read_attr(dir: &Path, name: &str) -> Option<String> {
    std::fs::read_to_string(dir.join(name))
        .ok()
        .map(|s| s.trim_end_matches('\n').to_string())
}

fn read_u64(dir: &Path, name: &str) -> Option<u64> {
    read_attr(dir, name)?.trim().parse().ok()
}

/// A `MAJ:MIN` sysfs `dev` attribute as a device number.
fn parse_dev(text: &str) -> Option<u64> {
    let (maj, min) = text.trim().split_once(':')?;
    Some(libc::makedev(maj.parse().ok()?, min.parse().ok()?))
}

/// Adds block device `rdev`'s range `start .. end` and what it reaches below to `out`.
fn block_spans(
    sys: &Path,
    rdev: u64,
    start: u64,
    end: u64,
    shown: &Path,
    depth: usize,
    out: &mut Vec<Span>,
) {
    out.push(Span {
        object: Object::Block { rdev },
        start,
        end,
        shown: shown.to_path_buf(),
    });
    if depth >= DEPTH_MAX {
        return;
    }
    let link = sys
        .join("dev/block")
        .join(format!("{}:{}", libc::major(rdev), libc::minor(rdev)));
    let Ok(dir) = std::fs::canonicalize(&link) else {
        return;
    };
    let dev_path = |d: &Path| {
        PathBuf::from("/dev").join(d.file_name().map(|n| n.to_os_string()).unwrap_or_default())
    };
    // A partition: a range of its parent disk (sizes in 512-byte sectors).
    if dir.join("partition").exists()
        && let (Some(first), Some(sectors), Some(parent)) = (
            read_u64(&dir, "start"),
            read_u64(&dir, "size"),
            dir.parent(),
        )
        && let Some(parent_dev) = read_attr(parent, "dev").as_deref().and_then(parse_dev)
    {
        let base = first.saturating_mul(512);
        let len = sectors.saturating_mul(512);
        let (s, e) = (
            base.saturating_add(start.min(len)),
            base.saturating_add(end.min(len)),
        );
        block_spans(sys, parent_dev, s, e, &dev_path(parent), depth + 1, out);
    }
    // A loop device: a range of its backing file (or device).
    let lo = dir.join("loop");
    if let Some(file) = read_attr(&lo, "backing_file")
        && !file.ends_with(" (deleted)")
        && let Ok(m) = std::fs::metadata(&file)
    {
        let offset = read_u64(&lo, "offset").unwrap_or(0);
        let limit = match read_u64(&lo, "sizelimit").unwrap_or(0) {
            0 => u64::MAX,
            n => offset.saturating_add(n),
        };
        let (s, e) = (
            offset.saturating_add(start).min(limit),
            offset.saturating_add(end).min(limit),
        );
        let file = PathBuf::from(file);
        if m.file_type().is_block_device() {
            block_spans(sys, m.rdev(), s, e, &file, depth + 1, out);
        } else {
            out.push(Span {
                object: Object::File {
                    dev: m.dev(),
                    ino: m.ino(),
                },
                start: s,
                end: e,
                shown: file,
            });
        }
    }
    // dm and md: each device below, whole (the mapping between them is not read).
    if let Ok(rd) = std::fs::read_dir(dir.join("slaves")) {
        for slave in rd.flatten() {
            let p = slave.path();
            if let Some(d) = read_attr(&p, "dev").as_deref().and_then(parse_dev) {
                let name = std::fs::canonicalize(&p).unwrap_or(p);
                block_spans(sys, d, 0, u64::MAX, &dev_path(&name), depth + 1, out);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fake sysfs: `sys/devices/NAME` directories with `dev` and the attributes given, linked
    /// from `sys/dev/block/MAJ:MIN`.
    struct FakeSys {
        root: tempfile::TempDir,
    }

    impl FakeSys {
        fn new() -> FakeSys {
            let root = tempfile::tempdir().unwrap();
            std::fs::create_dir_all(root.path().join("dev/block")).unwrap();
            FakeSys { root }
        }
        fn sys(&self) -> &Path {
            self.root.path()
        }
        /// Adds device `rel` (a path under devices/, "sda/sda1" for a partition) numbered
        /// `maj:min`, with `attrs` ("partition", "start", "loop/offset", ...).
        fn add(&self, rel: &str, maj: u32, min: u32, attrs: &[(&str, &str)]) -> u64 {
            let dir = self.sys().join("devices").join(rel);
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join("dev"), format!("{maj}:{min}\n")).unwrap();
            for (k, v) in attrs {
                let p = dir.join(k);
                std::fs::create_dir_all(p.parent().unwrap()).unwrap();
                std::fs::write(p, format!("{v}\n")).unwrap();
            }
            std::os::unix::fs::symlink(&dir, self.sys().join(format!("dev/block/{maj}:{min}")))
                .unwrap();
            libc::makedev(maj, min)
        }
        fn slave(&self, holder: &str, slave: &str) {
            let d = self.sys().join("devices").join(holder).join("slaves");
            std::fs::create_dir_all(&d).unwrap();
            let name = Path::new(slave).file_name().unwrap();
            std::os::unix::fs::symlink(self.sys().join("devices").join(slave), d.join(name))
                .unwrap();
        }
        fn id(&self, rdev: u64) -> Identity {
            let mut spans = Vec::new();
            block_spans(
                self.sys(),
                rdev,
                0,
                u64::MAX,
                Path::new("/dev/x"),
                0,
                &mut spans,
            );
            Identity { spans }
        }
    }

    #[test]
    fn partitions_overlap_their_disk_and_each_other_only_where_they_share_sectors() {
        let f = FakeSys::new();
        let disk = f.add("sda", 8, 0, &[]);
        let p1 = f.add(
            "sda/sda1",
            8,
            1,
            &[("partition", "1"), ("start", "2048"), ("size", "2048")],
        );
        let p2 = f.add(
            "sda/sda2",
            8,
            2,
            &[("partition", "2"), ("start", "4096"), ("size", "2048")],
        );
        let bad = f.add(
            "sda/sda3",
            8,
            3,
            &[("partition", "3"), ("start", "3000"), ("size", "100")],
        );
        let (disk, p1, p2, bad) = (f.id(disk), f.id(p1), f.id(p2), f.id(bad));
        assert_eq!(p1.shared(&disk).unwrap().shown, Path::new("/dev/sda"));
        assert!(disk.shared(&p2).is_some());
        assert!(p1.shared(&p2).is_none(), "adjacent partitions are distinct");
        assert!(bad.shared(&p1).is_some(), "an overlapping table is caught");
        assert!(!p1.same_top(&disk));
        assert!(p1.same_top(&p1.clone()));
    }

    #[test]
    fn dm_and_md_devices_reach_their_slaves() {
        let f = FakeSys::new();
        let a = f.add("sdb", 8, 16, &[]);
        let b = f.add("sdc", 8, 32, &[]);
        let p = f.add(
            "sdb/sdb1",
            8,
            17,
            &[("partition", "1"), ("start", "2048"), ("size", "8")],
        );
        let md = f.add("md0", 9, 0, &[]);
        f.slave("md0", "sdb/sdb1");
        let dm = f.add("dm-0", 253, 0, &[]);
        f.slave("dm-0", "md0");
        let (a, b, md, dm) = (f.id(a), f.id(b), f.id(md), f.id(dm));
        assert_eq!(md.shared(&a).unwrap().shown, Path::new("/dev/sdb"));
        assert!(dm.shared(&a).is_some(), "two levels down");
        assert!(dm.shared(&md).is_some());
        assert!(dm.shared(&b).is_none());
        assert!(f.id(p).shared(&dm).is_some());
    }

    #[test]
    fn loop_devices_reach_their_backing_file_in_range() {
        let f = FakeSys::new();
        let dir = tempfile::tempdir().unwrap();
        let img = dir.path().join("a.img");
        std::fs::write(&img, vec![0u8; 4096]).unwrap();
        let other = dir.path().join("b.img");
        std::fs::write(&other, b"").unwrap();
        let backing = img.to_str().unwrap();
        let whole = f.add("loop0", 7, 0, &[("loop/backing_file", backing)]);
        let low = f.add(
            "loop1",
            7,
            1,
            &[
                ("loop/backing_file", backing),
                ("loop/offset", "0"),
                ("loop/sizelimit", "1024"),
            ],
        );
        let high = f.add(
            "loop2",
            7,
            2,
            &[
                ("loop/backing_file", backing),
                ("loop/offset", "1024"),
                ("loop/sizelimit", "1024"),
            ],
        );
        let gone = f.add(
            "loop3",
            7,
            3,
            &[("loop/backing_file", &format!("{backing} (deleted)"))],
        );
        let file = Identity::of(&img).unwrap();
        let (whole, low, high, gone) = (f.id(whole), f.id(low), f.id(high), f.id(gone));
        assert_eq!(whole.shared(&file).unwrap().shown, img);
        assert!(file.shared(&low).is_some() && file.shared(&high).is_some());
        assert!(
            low.shared(&high).is_none(),
            "disjoint ranges of one file are distinct"
        );
        assert!(whole.shared(&high).is_some());
        assert!(
            gone.shared(&file).is_none(),
            "a deleted backing file is not this one"
        );
        assert!(file.shared(&Identity::of(&other).unwrap()).is_none());
    }
}
