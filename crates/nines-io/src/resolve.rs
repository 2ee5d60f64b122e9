//! What a layout learns from its members before it is built, for every driver of real members
//! (`nines profile` and `nines serve`; the simulator asks its device models the same two
//! questions): the zone geometry of zoned `emu:` members ([`LayoutSpec::resolve_zones`]) and
//! the FDP reclaim unit handles of its data members ([`LayoutSpec::resolve_placement`]).
//! Files and block devices are conventional and have no handles here.

use crate::emu::EmuInfo;
use nines_array::LayoutSpec;

/// Fills in `layout`'s zone geometry and placement handles from `members` (one entry per
/// member, in layout order: `Some` for an emulated device), or says in one line why this
/// layout cannot run over them. Zoned members: the serial layout is told their geometry, as
/// the simulator does (docs/arch-zoned.md); any other layout, or a mix of zoned and
/// conventional members, is refused.
pub fn from_members(layout: &mut LayoutSpec, members: &[Option<&EmuInfo>]) -> Result<(), String> {
    let zones: Vec<Option<(u64, u64)>> = members.iter().map(|m| m.and_then(|e| e.zone)).collect();
    if let Some(&Some(zone)) = zones.iter().find(|z| z.is_some()) {
        if zones.iter().any(|z| *z != Some(zone)) {
            return Err(
                "zoned emu: targets must all be of one zoned description; give every target the same"
                    .into(),
            );
        }
        layout
            .resolve_zones(Some(zone))
            .map_err(|e| format!("the emu: targets are {e}"))?;
    }
    // Placement tags the data members' writes (a write buffer device, the layout's extra
    // member, takes none).
    let data = members
        .len()
        .saturating_sub(layout.extra_members() as usize);
    let handles: Vec<u32> = members[..data]
        .iter()
        .map(|m| m.map_or(0, |e| e.fdp_handles))
        .collect();
    layout
        .resolve_placement(&handles)
        .map_err(|e| e.to_string())
}
