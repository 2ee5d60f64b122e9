//! Member superblocks of served arrays (raid0, raid5) on real members: reading them, refusing
//! members that are not current, initialising new arrays, resyncing the regions a crash left
//! dirty (before serving), and writing the superblocks as the array starts, loses a member and
//! stops (docs/arch-array.md "Member superblocks"). The rules are nines-array's `meta`; this
//! is their I/O, shared by `nines serve` ([`crate::serve::serve`]), `nines rebuild` and
//! `nines check`.
//!
//! Metadata goes through descriptors of its own, opened by path after `Target::open` has
//! checked (and, for block devices, exclusively opened) each member: buffered and without
//! O_EXCL, so it coexists with the server's O_DIRECT descriptors, and it is fdatasynced.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use nines_array::LayoutSpec;
use nines_array::meta::{
    self, Assembly, Expect, Found, MemberIo, MetaLayout, SB_BYTES, Superblock, Transition,
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

/// Why an array's superblocks refused it, or could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum MetaError {
    /// The members are not an array that can be served as asked; the message says what to do.
    #[error("{0}")]
    Refused(String),
    /// A member's metadata could not be read or written: what was being done, and why.
    #[error("{what}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
}

fn io_error(what: String) -> impl FnOnce(std::io::Error) -> MetaError {
    move |source| MetaError::Io { what, source }
}

/// Opens each member's path for metadata.
pub fn open_files(paths: &[PathBuf], write: bool) -> Result<Vec<File>, MetaError> {
    paths
        .iter()
        .map(|p| {
            std::fs::OpenOptions::new()
                .read(true)
                .write(write)
                .open(p)
                .map_err(io_error(format!(
                    "cannot open {} for its superblock",
                    p.display()
                )))
        })
        .collect()
}

