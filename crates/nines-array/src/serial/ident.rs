//! Member identity of a persisted serial volume (`--persist`): every member's metadata region
//! starts with an identity page (the volume's geometry, a volume id, the member's index, the
//! member count, and whether the volume finished forming), so members reordered, blank, from
//! another volume, missing or truncated are refused in one line, as raid0/raid5 refuse them
//! with their superblocks. Member 0's identity page is the volume's superblock.
//!
//! Forming a volume (its first open) must survive a crash at any write, so the pages are
//! written in three steps, each flushed before the next: (1) every other member's page,
//! *forming*; (2) member 0's page, formed (the volume exists from here on); (3) every other
//! member's page again, formed. Opening decides from what it finds:
//!
//! - member 0 formed: every other member must hold this volume's page at its index (forming
//!   is a crash during step 3: the open finishes it); anything else is refused;
//! - member 0 blank: a crash before step 2 leaves the others blank or forming: formed anew;
//!   any other member formed means member 0 was replaced: refused;
//! - member 0 an identity-less superblock of an earlier nines (`NINESSR1`, member 0 only):
//!   opened as before, without identity checks.
//!
//! The same rule as md's event counts and ZFS's uberblocks need no second copy for: one
//! writer, and a page is written whole (a torn page fails its checksum: damaged, refused).
//! The volume id is derived from the time the volume was formed and its geometry (the policy
//! reads no clock or random source: the driver's clock is the nonce), so two volumes of one
//! geometry formed at different times have different ids.

use super::{META_MAGIC, META_PAGE_BYTES, fnv64};

/// The identity page's magic (member 0's page is the superblock).
pub const IDENT_MAGIC: &[u8; 8] = b"NINESSR2";
/// Words of geometry a page records (unit, segment, stripe, column members, columns, segments
/// per column, volume units).
pub const GEOMETRY_WORDS: usize = 7;
const FORMING: u32 = 1;
const FORMED: u32 = 2;
/// Bytes before the checksum: magic, geometry, id, index, members, state.
const FIELDS_END: usize = 8 + 8 * GEOMETRY_WORDS + 16 + 4 + 4 + 4;

/// What a member's first region page holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ident {
    /// No serial volume's page (never formed, or another region).
    Blank,
    /// An earlier nines' superblock without identity (member 0 only).
    Legacy { geometry: [u64; GEOMETRY_WORDS] },
    /// An identity page.
    Member {
        geometry: [u64; GEOMETRY_WORDS],
        volume_id: [u8; 16],
        index: u32,
        members: u32,
        formed: bool,
    },
    /// A serial magic whose checksum fails (a torn or damaged page).
    Damaged,
}

/// The bytes of an identity page.
pub fn encode(
    geometry: &[u64; GEOMETRY_WORDS],
    volume_id: &[u8; 16],
    index: u32,
    members: u32,
    formed: bool,
) -> Vec<u8> {
    let mut p = vec![0u8; META_PAGE_BYTES as usize];
    p[..8].copy_from_slice(IDENT_MAGIC);
    for (i, g) in geometry.iter().enumerate() {
        p[8 + 8 * i..16 + 8 * i].copy_from_slice(&g.to_le_bytes());
    }
    let mut at = 8 + 8 * GEOMETRY_WORDS;
    p[at..at + 16].copy_from_slice(volume_id);
    at += 16;
    p[at..at + 4].copy_from_slice(&index.to_le_bytes());
    p[at + 4..at + 8].copy_from_slice(&members.to_le_bytes());
    let state = if formed { FORMED } else { FORMING };
    p[at + 8..at + 12].copy_from_slice(&state.to_le_bytes());
    let h = fnv64(&p[..FIELDS_END]);
    p[FIELDS_END..FIELDS_END + 8].copy_from_slice(&h.to_le_bytes());
    p
}

