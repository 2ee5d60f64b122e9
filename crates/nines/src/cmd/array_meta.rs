//! Member superblocks of served arrays (raid0, raid5) on real members: reading them, refusing
//! members that are not current, initialising new arrays, resyncing the regions a crash left
//! dirty (before serving), and writing the superblocks as the array starts, loses a member and
//! stops (docs/arch-array.md "Member superblocks"). The rules are nines-array's `meta`; this
//! is their I/O.
//!
//! Metadata goes through descriptors of its own, opened by path after `Target::open` has
//! checked (and, for block devices, exclusively opened) each member: buffered and without
//! O_EXCL, so it coexists with the server's O_DIRECT descriptors, and it is fdatasynced.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use nines_array::LayoutSpec;
use nines_array::meta::{
    self, Assembly, Expect, Found, MemberIo, MetaLayout, SB_BYTES, Superblock,
};
use nines_array::raid5::{BITMAP_PAGE_BYTES, bitmap_page, parse_bitmap_page};

/// The layout superblocks describe, when `spec` is one they cover (raid0 or raid5, unshaped).
pub fn meta_layout(spec: &LayoutSpec) -> Option<(MetaLayout, u64)> {
    match spec {
        LayoutSpec::Raid0 { stripe_bytes } => Some((MetaLayout::Raid0, *stripe_bytes)),
        LayoutSpec::Raid5 { chunk_bytes, .. } => Some((MetaLayout::Raid5, *chunk_bytes)),
        _ => None,
    }
}

/// Opens each member's path for metadata.
pub fn open_files(paths: &[PathBuf], write: bool) -> anyhow::Result<Vec<File>> {
    paths
        .iter()
        .map(|p| {
            std::fs::OpenOptions::new()
                .read(true)
                .write(write)
                .open(p)
                .with_context(|| format!("cannot open {} for its superblock", p.display()))
        })
        .collect()
}

fn size_of(f: &File) -> std::io::Result<u64> {
    use std::io::{Seek, SeekFrom};
    let mut f = f;
    f.seek(SeekFrom::End(0))
}

/// Reads member `f`'s last page as a superblock.
pub fn read_sb(f: &File) -> std::io::Result<Found> {
    let size_bytes = size_of(f)?;
    if size_bytes < SB_BYTES {
        return Ok(Found {
            sb: Err(meta::SbError::NoMagic),
            size_bytes,
        });
    }
    let mut page = vec![0u8; SB_BYTES as usize];
    f.read_exact_at(&mut page, size_bytes - SB_BYTES)?;
    Ok(Found {
        sb: Superblock::decode(&page),
        size_bytes,
    })
}

/// A regular file with no data at all (never written, or only holes): nothing to lose.
fn holds_nothing(f: &File) -> bool {
    use std::os::fd::AsRawFd;
    let is_file = f.metadata().is_ok_and(|m| m.is_file());
    // SAFETY: lseek on a descriptor we own; SEEK_DATA from 0 fails with ENXIO when the file
    // has no data past 0.
    let r = unsafe { libc::lseek(f.as_raw_fd(), 0, libc::SEEK_DATA) };
    is_file && r < 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ENXIO)
}

fn random_uuid() -> [u8; 16] {
    use std::io::Read;
    let mut u = [0u8; 16];
    let _ = File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut u));
    if u == [0; 16] {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        u.copy_from_slice(&(t ^ (u128::from(std::process::id()) << 64)).to_le_bytes());
    }
    u
}

/// Positioned I/O on the metadata descriptors (the resync's).
pub struct FilesIo<'a>(pub Vec<&'a File>);

impl MemberIo for FilesIo<'_> {
    fn read_at(&mut self, member: u32, off: u64, buf: &mut [u8]) -> std::io::Result<()> {
        self.0[member as usize].read_exact_at(buf, off)
    }
    fn write_at(&mut self, member: u32, off: u64, buf: &[u8]) -> std::io::Result<()> {
        self.0[member as usize].write_all_at(buf, off)
    }
}

/// What the command line asks of the superblocks.
pub struct MetaArgs<'a> {
    pub paths: &'a [PathBuf],
    /// `--create`: initialise members that hold data but no superblock.
    pub create: bool,
    pub read_only: bool,
    /// `--start-dirty-degraded`: start a raid5 that crashed while degraded anyway.
    pub start_dirty_degraded: bool,
}