/// [`open_files`], but a missing `absent` member gets a read-only `/dev/null` descriptor (it
/// reads as empty, so no superblock; it is never written).
fn open_files_but(
    paths: &[PathBuf],
    write: bool,
    absent: Option<usize>,
) -> Result<Vec<File>, MetaError> {
    paths
        .iter()
        .enumerate()
        .map(|(k, p)| {
            if Some(k) == absent && std::fs::symlink_metadata(p).is_err() {
                File::open("/dev/null").map_err(io_error("cannot open /dev/null".into()))
            } else {
                open_files(std::slice::from_ref(p), write).map(|mut v| v.remove(0))
            }
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

/// Writes `sb` into the last page of a member of `member_bytes` (the slot its page does not
/// keep: [`Superblock::encode_after`]) and makes it durable.
fn write_sb(f: &File, sb: &Superblock, member_bytes: u64) -> std::io::Result<()> {
    let at = member_bytes - SB_BYTES;
    let mut prev = vec![0u8; SB_BYTES as usize];
    if f.read_exact_at(&mut prev, at).is_err() {
        prev.fill(0);
    }
    f.write_all_at(&sb.encode_after(&prev), at)?;
    f.sync_data()
}

/// A regular file with no data below `data_bytes` (never written, only holes, or only the
/// superblock area an interrupted creation wrote): nothing to lose.
fn holds_nothing_below(f: &File, data_bytes: u64) -> bool {
    use std::os::fd::AsRawFd;
    let is_file = f.metadata().is_ok_and(|m| m.is_file());
    // SAFETY: lseek on a descriptor we own; SEEK_DATA from 0 fails with ENXIO when the file
    // has no data past 0, and otherwise returns where the first data is.
    let r = unsafe { libc::lseek(f.as_raw_fd(), 0, libc::SEEK_DATA) };
    let none = r < 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ENXIO);
    is_file && (none || (r >= 0 && r as u64 >= data_bytes))
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

/// What the caller asks of the superblocks.
pub struct MetaArgs<'a> {
    pub paths: &'a [PathBuf],
    /// `--create`: initialise members that hold data but no superblock.
    pub create: bool,
    pub read_only: bool,
    /// `--start-dirty-degraded`: start a raid5 that crashed while degraded anyway.
    pub start_dirty_degraded: bool,
    /// Members this command created (`--size` over a path that did not exist): new, whatever
    /// the filesystem says their allocated blocks hold. Empty: none.
    pub created: &'a [bool],
    /// The verb asking (its refusals name its own options).
    pub verb: Verb,
}

/// The verb that opens the array.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verb {
    Serve,
    Rebuild,
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

/// Writes superblocks while and after serving, one transition at a time
/// ([`Superblock::step`]: the order and contents, and why a crash between two members is safe).
pub struct MetaWriter {
    /// The members' metadata descriptors; None once a member failed (closed).
    files: Vec<Option<File>>,
    sizes: Vec<u64>,
    /// The array's state: the last transition's superblock.
    sb: Superblock,
    /// raid5: where the bitmap page is.
    bitmap_offset: Option<u64>,
    regions: u64,
}

impl MetaWriter {
    /// Writes transition `t`'s superblock to its members in its order, each fdatasynced before
    /// the next (so a crash leaves a prefix written). The state moves first: a transition that
    /// fails half-way is never written again at the same generation with other contents.
    fn apply(&mut self, t: Transition) -> std::io::Result<()> {
        let step = self.sb.step(t);
        self.sb = step.next.clone();
        for &k in &step.order {
            let k = k as usize;
            let Some(f) = self.files.get(k).and_then(Option::as_ref) else {
                continue;
            };
            write_sb(
                f,
                &step.next.of_member(k as u32, self.sizes[k]),
                self.sizes[k],
            )?;
        }
        Ok(())
    }

    /// Marks the array in use (not clean) with its current members, `left_out` marked out.
    fn start(&mut self, left_out: Option<u32>) -> std::io::Result<()> {
        self.apply(Transition::Start { left_out })
    }

    /// A member failed while serving: the others' superblocks say so (and their events move
    /// past its own), so it is never taken as current again. Its descriptor is closed here.
    /// An error says the failure could not be recorded (the caller reports it: serving goes on).
    pub fn member_failed(&mut self, m: u32) -> std::io::Result<()> {
        let k = m as usize;
        if k >= self.files.len() || !self.sb.in_service(m) {
            return Ok(());
        }
        self.files[k] = None;
        self.apply(Transition::Fail(m))
    }

    /// The volume is stopped and flushed: the bitmap is cleared and the array marked clean;
    /// a member rebuilt to the end joins it (its superblock written first).
    pub fn clean_stop(&mut self, rebuilt: Option<u32>) -> std::io::Result<()> {
        let rejoin = rebuilt.filter(|&r| self.files.get(r as usize).is_some_and(Option::is_some));
        if let Some(off) = self.bitmap_offset {
            let page = bitmap_page(
                self.sb.bitmap_region_rows,
                &vec![false; self.regions as usize],
            );
            for (k, f) in self.files.iter().enumerate() {
                if let Some(f) = f
                    && (self.sb.in_service(k as u32) || rejoin == Some(k as u32))
                {
                    f.write_all_at(&page, off)?;
                    f.sync_data()?;
                }
            }
        }
        self.apply(Transition::Stop { rejoin })
    }
}

/// Reads, checks and prepares the superblocks of an array over `a.paths` (already opened and
/// checked as targets) whose sizes are `sizes`. Refuses (one line) a member that is not
/// current; initialises new arrays; resyncs a raid5's dirty regions before it is served
/// (`note` is told what the resync did). The steps: read the members' superblocks and assemble
/// them, size the data area, take the array found or make a new one, resync, start the writer.
pub fn open_array(
    spec: &LayoutSpec,
    sizes: &[u64],
    a: &MetaArgs,
    note: &mut dyn FnMut(&str),
) -> Result<Opened, MetaError> {
    let expect = expected(spec, sizes.len())?;
    let (layout, n, unit) = (expect.layout, expect.members, expect.unit_bytes);
    let names: Vec<String> = a.paths.iter().map(|p| name(p)).collect();
    let left_out = match spec {
        LayoutSpec::Raid5 {
            failed, rebuild, ..
        } => rebuild.map(|r| r.member).or(*failed),
        _ => None,
    };
    // The --failed member is never read or written: it may be missing (a placeholder
    // descriptor that reads nothing stands in) or of any size (the others give the geometry).
    let failed = match spec {
        LayoutSpec::Raid5 {
            failed: Some(f),
            rebuild: None,
            ..
        } => Some(*f as usize),
        _ => None,
    };
    let files = open_files_but(a.paths, !a.read_only, failed)?;
    let asm = assemble_members(&expect, &files, &names, left_out)?;
    let mut sizes = sizes.to_vec();
    if let Some(f) = failed
        && let Some(others) = sizes
            .iter()
            .enumerate()
            .filter(|&(k, _)| k != f)
            .map(|(_, &s)| s)
            .min()
    {
        sizes[f] = others;
    }
    let sizes = &sizes[..];
    let area = DataArea::new(layout, unit, sizes)?;
    let mut report = serde_json::Map::new();
    let (sb, resync_all) = match &asm {
        Some(found) => (existing_array(found, &area, a)?, false),
        None => {
            let (sb, all) = new_array(&expect, &area, &files, &names, left_out, a)?;
            (create(&files, &names, sizes, &sb)?, all)
        }
    };
    if let Some(found) = &asm
        && !found.behind.is_empty()
    {
        note(&format!(
            "members {:?} were a generation behind the others (a start, stop or failure record was cut short): current, rewritten now",
            found.behind
        ));
    }
    report.insert("created".into(), asm.is_none().into());
    report.insert("uuid".into(), meta::uuid_text(&sb.array_uuid).into());
    report.insert("events_found".into(), sb.events.into());
    report.insert("clean_found".into(), sb.clean.into());
    // Members a generation behind (a transition cut short): current, rewritten by this start.
    report.insert(
        "members_behind".into(),
        asm.as_ref().map_or(Vec::new(), |x| x.behind.clone()).into(),
    );
    let mut spec = spec.clone();
    let mut bitmap_offset = None;
    let regions = if layout == MetaLayout::Raid5 {
        area.rows.div_ceil(sb.bitmap_region_rows.max(1))
    } else {
        0
    };
    if let LayoutSpec::Raid5 {
        bitmap_region_rows, ..
    } = &mut spec
    {
        *bitmap_region_rows = Some(sb.bitmap_region_rows);
        bitmap_offset = Some(area.data_bytes);
        let resync = Resync {
            files: &files,
            names: &names,
            sb: &sb,
            area: &area,
            n,
            regions,
            left_out,
        };
        let done = resync.before_serving(asm.as_ref(), resync_all, a, note)?;
        report.insert("resync".into(), done);
    }
    let writer = if a.read_only {
        None
    } else {
        let w = start_writer(files, &names, sizes, &sb, left_out, bitmap_offset, regions)?;
        report.insert("events".into(), w.sb.events.into());
        Some(w)
    };
    Ok(Opened {
        spec,
        sizes: sizes.iter().map(|s| s - SB_BYTES).collect(),
        writer,
        report: serde_json::Value::Object(report),
    })
}

/// What the superblocks of `spec` over `members` members must say.
fn expected(spec: &LayoutSpec, members: usize) -> Result<Expect, MetaError> {
    let Some((layout, unit)) = meta_layout(spec) else {
        return Err(MetaError::Refused(format!(
            "--layout {} carries no superblocks (raid0 and raid5 do)",
            spec.name()
        )));
    };
    if members > meta::MEMBERS_MAX as usize {
        return Err(MetaError::Refused(format!(
            "superblocks cover at most {} members; {members} given",
            meta::MEMBERS_MAX
        )));
    }
    Ok(Expect {
        layout,
        members: members as u32,
        unit_bytes: unit,
    })
}

/// Reads every member's superblock and assembles them: the newest array they agree on, or
/// None when no member carries one.
fn assemble_members(
    expect: &Expect,
    files: &[File],
    names: &[String],
    left_out: Option<u32>,
) -> Result<Option<Assembly>, MetaError> {
    let found: Vec<Found> = files
        .iter()
        .zip(names)
        .map(|(f, name)| read_sb(f).map_err(io_error(format!("cannot read {name}'s superblock"))))
        .collect::<Result<_, _>>()?;
    assert_eq!(found.len(), names.len(), "one superblock read per member");
    meta::assemble(expect, &found, names, left_out)
        .map_err(|r| MetaError::Refused(format!("the array's members do not agree: {r}")))
}

/// The data area: whole units below the smallest member less the superblock (and, for raid5,
/// the bitmap page).
struct DataArea {
    meta_bytes: u64,
    rows: u64,
    data_bytes: u64,
}

impl DataArea {
    fn new(layout: MetaLayout, unit: u64, sizes: &[u64]) -> Result<DataArea, MetaError> {
        let smallest = sizes.iter().copied().min().unwrap_or(0);
        let meta_bytes = SB_BYTES
            + if layout == MetaLayout::Raid5 {
                u64::from(BITMAP_PAGE_BYTES)
            } else {
                0
            };
        if smallest < meta_bytes + unit {
            return Err(MetaError::Refused(format!(
                "the smallest member ({smallest} bytes) has no room for a {unit}-byte unit and the {meta_bytes}-byte superblock area; use larger members"
            )));
        }
        let rows = (smallest - meta_bytes) / unit;
        let data_bytes = rows * unit;
        assert!(rows > 0 && data_bytes + meta_bytes <= smallest);
        Ok(DataArea {
            meta_bytes,
            rows,
            data_bytes,
        })
    }
}

/// The array the members already hold, if it can be served as asked.
fn existing_array(
    found: &Assembly,
    area: &DataArea,
    a: &MetaArgs,
) -> Result<Superblock, MetaError> {
    let newest = &found.newest;
    if a.create {
        return Err(MetaError::Refused(format!(
            "--create: the members already hold array {} (event {}); drop --create to serve it",
            meta::uuid_text(&newest.array_uuid),
            newest.events
        )));
    }
    if newest.member_data_bytes != area.data_bytes {
        return Err(MetaError::Refused(format!(
            "the array's members hold {} bytes of data each, these sizes give {}: give the members as they were",
            newest.member_data_bytes, area.data_bytes
        )));
    }
    Ok(newest.clone())
}

/// A new array over members with no superblock: refused where a member holds data and
/// `--create` was not given. Also whether every row's parity must be recomputed (members that
/// held data).
fn new_array(
    expect: &Expect,
    area: &DataArea,
    files: &[File],
    names: &[String],
    left_out: Option<u32>,
    a: &MetaArgs,
) -> Result<(Superblock, bool), MetaError> {
    let (layout, n, unit) = (expect.layout, expect.members, expect.unit_bytes);
    let empty: Vec<bool> = files
        .iter()
        .enumerate()
        .map(|(k, f)| {
            // The member left out is never read (its chunks are rebuilt from the others when
            // it is): what it holds does not matter.
            Some(k as u32) == left_out
                || a.created.get(k) == Some(&true)
                || holds_nothing_below(f, area.data_bytes)
        })
        .collect();
    if !a.create
        && let Some(k) = empty.iter().position(|&e| !e)
    {
        let raid5 = layout == MetaLayout::Raid5;
        let interrupted = read_sb(&files[k]).is_ok_and(|f| f.sb.is_ok_and(|s| s.creating));
        return Err(MetaError::Refused(format!(
            "member {k} ({}) holds data but no nines superblock ({}): pass --create to keep its data and add superblocks (the last {} KiB of each member is overwritten{}; the export becomes {} bytes)",
            names[k],
            if interrupted {
                "a --create over it was cut short"
            } else {
                "written by an older nines, profile or another tool"
            },
            area.meta_bytes >> 10,
            if raid5 {
                ", and the parity is recomputed"
            } else {
                ""
            },
            area.data_bytes * u64::from(if raid5 { n - 1 } else { n })
        )));
    }
    if a.read_only {
        return Err(MetaError::Refused(
            "--read-only cannot initialise superblocks on new members: serve them once without --read-only".into(),
        ));
    }
    // Members that held data (--create) get their parity recomputed everywhere.
    let resync_all = layout == MetaLayout::Raid5 && empty.iter().any(|&e| !e);
    let sb = Superblock {
        layout,
        array_uuid: random_uuid(),
        members: n,
        role: 0,
        unit_bytes: unit,
        member_data_bytes: area.data_bytes,
        member_bytes: 0,
        events: 0,
        clean: false,
        creating: false,
        failed_mask: left_out.map_or(0, |f| 1 << f),
        bitmap_region_rows: if layout == MetaLayout::Raid5 {
            meta::bitmap_region_rows(area.rows, unit)
        } else {
            0
        },
    };
    Ok((sb, resync_all))
}

/// The first step of a new array: every member but the one left out gets the template's
/// generation-1 `creating` superblock (each fdatasynced), so a creation cut short here, or in
/// the resync that follows, leaves members that hold no array yet: the next start (or
/// `--create`) creates it again. The start that follows writes generation 2.
fn create(
    files: &[File],
    names: &[String],
    sizes: &[u64],
    template: &Superblock,
) -> Result<Superblock, MetaError> {
    let step = template.step(Transition::Create);
    for &k in &step.order {
        let k = k as usize;
        write_sb(
            &files[k],
            &step.next.of_member(k as u32, sizes[k]),
            sizes[k],
        )
        .map_err(io_error(format!("cannot write {}'s superblock", names[k])))?;
    }
    Ok(step.next)
}

/// A raid5's resync before serving: the regions its write-intent bitmaps mark dirty.
struct Resync<'a> {
    files: &'a [File],
    names: &'a [String],
    sb: &'a Superblock,
    area: &'a DataArea,
    n: u32,
    regions: u64,
    left_out: Option<u32>,
}

impl Resync<'_> {
    /// The resync before serving (`all`: every region), and what the report says of it.
    fn before_serving(
        &self,
        asm: Option<&Assembly>,
        all: bool,
        a: &MetaArgs,
        note: &mut dyn FnMut(&str),
    ) -> Result<serde_json::Value, MetaError> {
        let left_out_current = asm.is_some_and(|x| x.left_out_current);
        // Which members' bytes are the array's: those in service, and a left-out member that
        // is still current (it went out with this start: a resync may read it).
        let sources: Vec<bool> = (0..self.n)
            .map(|k| Some(k) != self.left_out || left_out_current)
            .collect();
        let dirty = self.dirty_regions(&sources, asm.is_some(), all)?;
        self.run(&dirty, &sources, all, a, note)
    }

    /// The regions dirty in any source member's bitmap (all of them with `all`).
    fn dirty_regions(
        &self,
        sources: &[bool],
        assembled: bool,
        all: bool,
    ) -> Result<Vec<bool>, MetaError> {
        let mut dirty = vec![all; self.regions as usize];
        if assembled {
            let mut page = vec![0u8; BITMAP_PAGE_BYTES as usize];
            for (k, f) in self.files.iter().enumerate() {
                if !sources[k] {
                    continue;
                }
                f.read_exact_at(&mut page, self.area.data_bytes)
                    .map_err(io_error(format!(
                        "cannot read {}'s write-intent bitmap",
                        self.names[k]
                    )))?;
                let bits = parse_bitmap_page(&page, self.sb.bitmap_region_rows, self.regions);
                if let Some(bits) = bits {
                    for (d, b) in dirty.iter_mut().zip(bits) {
                        *d |= b;
                    }
                }
            }
        }
        assert_eq!(dirty.len() as u64, self.regions, "one bit per region");
        Ok(dirty)
    }

    /// Resyncs the dirty regions (refusing where it cannot), and what the report says of it.
    fn run(
        &self,
        dirty: &[bool],
        sources: &[bool],
        all: bool,
        a: &MetaArgs,
        note: &mut dyn FnMut(&str),
    ) -> Result<serde_json::Value, MetaError> {
        let dirty_regions = dirty.iter().filter(|&&d| d).count();
        let all_sources = sources.iter().all(|&s| s);
        let mut resync = serde_json::json!({
            "when": "before serving",
            "dirty_regions": dirty_regions,
            "regions": self.regions,
            "region_rows": self.sb.bitmap_region_rows,
            "rows": 0,
            "mismatches_repaired": 0,
        });
        if dirty_regions == 0 {
            return Ok(resync);
        }
        if !all_sources && !a.start_dirty_degraded {
            let f = self.left_out.unwrap_or(0);
            return Err(MetaError::Refused(format!(
                "the raid5 array was not stopped cleanly while member {f} was out of service: {dirty_regions} regions may hold rows whose parity disagrees with their data, and member {f}'s chunks there cannot be recomputed (the RAID5 write hole); serve it with member {f} in service if its data is current, or {}",
                match a.verb {
                    Verb::Serve => "pass --start-dirty-degraded to serve it anyway".to_string(),
                    Verb::Rebuild => format!(
                        "to rebuild it anyway (rows there may rebuild wrong), serve it once with nines serve --failed {f} --start-dirty-degraded, stop it, and run nines rebuild again"
                    ),
                }
            )));
        }
        if a.read_only {
            return Err(MetaError::Refused(format!(
                "the raid5 array was not stopped cleanly ({dirty_regions} dirty regions): serve it once without --read-only to resync them"
            )));
        }
        if !all_sources {
            resync["skipped"] = "--start-dirty-degraded".into();
            note(&format!(
                "warning: serving a raid5 that crashed while degraded ({dirty_regions} dirty regions not resynced, --start-dirty-degraded)"
            ));
            return Ok(resync);
        }
        let t0 = std::time::Instant::now();
        let (rows_done, repaired) = self.resync_rows(dirty)?;
        resync["rows"] = rows_done.into();
        resync["mismatches_repaired"] = repaired.into();
        resync["seconds"] = t0.elapsed().as_secs_f64().into();
        note(&if all {
            format!(
                "new array over members that held data: recomputed the parity of every row ({rows_done} rows, {repaired} changed) before serving"
            )
        } else {
            format!(
                "the array was not stopped cleanly: resynced {dirty_regions} dirty regions ({rows_done} rows, {repaired} with stale parity) before serving"
            )
        });
        Ok(resync)
    }

    /// Recomputes the parity of every row in a dirty region, then makes it durable: the rows
    /// done and those whose parity was stale.
    fn resync_rows(&self, dirty: &[bool]) -> Result<(u64, u64), MetaError> {
        let unit = self.sb.unit_bytes;
        let mut bufs: Vec<Vec<u8>> = (0..=self.n).map(|_| vec![0u8; unit as usize]).collect();
        let mut io = FilesIo(self.files.iter().collect());
        let (mut rows_done, mut repaired) = (0u64, 0u64);
        for (r, &d) in dirty.iter().enumerate() {
            if !d {
                continue;
            }
            let first = r as u64 * self.sb.bitmap_region_rows;
            let last = (first + self.sb.bitmap_region_rows).min(self.area.rows);
            for row in first..last {
                if crate::sched::interrupted() {
                    // Nothing moved on: the superblocks and bitmaps are as found, so the
                    // same command resyncs again (a creation is created again).
                    return Err(MetaError::Refused(format!(
                        "interrupted (SIGINT/SIGTERM) while resyncing the raid5 before serving, at row {row} of {}: nothing was served; run the same command again to resync from the start",
                        self.area.rows
                    )));
                }
                let m = meta::check_raid5_row(self.n, unit, row, true, &mut io, &mut bufs)
                    .map_err(io_error("the resync of a dirty region failed".into()))?;
                repaired += u64::from(m.is_some());
                rows_done += 1;
            }
        }
        for (k, f) in self.files.iter().enumerate() {
            f.sync_data().map_err(io_error(format!(
                "cannot make {}'s resync durable",
                self.names[k]
            )))?;
        }
        assert!(repaired <= rows_done && rows_done <= self.area.rows);
        Ok((rows_done, repaired))
    }
}