/// The bytes of an earlier nines' superblock (member 0 only, no identity): what `nines check
/// --repair` rewrites a damaged superblock with when no other member tells the volume's id.
pub fn encode_legacy(geometry: &[u64; GEOMETRY_WORDS]) -> Vec<u8> {
    let mut p = vec![0u8; META_PAGE_BYTES as usize];
    p[..8].copy_from_slice(META_MAGIC);
    for (i, g) in geometry.iter().enumerate() {
        p[8 + 8 * i..16 + 8 * i].copy_from_slice(&g.to_le_bytes());
    }
    let end = 8 + 8 * GEOMETRY_WORDS;
    let h = fnv64(&p[..end]);
    p[end..end + 8].copy_from_slice(&h.to_le_bytes());
    p
}

/// The geometry words of a page with a serial magic (damaged or not), if it has one.
pub fn raw_geometry(p: &[u8]) -> Option<[u64; GEOMETRY_WORDS]> {
    (p.len() >= 8 + 8 * GEOMETRY_WORDS && (p[..8] == META_MAGIC[..] || p[..8] == IDENT_MAGIC[..]))
        .then(|| geometry_of(p))
}

fn word(p: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(p[at..at + 8].try_into().expect("8 bytes"))
}

fn geometry_of(p: &[u8]) -> [u64; GEOMETRY_WORDS] {
    std::array::from_fn(|i| word(p, 8 + 8 * i))
}

/// What page `p` (a region's first page) holds.
pub fn decode(p: &[u8]) -> Ident {
    if p.len() < FIELDS_END + 8 {
        return Ident::Blank;
    }
    if p[..8] == META_MAGIC[..] {
        let end = 8 + 8 * GEOMETRY_WORDS;
        if fnv64(&p[..end]) != word(p, end) || p[end + 8..].iter().any(|&b| b != 0) {
            return Ident::Damaged;
        }
        return Ident::Legacy {
            geometry: geometry_of(p),
        };
    }
    if p[..8] != IDENT_MAGIC[..] {
        return Ident::Blank;
    }
    if fnv64(&p[..FIELDS_END]) != word(p, FIELDS_END) || p[FIELDS_END + 8..].iter().any(|&b| b != 0)
    {
        return Ident::Damaged;
    }
    let at = 8 + 8 * GEOMETRY_WORDS;
    let u32_at = |i: usize| u32::from_le_bytes(p[i..i + 4].try_into().expect("4 bytes"));
    let state = u32_at(at + 24);
    if state != FORMING && state != FORMED {
        return Ident::Damaged;
    }
    Ident::Member {
        geometry: geometry_of(p),
        volume_id: p[at..at + 16].try_into().expect("16 bytes"),
        index: u32_at(at + 16),
        members: u32_at(at + 20),
        formed: state == FORMED,
    }
}

/// What opening the members does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Open {
    /// No volume: form one.
    Form,
    /// An earlier nines' volume (member 0's superblock only).
    Legacy,
    /// This volume; `finish`: some members are still forming (step 3 to redo).
    Volume { volume_id: [u8; 16], finish: bool },
}

/// A volume id in text (as raid superblocks print theirs).
pub fn id_text(u: &[u8; 16]) -> String {
    crate::meta::uuid_text(u)
}

