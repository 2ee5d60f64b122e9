//! A simulated member carries a volume's device-control commands to the SSD model: PLM windows,
//! GC now, busy queries and fast-fail reads mean what nines-flash says they mean.

use nines_array::{BufRef, CmdOp, CmdResult, Control, MemberCmd, Window};
use nines_core::op::Op;
use nines_flash::{DeviceConfig, GcGoal, PlmWindow, Precondition, Ssd};
use nines_sim::member::SimMember;

fn cmd(op: CmdOp, offset_bytes: u64, len_bytes: u32) -> MemberCmd {
    MemberCmd {
        id: 0,
        member: 0,
        op,
        offset_bytes,
        len_bytes,
        buf: BufRef::None,
        fua: false,
    }
}

/// A scaled mqsim-default device at greedy GC's steady state, and a twin to compare with.
fn member() -> (SimMember, Ssd) {
    let cfg = DeviceConfig::preset("mqsim-default").unwrap();
    let cfg = cfg.scaled(cfg.min_scale()).unwrap();
    let mut ssd = Ssd::new(&cfg, 1);
    ssd.precondition(Precondition::Steady, 2);
    (SimMember::Model(ssd.clone()), ssd)
}

fn model(m: &SimMember) -> &Ssd {
    m.ssd().expect("a model member")
}

#[test]
fn windows_and_gc_now_reach_the_model() {
    let (mut m, _) = member();
    let t = 1_000_000;
    m.send(
        t,
        &cmd(
            CmdOp::Control(Control::SetWindow(Window::Deterministic)),
            0,
            0,
        ),
    );
    assert_eq!(model(&m).window(), PlmWindow::Deterministic);
    // Writes up to the window's estimate run no GC.
    let units = model(&m).plm_status(t).dtwin_write_bytes_estimate / 4096;
    let span = model(&m).logical_bytes() / 4096;
    let mut at = t;
    for i in 0..units {
        at += 10_000;
        m.send(at, &cmd(CmdOp::Write, (i * 7919 % span) * 4096, 4096));
    }
    assert_eq!(model(&m).ftl_stats().gc_runs, 0);
    assert!(model(&m).plm_status(at).gc_debt_blocks > 0);
    // GC now with a budget (allowed in any window) reclaims victims within the budget.
    let at = at + 10_000_000_000;
    let debt = model(&m).plm_status(at).gc_debt_blocks;
    let budget_ns = 1_000_000_000; // a victim here moves up to 256 pages at 825 us each
    let out = m.send(at, &cmd(CmdOp::Control(Control::GcNow { budget_ns }), 0, 0));
    assert_eq!(out.result, CmdResult::Ok);
    assert!(out.done_ns > at && out.done_ns <= at + budget_ns, "{out:?}");
    let paid = model(&m).counters().gc_now_victims;
    assert!(paid > 0, "{debt} blocks of debt, nothing reclaimed");
    // NDWIN pays the rest.
    let at = at + 10_000_000_000;
    m.send(
        at,
        &cmd(
            CmdOp::Control(Control::SetWindow(Window::NonDeterministic)),
            0,
            0,
        ),
    );
    assert_eq!(model(&m).window(), PlmWindow::NonDeterministic);
    assert_eq!(model(&m).plm_status(at).gc_debt_blocks, 0);
    assert!(model(&m).counters().gc_now_victims > paid);
    assert_eq!(model(&m).counters().window_violations, 0);
}

#[test]
fn busy_queries_and_fast_fail_reads_answer_busy() {
    let (mut m, mut twin) = member();
    let t = 1_000_000;
    // GC well past the soft threshold keeps every die busy for a while.
    let goal = GcGoal {
        free_blocks_per_die: Some(model(&m).plm_status(t).gc_soft_blocks + 3),
        budget_ns: None,
    };
    if let SimMember::Model(s) = &mut m {
        s.gc_now(t, goal);
    }
    twin.gc_now(t, goal);
    let t = t + 1_000;
    let q = m.send(t, &cmd(CmdOp::Control(Control::QueryBusy), 8192, 4096));
    let busy = twin.range_busy_remaining_ns(t, 8192, 4096);
    assert!(busy > 0);
    assert_eq!(q.result, CmdResult::Busy { remaining_ns: busy });
    let whole = m.send(t, &cmd(CmdOp::Control(Control::QueryBusy), 0, 0));
    assert_eq!(
        whole.result,
        CmdResult::Busy {
            remaining_ns: twin.busy_remaining_ns(t)
        }
    );

    let wait = twin.read_wait_ns(t, 8192, 4096);
    let ff = m.send(
        t,
        &cmd(
            CmdOp::FastFailRead {
                threshold_ns: 10_000,
            },
            8192,
            4096,
        ),
    );
    assert!(
        matches!(ff.result, CmdResult::Busy { remaining_ns } if remaining_ns > 10_000 && remaining_ns <= wait)
    );
    assert!(ff.done_ns < t + 10_000, "a refusal comes back at once");
    // A generous threshold is the plain read.
    let ok = m.send(
        t,
        &cmd(
            CmdOp::FastFailRead {
                threshold_ns: u64::MAX,
            },
            8192,
            4096,
        ),
    );
    assert_eq!(ok.result, CmdResult::Ok);
    assert_eq!(ok.done_ns, twin.submit(t, Op::Read, 8192, 4096));
    // Trim takes the controller like any command.
    let tr = m.send(t, &cmd(CmdOp::Trim, 0, 1 << 20));
    assert_eq!(tr.result, CmdResult::Ok);
    assert_eq!(tr.done_ns, twin.trim(t, 0, 1 << 20));
}