/// From here the superblocks say what is served: the bitmap (now consistent) cleared and made
/// durable on every member in service, then every member in service at the next generation,
/// not clean, the member left out marked out ([`Transition::Start`]).
fn start_writer(
    files: Vec<File>,
    names: &[String],
    sizes: &[u64],
    sb: &Superblock,
    left_out: Option<u32>,
    bitmap_offset: Option<u64>,
    regions: u64,
) -> Result<MetaWriter, MetaError> {
    let n = files.len() as u32;
    let in_service: Vec<bool> = (0..n).map(|k| Some(k) != left_out).collect();
    if let Some(off) = bitmap_offset {
        let page = bitmap_page(sb.bitmap_region_rows, &vec![false; regions as usize]);
        for (k, f) in files.iter().enumerate() {
            if in_service[k] {
                // Durable before any superblock moves on: a crash among the superblock
                // writes finds no member's bitmap dirty from before the resync.
                f.write_all_at(&page, off)
                    .and_then(|()| f.sync_data())
                    .map_err(io_error(format!("cannot write {}'s bitmap", names[k])))?;
            }
        }
    }
    let mut w = MetaWriter {
        files: files.into_iter().map(Some).collect(),
        sizes: sizes.to_vec(),
        sb: sb.clone(),
        bitmap_offset,
        regions,
    };
    w.start(left_out)
        .map_err(io_error("cannot write the members' superblocks".into()))?;
    Ok(w)
}

/// The path's display for messages.
pub fn name(p: &Path) -> String {
    p.display().to_string()
}