/// The array as it is served: the layout with its bitmap, the members' sizes less the
/// superblock, and what happened while opening.
pub struct Opened {
    pub spec: LayoutSpec,
    pub sizes: Vec<u64>,
    pub writer: Option<MetaWriter>,
    /// For the report: uuid, events, clean flag found, resync.
    pub report: serde_json::Value,
}

/// Writes superblocks while and after serving.
pub struct MetaWriter {
    files: Vec<Option<File>>,
    sizes: Vec<u64>,
    sb: Superblock,
    in_service: Vec<bool>,
    /// raid5: where the bitmap page is.
    bitmap_offset: Option<u64>,
    regions: u64,
}

impl MetaWriter {
    /// Bumps the events and writes every in-service member's superblock (then fdatasync).
    fn write_all(&mut self, clean: bool) -> std::io::Result<()> {
        self.sb.events += 1;
        self.sb.clean = clean;
        for (k, f) in self.files.iter().enumerate() {
            let Some(f) = f else { continue };
            if !self.in_service[k] {
                continue;
            }
            let sb = Superblock {
                role: k as u32,
                member_bytes: self.sizes[k],
                ..self.sb.clone()
            };
            f.write_all_at(&sb.encode(), self.sizes[k] - SB_BYTES)?;
            f.sync_data()?;
        }
        Ok(())
    }

    /// Marks the array in use (not clean) with its current members.
    pub fn start(&mut self) -> std::io::Result<()> {
        self.write_all(false)
    }

    /// A member failed while serving: the others' superblocks say so (and their events move
    /// past its own), so it is never taken as current again. Its descriptor is closed here.
    pub fn member_failed(&mut self, m: u32) {
        let k = m as usize;
        if k >= self.files.len() || !self.in_service[k] {
            return;
        }
        self.in_service[k] = false;
        self.files[k] = None;
        self.sb.failed_mask |= 1 << m;
        if let Err(e) = self.write_all(false) {
            eprintln!(
                "nines: cannot record member {m}'s failure in the other members' superblocks: {e}"
            );
        }
    }

    /// The volume is stopped and flushed: the bitmap is cleared and the array marked clean;
    /// a member rebuilt to the end joins it.
    pub fn clean_stop(&mut self, rebuilt: Option<u32>) -> std::io::Result<()> {
        if let Some(r) = rebuilt
            && self.files.get(r as usize).is_some_and(Option::is_some)
        {
            self.in_service[r as usize] = true;
            self.sb.failed_mask &= !(1 << r);
        }
        if let Some(off) = self.bitmap_offset {
            let page = bitmap_page(
                self.sb.bitmap_region_rows,
                &vec![false; self.regions as usize],
            );
            for (k, f) in self.files.iter().enumerate() {
                if let Some(f) = f
                    && self.in_service[k]
                {
                    f.write_all_at(&page, off)?;
                    f.sync_data()?;
                }
            }
        }
        self.write_all(true)
    }
}

