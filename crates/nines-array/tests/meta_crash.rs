//! Issue 38: a crash between two member superblock writes never locks an array out. Every
//! transition the writer makes (`--create`'s first step and the start after it, starts with
//! and without a member left out, a member failing, a clean stop, a rebuilt member rejoining)
//! is cut after every subset of its members' writes (any order, so every prefix of every
//! order), and `assemble` must then take the array as it was before the transition or as it is
//! after it: never refused under the command line of one of the two, never a member that
//! missed writes accepted as current, dirty unless every member in service says clean. Each
//! crash state is then restarted, and that start cut after every subset too (a kill during the
//! restart), and must assemble again.

use nines_array::meta::{
    Assembly, Expect, Found, MetaLayout, Refused, SbError, Superblock, Transition, assemble,
};

const MEMBER_BYTES: u64 = (1 << 20) + 8192;

/// The members' last pages and the truth about their data.
#[derive(Clone)]
struct World {
    expect: Expect,
    disks: Vec<Found>,
    /// Members whose bytes miss acknowledged writes (served out of service, not rebuilt since).
    missed: Vec<bool>,
    /// The writer's state: the last transition's superblock.
    sb: Superblock,
    /// The member left out of the session being served (`--failed`/`--rebuild`).
    left_out: Option<u32>,
}

fn names(n: u32) -> Vec<String> {
    (0..n).map(|k| format!("m{k}")).collect()
}

fn template(layout: MetaLayout, n: u32, uuid: u8, left_out: Option<u32>) -> Superblock {
    Superblock {
        layout,
        array_uuid: [uuid; 16],
        members: n,
        role: 0,
        unit_bytes: 65536,
        member_data_bytes: 1 << 20,
        member_bytes: 0,
        events: 0,
        clean: false,
        creating: false,
        failed_mask: left_out.map_or(0, |f| 1 << f),
        bitmap_region_rows: if layout == MetaLayout::Raid5 { 16 } else { 0 },
    }
}

impl World {
    fn new(layout: MetaLayout, n: u32) -> World {
        World {
            expect: Expect {
                layout,
                members: n,
                unit_bytes: 65536,
            },
            disks: (0..n)
                .map(|_| Found {
                    sb: Err(SbError::NoMagic),
                    size_bytes: MEMBER_BYTES,
                })
                .collect(),
            missed: vec![false; n as usize],
            sb: template(layout, n, 0, None),
            left_out: None,
        }
    }

    fn assemble(&self, left_out: Option<u32>) -> Result<Option<Assembly>, Refused> {
        assemble(
            &self.expect,
            &self.disks,
            &names(self.expect.members),
            left_out,
        )
    }

    /// The members of `order` picked by `subset`'s bits written with `next`.
    fn written(&self, next: &Superblock, order: &[u32], subset: u32) -> World {
        let mut w = self.clone();
        for (i, &k) in order.iter().enumerate() {
            if subset & (1 << i) != 0 {
                w.disks[k as usize].sb = Ok(next.of_member(k, MEMBER_BYTES));
            }
        }
        w.sb = next.clone();
        w
    }

    /// Served writes: every member out of service misses them.
    fn serve_writes(&mut self) {
        for k in 0..self.expect.members {
            if !self.sb.in_service(k) {
                self.missed[k as usize] = true;
            }
        }
    }
}

/// What the checks count.
#[derive(Default, Debug)]
struct Counts {
    crash_states: u64,
    assembled: u64,
    restarts: u64,
}

/// `got` is a possible answer for a crash state between `before` and `after`: no member that
/// missed writes is current, the state is one of the two, dirty unless all in service say clean.
fn check_assembly(c: &World, before: &World, after: &World, left_out: Option<u32>, what: &str) {
    let Ok(Some(a)) = c.assemble(left_out) else {
        return;
    };
    for k in 0..c.expect.members {
        let current = if Some(k) == left_out {
            a.left_out_current
        } else {
            true
        };
        assert!(
            !(current && c.missed[k as usize]),
            "{what}, left out {left_out:?}: member {k} missed writes but is current"
        );
    }
    assert!(
        [before.sb.failed_mask, after.sb.failed_mask].contains(&a.newest.failed_mask)
            && [before.sb.events, after.sb.events].contains(&a.newest.events),
        "{what}: assembled as neither state: {:?}",
        a.newest
    );
    // The newest superblock's word counts even on a member left out (it started dirty).
    let newest_clean = c
        .disks
        .iter()
        .filter_map(|f| f.sb.as_ref().ok())
        .filter(|s| !s.creating)
        .max_by_key(|s| s.events)
        .is_some_and(|s| s.clean);
    let all_clean = newest_clean
        && (0..c.expect.members)
            .filter(|&k| Some(k) != left_out)
            .all(|k| c.disks[k as usize].sb.as_ref().is_ok_and(|s| s.clean));
    assert_eq!(
        a.newest.clean, all_clean,
        "{what}: clean only when every member in service says clean"
    );
}