/// Decides from every member's first page (see the module documentation): how to open, or the
/// first member refused and why.
pub fn assemble(found: &[Ident], geometry: &[u64; GEOMETRY_WORDS]) -> Result<Open, (u32, String)> {
    let n = found.len() as u32;
    let other_geometry = "holds a serial volume of another geometry (other --segment, --stripe, \
                          --map-unit, --column-members, member sizes or count): give the \
                          options and members it was served with";
    match found.first().copied().unwrap_or(Ident::Blank) {
        Ident::Damaged => Err((
            0,
            "its serial superblock is damaged (checksum): `nines check --layout serial` \
             reports and repairs it"
                .into(),
        )),
        Ident::Legacy { geometry: g } if g == *geometry => Ok(Open::Legacy),
        Ident::Legacy { .. } => Err((0, other_geometry.into())),
        Ident::Blank => {
            // Formed anew only if no other member says the volume was ever formed.
            for (k, f) in found.iter().enumerate().skip(1) {
                match *f {
                    Ident::Member {
                        formed: true,
                        volume_id,
                        ..
                    } => {
                        return Err((
                            0,
                            format!(
                                "holds no serial superblock while member {k} belongs to volume \
                                 {}: a blank or replaced member 0 is not served (serial keeps \
                                 its mapping table there); give the volume's member 0",
                                id_text(&volume_id)
                            ),
                        ));
                    }
                    Ident::Damaged => {
                        return Err((
                            k as u32,
                            "its serial identity page is damaged (checksum): give the \
                             volume's members as they were"
                                .into(),
                        ));
                    }
                    _ => {}
                }
            }
            Ok(Open::Form)
        }
        Ident::Member {
            geometry: g,
            volume_id,
            index,
            members,
            formed,
        } => {
            if g != *geometry {
                return Err((0, other_geometry.into()));
            }
            if members != n {
                return Err((
                    0,
                    format!(
                        "belongs to a serial volume of {members} members; {n} were given: give \
                         every member, in order"
                    ),
                ));
            }
            if index != 0 {
                return Err((
                    0,
                    format!("holds member {index} of its volume: give the members in order"),
                ));
            }
            if !formed {
                return Err((0, "is marked forming on member 0, which never is".into()));
            }
            let mut finish = false;
            for (k, f) in found.iter().enumerate().skip(1) {
                let k = k as u32;
                match *f {
                    Ident::Member {
                        geometry: g2,
                        volume_id: v2,
                        index: i2,
                        members: m2,
                        formed: f2,
                    } => {
                        if v2 != volume_id {
                            return Err((
                                k,
                                format!(
                                    "belongs to another serial volume ({}, this one is {}): \
                                     give this volume's members",
                                    id_text(&v2),
                                    id_text(&volume_id)
                                ),
                            ));
                        }
                        if i2 != k {
                            return Err((
                                k,
                                format!(
                                    "holds member {i2} of this volume: give the members in order"
                                ),
                            ));
                        }
                        if g2 != g || m2 != n {
                            return Err((k, other_geometry.into()));
                        }
                        finish |= !f2;
                    }
                    Ident::Blank | Ident::Legacy { .. } => {
                        return Err((
                            k,
                            format!(
                                "holds no identity of volume {} (blank, replaced, or truncated: \
                                 its region is found by its size): serial has no redundancy to \
                                 rebuild it from; give the volume's member {k}",
                                id_text(&volume_id)
                            ),
                        ));
                    }
                    Ident::Damaged => {
                        return Err((
                            k,
                            "its serial identity page is damaged (checksum): give the \
                             volume's members as they were"
                                .into(),
                        ));
                    }
                }
            }
            Ok(Open::Volume { volume_id, finish })
        }
    }
}

/// A volume id for a volume formed at `now_ns` with this geometry (see the module doc).
pub fn volume_id(now_ns: u64, geometry: &[u64; GEOMETRY_WORDS], members: u32) -> [u8; 16] {
    let mut seed = Vec::with_capacity(8 * (GEOMETRY_WORDS + 2));
    seed.extend_from_slice(&now_ns.to_le_bytes());
    for g in geometry {
        seed.extend_from_slice(&g.to_le_bytes());
    }
    seed.extend_from_slice(&u64::from(members).to_le_bytes());
    let a = fnv64(&seed);
    seed.push(0x5a);
    let b = fnv64(&seed) ^ now_ns.rotate_left(29);
    let mut id = [0u8; 16];
    id[..8].copy_from_slice(&a.to_le_bytes());
    id[8..].copy_from_slice(&b.to_le_bytes());
    id
}

#[cfg(test)]
mod tests {
    use super::*;

    const G: [u64; GEOMETRY_WORDS] = [4096, 1 << 20, 65536, 1, 4, 16, 10_000];
    const ID: [u8; 16] = [7; 16];

