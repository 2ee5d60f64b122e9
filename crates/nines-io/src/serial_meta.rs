//! Member identity of persisted serial volumes (`--layout serial --persist`) on real members:
//! every member's identity page read and checked before anything is served or checked, so a
//! misassembly (members reordered, blank, of another volume, missing, truncated) is refused in
//! one line naming the member, as raid0/raid5 superblocks refuse theirs. The rule is
//! nines-array's `serial::ident::assemble`, the one the volume applies again when it opens;
//! this is its I/O, shared by `nines serve` and `nines check`.

use std::fs::File;
use std::os::unix::fs::FileExt;

use nines_array::serial::ident::{self, Ident, Open};
use nines_array::serial::{META_PAGE_BYTES, PersistRegion};

/// Why the members are not the serial volume asked for, or could not be read.
#[derive(Debug, thiserror::Error)]
pub enum SerialMetaError {
    #[error("member {member} ({name}): {why}")]
    Refused {
        member: u32,
        name: String,
        why: String,
    },
    #[error("cannot read member {member} ({name})'s serial identity page")]
    Io {
        member: u32,
        name: String,
        #[source]
        source: std::io::Error,
    },
}

/// What the identity pages say.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Identity {
    /// The volume's id; None for a new volume, an earlier nines' volume (no identity), or a
    /// damaged member 0 whose id no other member tells.
    pub volume_id: Option<[u8; 16]>,
    /// Member 0's superblock is damaged (`nines check --repair` rewrites it; serve refuses).
    pub damaged_superblock: bool,
}

/// Reads page 0 of `region` on every member and checks them together. `region_for(size)` is
/// where the region would be if every member were `size` bytes: a member truncated (or grown)
/// since the volume was formed moves the region, and its old identity page, found there, says
/// so instead of a new volume being formed over the data.
pub fn check_members(
    files: &[&File],
    names: &[String],
    region: &PersistRegion,
    region_for: &dyn Fn(u64) -> Option<u64>,
) -> Result<Identity, SerialMetaError> {
    let mut found = Vec::with_capacity(files.len());
    for (k, f) in files.iter().enumerate() {
        let mut page = vec![0u8; META_PAGE_BYTES as usize];
        match f.read_exact_at(&mut page, region.offset_bytes) {
            Ok(()) => found.push(ident::decode(&page)),
            // A member too short to hold the region: truncated; the rule says which member.
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => found.push(Ident::Blank),
            Err(source) => {
                return Err(SerialMetaError::Io {
                    member: k as u32,
                    name: names.get(k).cloned().unwrap_or_default(),
                    source,
                });
            }
        }
    }
    match ident::assemble(&found, &region.geometry) {
        Ok(Open::Volume { volume_id, .. }) => Ok(Identity {
            volume_id: Some(volume_id),
            damaged_superblock: false,
        }),
        Ok(Open::Form) => {
            moved_region(files, names, region, region_for)?;
            Ok(Identity {
                volume_id: None,
                damaged_superblock: false,
            })
        }
        Ok(Open::Legacy) => Ok(Identity {
            volume_id: None,
            damaged_superblock: false,
        }),
        Err((0, _)) if found[0] == Ident::Damaged => Ok(Identity {
            volume_id: found.iter().skip(1).find_map(|f| match f {
                Ident::Member { volume_id, .. } => Some(*volume_id),
                _ => None,
            }),
            damaged_superblock: true,
        }),
        Err((k, why)) => Err(SerialMetaError::Refused {
            member: k,
            name: names.get(k as usize).cloned().unwrap_or_default(),
            why,
        }),
    }
}

/// No volume where the region is: refused when a member holds an identity page where the
/// region would be for its own size (the members' sizes changed since the volume was formed).
fn moved_region(
    files: &[&File],
    names: &[String],
    region: &PersistRegion,
    region_for: &dyn Fn(u64) -> Option<u64>,
) -> Result<(), SerialMetaError> {
    for (k, f) in files.iter().enumerate() {
        let Ok(size) = f.metadata().map(|m| m.len()).or_else(|_| block_size(f)) else {
            continue;
        };
        let Some(off) = region_for(size) else {
            continue;
        };
        if off == region.offset_bytes {
            continue;
        }
        let mut page = vec![0u8; META_PAGE_BYTES as usize];
        if f.read_exact_at(&mut page, off).is_err() {
            continue;
        }
        if !matches!(ident::decode(&page), Ident::Blank) {
            return Err(SerialMetaError::Refused {
                member: k as u32,
                name: names.get(k).cloned().unwrap_or_default(),
                why: format!(
                    "holds a serial volume formed over members of {size} bytes, but the \
                     smallest member given is smaller (truncated or replaced?): give the \
                     members as they were"
                ),
            });
        }
    }
    Ok(())
}

/// A block device's size (its metadata says 0).
fn block_size(f: &File) -> std::io::Result<u64> {
    use std::io::{Seek, SeekFrom};
    let mut f = f;
    f.seek(SeekFrom::End(0))
}