/// Cuts `t` (from `w`, the writer's state `w.sb`) after every subset of its writes and checks
/// each crash state under the command lines `cmds` (the before state's and the after state's):
/// one of them assembles (all when `must_all`); then restarts each under it, cut after every
/// subset again. Returns the completed transition's world.
fn cut_everywhere(
    w: &World,
    t: Transition,
    cmds: &[Option<u32>],
    must_all: bool,
    counts: &mut Counts,
    what: &str,
) -> World {
    let step = w.sb.step(t);
    let new_allowed = t == Transition::Create || (w.sb.creating && subset_none_is_new(w));
    let full = (1u32 << step.order.len()) - 1;
    let after = w.written(&step.next, &step.order, full);
    for subset in 0..=full {
        let c = w.written(&step.next, &step.order, subset);
        let what = format!(
            "{what}: {t:?} cut after members {:?}",
            bits(&step.order, subset)
        );
        counts.crash_states += 1;
        let mut served = None;
        for &cmd in cmds {
            match c.assemble(cmd) {
                Ok(Some(a)) => {
                    served.get_or_insert((cmd, a));
                }
                // Only a creation in progress (its first step, or the start after it with
                // nothing written yet) is taken for a new array.
                Ok(None) => assert!(new_allowed, "{what}: taken for a new array under {cmd:?}"),
                Err(e) => assert!(!must_all, "{what}: refused under left out {cmd:?}: {e}"),
            }
            if t == Transition::Create {
                assert_eq!(
                    c.assemble(cmd),
                    Ok(None),
                    "{what}: a creation cut short is created again"
                );
            }
        }
        // Every possible command line: whatever assembles is right.
        for cmd in std::iter::once(None).chain((0..c.expect.members).map(Some)) {
            check_assembly(&c, w, &after, cmd, &what);
        }
        if let Transition::Fail(m) = t
            && subset != 0
        {
            let e = c.assemble(None).expect_err("a member marked out is stale");
            assert_eq!(e.member, m, "{what}: {e}");
        }
        if served.is_none() && new_allowed {
            counts.assembled += 1;
            continue;
        }
        let (cmd, a) = served.unwrap_or_else(|| panic!("{what}: refused under {cmds:?}"));
        counts.assembled += 1;
        // A kill during the restart under that command line, after any of its writes.
        let mut r = c.clone();
        r.sb = a.newest.clone();
        let rs = r.sb.step(Transition::Start { left_out: cmd });
        let rfull = (1u32 << rs.order.len()) - 1;
        for rsub in 0..=rfull {
            let rc = r.written(&rs.next, &rs.order, rsub);
            counts.restarts += 1;
            let got = rc.assemble(cmd);
            assert!(
                matches!(got, Ok(Some(_))),
                "{what}, then the restart under {cmd:?} cut after {:?}: {got:?}",
                bits(&rs.order, rsub)
            );
            check_assembly(&rc, &r, &rc, cmd, &format!("{what}, restarted"));
        }
    }
    after
}

/// Whether `w`'s members carry only creating superblocks (or none).
fn subset_none_is_new(w: &World) -> bool {
    w.disks
        .iter()
        .all(|f| f.sb.as_ref().map_or(true, |s| s.creating))
}

fn bits(order: &[u32], subset: u32) -> Vec<u32> {
    order
        .iter()
        .enumerate()
        .filter(|&(i, _)| subset & (1 << i) != 0)
        .map(|(_, &k)| k)
        .collect()
}

/// Creation (two steps) and a served session over a new array with `left_out`.
fn create(w: &mut World, uuid: u8, left_out: Option<u32>, counts: &mut Counts, what: &str) {
    w.sb = template(w.expect.layout, w.expect.members, uuid, left_out);
    w.left_out = left_out;
    *w = cut_everywhere(w, Transition::Create, &[left_out], true, counts, what);
    *w = cut_everywhere(
        w,
        Transition::Start { left_out },
        &[left_out],
        true,
        counts,
        what,
    );
    w.serve_writes();
}

/// A start (from the array as it assembles) and served writes.
fn start(w: &mut World, left_out: Option<u32>, counts: &mut Counts, what: &str) {
    let a = w.assemble(left_out).unwrap().unwrap();
    w.sb = a.newest;
    w.left_out = left_out;
    *w = cut_everywhere(
        w,
        Transition::Start { left_out },
        &[left_out],
        true,
        counts,
        what,
    );
    w.serve_writes();
}