    fn member(k: u32, n: u32, formed: bool) -> Ident {
        decode(&encode(&G, &ID, k, n, formed))
    }

    #[test]
    fn pages_round_trip_and_a_torn_page_is_damaged() {
        let p = encode(&G, &ID, 2, 4, true);
        assert_eq!(
            decode(&p),
            Ident::Member {
                geometry: G,
                volume_id: ID,
                index: 2,
                members: 4,
                formed: true
            }
        );
        for at in [0usize, 9, 70, 100, 4095] {
            let mut t = p.clone();
            t[at] ^= 1;
            assert!(
                matches!(decode(&t), Ident::Damaged | Ident::Blank),
                "byte {at}"
            );
        }
        assert_eq!(decode(&vec![0u8; 4096]), Ident::Blank);
    }

    /// Every crash point of forming (each prefix of the three steps, members of a step written
    /// in any subset) opens as a new volume or as the volume, never refused; after step 2 it
    /// is always the volume.
    #[test]
    fn a_crash_anywhere_while_forming_is_never_a_lockout() {
        let n = 4u32;
        let others = n - 1;
        for step in 0..3 {
            for subset in 0..1u32 << others {
                let mut found = vec![Ident::Blank; n as usize];
                for k in 1..n {
                    let written_now = subset & (1 << (k - 1)) != 0;
                    found[k as usize] = match step {
                        0 => {
                            if written_now {
                                member(k, n, false)
                            } else {
                                Ident::Blank
                            }
                        }
                        _ => member(k, n, step == 2 && written_now),
                    };
                }
                if step >= 1 {
                    // Step 2 is member 0's one write: before it (step 1 partial: subset of
                    // others forming written, member 0 blank) and after it.
                    found[0] = member(0, n, true);
                }
                let r = assemble(&found, &G);
                match step {
                    0 => assert_eq!(r, Ok(Open::Form), "step {step} subset {subset:b}"),
                    _ => assert!(
                        matches!(r, Ok(Open::Volume { volume_id: ID, .. })),
                        "step {step} subset {subset:b}: {r:?}"
                    ),
                }
            }
        }
    }

    #[test]
    fn misassemblies_are_refused_naming_the_member() {
        let n = 3;
        let good: Vec<Ident> = (0..n).map(|k| member(k, n, true)).collect();
        assert_eq!(
            assemble(&good, &G),
            Ok(Open::Volume {
                volume_id: ID,
                finish: false
            })
        );
        // Reordered.
        let mut r = good.clone();
        r.swap(1, 2);
        assert_eq!(assemble(&r, &G).unwrap_err().0, 1);
        // Blank member 0 and blank member 2.
        let mut b = good.clone();
        b[0] = Ident::Blank;
        assert_eq!(assemble(&b, &G).unwrap_err().0, 0);
        let mut b = good.clone();
        b[2] = Ident::Blank;
        assert_eq!(assemble(&b, &G).unwrap_err().0, 2);
        // Another volume's member.
        let mut f = good.clone();
        f[1] = decode(&encode(&G, &[9; 16], 1, n, true));
        let e = assemble(&f, &G).unwrap_err();
        assert!(e.0 == 1 && e.1.contains("another serial volume"), "{e:?}");
        // A member missing: the count differs.
        let e = assemble(&good[..2], &G).unwrap_err();
        assert!(e.1.contains("3 members; 2 were given"), "{e:?}");
        // Another geometry.
        let mut g2 = G;
        g2[1] *= 2;
        assert!(assemble(&good, &g2).is_err());
        // A damaged member 0.
        let mut d = good.clone();
        d[0] = Ident::Damaged;
        assert!(assemble(&d, &G).unwrap_err().1.contains("damaged"));
    }

    #[test]
    fn volume_ids_differ_by_time() {
        assert_ne!(volume_id(1, &G, 4), volume_id(2, &G, 4));
        assert_eq!(volume_id(1, &G, 4), volume_id(1, &G, 4));
    }
}