/// Reads, checks and prepares the superblocks of an array over `paths` (already opened and
/// checked as targets) whose sizes are `sizes`. Refuses (one line) a member that is not
/// current; initialises new arrays; resyncs a raid5's dirty regions before it is served.
pub fn open_array(spec: &LayoutSpec, sizes: &[u64], a: &MetaArgs) -> anyhow::Result<Opened> {
    let (layout, unit) = meta_layout(spec).expect("open_array is called for raid0/raid5");
    let n = sizes.len() as u32;
    if n > meta::MEMBERS_MAX {
        bail!(
            "superblocks cover at most {} members; {n} given",
            meta::MEMBERS_MAX
        );
    }
    let names: Vec<String> = a.paths.iter().map(|p| p.display().to_string()).collect();
    let files = open_files(a.paths, !a.read_only)?;
    let found: Vec<Found> = files
        .iter()
        .zip(&names)
        .map(|(f, name)| read_sb(f).with_context(|| format!("cannot read {name}'s superblock")))
        .collect::<anyhow::Result<_>>()?;
    let left_out = match spec {
        LayoutSpec::Raid5 {
            failed, rebuild, ..
        } => rebuild.map(|r| r.member).or(*failed),
        _ => None,
    };
    let expect = Expect {
        layout,
        members: n,
        unit_bytes: unit,
    };
    let asm = meta::assemble(&expect, &found, &names, left_out)
        .map_err(|r| anyhow::anyhow!("{r}"))
        .context("the array's members do not agree")?;
    // The data area: whole units below the smallest member less the superblock (and, for
    // raid5, the bitmap page).
    let smallest = sizes.iter().copied().min().unwrap_or(0);
    let meta_bytes = SB_BYTES
        + if layout == MetaLayout::Raid5 {
            u64::from(BITMAP_PAGE_BYTES)
        } else {
            0
        };
    if smallest < meta_bytes + unit {
        bail!(
            "the smallest member ({smallest} bytes) has no room for a {unit}-byte unit and the {meta_bytes}-byte superblock area; use larger members"
        );
    }
    let rows = (smallest - meta_bytes) / unit;
    let data_bytes = rows * unit;
    let mut report = serde_json::Map::new();
    let mut resync_all = false;
    let sb = match &asm {
        Some(Assembly { newest, .. }) => {
            if a.create {
                bail!(
                    "--create: the members already hold array {} (event {}); drop --create to serve it",
                    meta::uuid_text(&newest.array_uuid),
                    newest.events
                );
            }
            if newest.member_data_bytes != data_bytes {
                bail!(
                    "the array's members hold {} bytes of data each, these sizes give {data_bytes}: give the members as they were",
                    newest.member_data_bytes
                );
            }
            report.insert("created".into(), false.into());
            newest.clone()
        }
        None => {
            let empty: Vec<bool> = files.iter().map(holds_nothing).collect();
            if !a.create
                && let Some(k) = empty.iter().position(|&e| !e)
            {
                bail!(
                    "member {k} ({}) holds data but no nines superblock (written by an older nines, profile or another tool): pass --create to keep its data and add superblocks (the last {} KiB of each member is overwritten{}; the export becomes {} bytes)",
                    names[k],
                    meta_bytes >> 10,
                    if layout == MetaLayout::Raid5 {
                        ", and the parity is recomputed"
                    } else {
                        ""
                    },
                    data_bytes
                        * u64::from(if layout == MetaLayout::Raid5 {
                            n - 1
                        } else {
                            n
                        })
                );
            }
            if a.read_only {
                bail!(
                    "--read-only cannot initialise superblocks on new members: serve them once without --read-only"
                );
            }
            // Members that held data (--create) get their parity recomputed everywhere.
            resync_all = layout == MetaLayout::Raid5 && empty.iter().any(|&e| !e);
            report.insert("created".into(), true.into());
            Superblock {
                layout,
                array_uuid: random_uuid(),
                members: n,
                role: 0,
                unit_bytes: unit,
                member_data_bytes: data_bytes,
                member_bytes: 0,
                events: 0,
                clean: false,
                failed_mask: left_out.map_or(0, |f| 1 << f),
                bitmap_region_rows: if layout == MetaLayout::Raid5 {
                    meta::bitmap_region_rows(rows, unit)
                } else {
                    0
                },
            }
        }
    };
    report.insert("uuid".into(), meta::uuid_text(&sb.array_uuid).into());
    report.insert("events_found".into(), sb.events.into());
    report.insert("clean_found".into(), sb.clean.into());
    let mut spec = spec.clone();
    let mut bitmap_offset = None;
    let regions = if layout == MetaLayout::Raid5 {
        rows.div_ceil(sb.bitmap_region_rows.max(1))
    } else {
        0
    };
    if let LayoutSpec::Raid5 {
        bitmap_region_rows, ..
    } = &mut spec
    {
        *bitmap_region_rows = Some(sb.bitmap_region_rows);
        bitmap_offset = Some(data_bytes);
        let left_out_current = asm.as_ref().is_some_and(|x| x.left_out_current);
        // Which members' bytes are the array's: those in service, and a left-out member that
        // is still current (it went out with this start: a resync may read it).
        let sources: Vec<bool> = (0..n)
            .map(|k| Some(k) != left_out || left_out_current)
            .collect();
        let mut dirty = vec![resync_all; regions as usize];
        if asm.is_some() {
            let mut page = vec![0u8; BITMAP_PAGE_BYTES as usize];
            for (k, f) in files.iter().enumerate() {
                if !sources[k] {
                    continue;
                }
                f.read_exact_at(&mut page, data_bytes)
                    .with_context(|| format!("cannot read {}'s write-intent bitmap", names[k]))?;
                if let Some(bits) = parse_bitmap_page(&page, sb.bitmap_region_rows, regions) {
                    for (d, b) in dirty.iter_mut().zip(bits) {
                        *d |= b;
                    }
                }
            }
        }
        let dirty_regions = dirty.iter().filter(|&&d| d).count();
        let all_sources = sources.iter().all(|&s| s);
        let mut resync = serde_json::json!({
            "when": "before serving",
            "dirty_regions": dirty_regions,
            "regions": regions,
            "region_rows": sb.bitmap_region_rows,
            "rows": 0,
            "mismatches_repaired": 0,
        });
        if dirty_regions > 0 {
            if !all_sources && !a.start_dirty_degraded {
                let f = left_out.unwrap_or(0);
                bail!(
                    "the raid5 array was not stopped cleanly while member {f} was out of service: {dirty_regions} regions may hold rows whose parity disagrees with their data, and member {f}'s chunks there cannot be recomputed (the RAID5 write hole); serve it with member {f} in service if its data is current, or pass --start-dirty-degraded to serve it anyway"
                );
            }
            if a.read_only {
                bail!(
                    "the raid5 array was not stopped cleanly ({dirty_regions} dirty regions): serve it once without --read-only to resync them"
                );
            }
            if all_sources {
                let t0 = std::time::Instant::now();
                let mut bufs: Vec<Vec<u8>> = (0..=n).map(|_| vec![0u8; unit as usize]).collect();
                let mut io = FilesIo(files.iter().collect());
                let (mut rows_done, mut repaired) = (0u64, 0u64);
                for (r, &d) in dirty.iter().enumerate() {
                    if !d {
                        continue;
                    }
                    let first = r as u64 * sb.bitmap_region_rows;
                    let last = (first + sb.bitmap_region_rows).min(rows);
                    for row in first..last {
                        let m = meta::check_raid5_row(n, unit, row, true, &mut io, &mut bufs)
                            .context("the resync of a dirty region failed")?;
                        repaired += u64::from(m.is_some());
                        rows_done += 1;
                    }
                }
                for (k, f) in files.iter().enumerate() {
                    f.sync_data()
                        .with_context(|| format!("cannot make {}'s resync durable", names[k]))?;
                }
                resync["rows"] = rows_done.into();
                resync["mismatches_repaired"] = repaired.into();
                resync["seconds"] = t0.elapsed().as_secs_f64().into();
                eprintln!(
                    "nines: the array was not stopped cleanly: resynced {dirty_regions} dirty regions ({rows_done} rows, {repaired} with stale parity) before serving"
                );
            } else {
                resync["skipped"] = "--start-dirty-degraded".into();
                eprintln!(
                    "nines: warning: serving a raid5 that crashed while degraded ({dirty_regions} dirty regions not resynced, --start-dirty-degraded)"
                );
            }
        }
        report.insert("resync".into(), resync);
    }
    let writer = if a.read_only {
        None
    } else {
        // From here the superblocks say what is served: the bitmap (now consistent) cleared,
        // then every member in service at the next event, not clean.
        let in_service: Vec<bool> = (0..n).map(|k| Some(k) != left_out).collect();
        if let Some(off) = bitmap_offset {
            let page = bitmap_page(sb.bitmap_region_rows, &vec![false; regions as usize]);
            for (k, f) in files.iter().enumerate() {
                if in_service[k] {
                    f.write_all_at(&page, off)
                        .with_context(|| format!("cannot write {}'s bitmap", names[k]))?;
                }
            }
        }
        let mut sb = sb.clone();
        if let Some(f) = left_out {
            sb.failed_mask |= 1 << f;
        }
        let mut w = MetaWriter {
            files: files.into_iter().map(Some).collect(),
            sizes: sizes.to_vec(),
            sb,
            in_service,
            bitmap_offset,
            regions,
        };
        w.start().context("cannot write the members' superblocks")?;
        report.insert("events".into(), w.sb.events.into());
        Some(w)
    };
    let shrink = SB_BYTES;
    Ok(Opened {
        spec,
        sizes: sizes.iter().map(|s| s - shrink).collect(),
        writer,
        report: serde_json::Value::Object(report),
    })
}

/// The path's display for messages.
pub fn name(p: &Path) -> String {
    p.display().to_string()
}