fn stop(w: &mut World, counts: &mut Counts, what: &str) {
    let l = w.left_out;
    *w = cut_everywhere(
        w,
        Transition::Stop { rejoin: None },
        &[l],
        true,
        counts,
        what,
    );
}

fn raid0(n: u32, counts: &mut Counts) {
    let what = format!("raid0 of {n}");
    let mut w = World::new(MetaLayout::Raid0, n);
    create(&mut w, 1, None, counts, &what);
    stop(&mut w, counts, &what);
    start(&mut w, None, counts, &what);
    stop(&mut w, counts, &what);
    // Killed while serving (dirty), then started again and stopped.
    start(&mut w, None, counts, &what);
    start(&mut w, None, counts, &what);
    stop(&mut w, counts, &what);
}

fn raid5(n: u32, f: u32, create_left_out: Option<u32>, counts: &mut Counts) {
    let what = format!("raid5 of {n}, member {f}, created without {create_left_out:?}");
    let mut w = World::new(MetaLayout::Raid5, n);
    create(&mut w, 2, create_left_out, counts, &what);
    stop(&mut w, counts, &what);
    if let Some(c) = create_left_out {
        // Created degraded: rebuilt, then it rejoins.
        start(&mut w, Some(c), counts, &what);
        w.missed[c as usize] = false;
        w = cut_everywhere(
            &w,
            Transition::Stop { rejoin: Some(c) },
            &[Some(c), None],
            false,
            counts,
            &what,
        );
    }
    // Whole: killed while serving, started again, stopped.
    start(&mut w, None, counts, &what);
    start(&mut w, None, counts, &what);
    stop(&mut w, counts, &what);
    // Member f fails while serving: marked out, the others serve on.
    start(&mut w, None, counts, &what);
    w = cut_everywhere(
        &w,
        Transition::Fail(f),
        &[None, Some(f)],
        false,
        counts,
        &what,
    );
    w.left_out = Some(f);
    w.serve_writes();
    stop(&mut w, counts, &what);
    // Served degraded (--failed f), killed, started again, stopped.
    start(&mut w, Some(f), counts, &what);
    start(&mut w, Some(f), counts, &what);
    stop(&mut w, counts, &what);
    // Rebuilt (--rebuild f): killed once mid-rebuild, then rebuilt to the end; it rejoins.
    start(&mut w, Some(f), counts, &what);
    start(&mut w, Some(f), counts, &what);
    w.missed[f as usize] = false;
    w = cut_everywhere(
        &w,
        Transition::Stop { rejoin: Some(f) },
        &[Some(f), None],
        false,
        counts,
        &what,
    );
    w.left_out = None;
    // Whole again.
    start(&mut w, None, counts, &what);
    stop(&mut w, counts, &what);
    let a = w.assemble(None).unwrap().unwrap();
    assert!(a.newest.clean && a.newest.failed_mask == 0 && a.behind.is_empty());
}

#[test]
fn every_cut_of_every_transition_assembles_as_before_or_after() {
    let mut counts = Counts::default();
    for n in [2, 3, 4] {
        raid0(n, &mut counts);
    }
    for n in [3, 4, 5] {
        for f in 0..n {
            for c in [None, Some((f + 1) % n)] {
                raid5(n, f, c, &mut counts);
            }
        }
    }
    eprintln!(
        "superblock cuts: {} crash states, {} assembled as before or after, {} restarts cut again, 0 lockouts",
        counts.crash_states, counts.assembled, counts.restarts
    );
    assert_eq!(counts.assembled, counts.crash_states);
}

/// The old rule (a lower event count is stale) is what locked arrays out: a start cut after one
/// member of three is written leaves two members a generation behind.
#[test]
fn a_start_cut_after_one_member_leaves_the_others_current_and_the_array_dirty() {
    let mut w = World::new(MetaLayout::Raid5, 3);
    let mut counts = Counts::default();
    create(&mut w, 3, None, &mut counts, "raid5");
    stop(&mut w, &mut counts, "raid5");
    let a = w.assemble(None).unwrap().unwrap();
    assert!(a.newest.clean);
    let step = a.newest.step(Transition::Start { left_out: None });
    let c = w.written(&step.next, &step.order, 0b001);
    let a = c.assemble(None).unwrap().unwrap();
    assert_eq!(a.newest.events, step.next.events);
    assert!(!a.newest.clean, "members that disagree are dirty");
    assert_eq!(a.behind, vec![1, 2]);
}
