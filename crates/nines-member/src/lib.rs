//! The member seam (issue 32): a device as both drivers drive it. An SSD model (nines-flash), or
//! a zero-latency device (`--device null:SIZE`) that completes every command when it is sent, for
//! testing the loop and policies without any model. The simulated driver (nines-sim) sends each
//! member command to a [`SimMember`] at virtual time; the real driver's emulated devices
//! (nines-io's `emu:` targets) send it at the real clock. Neither driver depends on the other.
//!
//! Every command reaches the device in non-decreasing time: a command a policy issues at an
//! event earlier than the device's last submission (the host model delays submissions by their
//! CPU cost) is sent at that last submission time instead.

use nines_array::{CmdOp, CmdResult, Control, MemberCmd, Window};
use nines_core::op::Op;
use nines_flash::{GcGoal, PlmWindow, ReadOutcome, Ssd};

/// The logical block of every modelled device: offsets and sizes are multiples of it.
pub const LOGICAL_BLOCK_BYTES: u32 = 4096;
/// The model memory one device uses at most at the default scale (issue 3 allows 64 MiB; half
/// of it keeps preconditioning of the largest presets to a few seconds and leaves room in
/// cache, and GC still has hundreds of blocks per die).
pub const DEVICE_MODEL_BYTES_MAX: u64 = 32 << 20;
/// Invalid argument: a placed write to a member without FDP or beyond its handles.
const EINVAL: i32 = 22;
/// Default budget for all device models together.
pub const MEMORY_BUDGET_BYTES: u64 = 8 << 30;

// Every member of a run is the same kind, and models are what runs fast: kept inline.
#[allow(clippy::large_enum_variant)]
pub enum SimMember {
    Model(Ssd),
    Null { size_bytes: u64 },
}

/// Where a command ended: at what time, with what result.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemberOutcome {
    pub done_ns: u64,
    pub result: CmdResult,
}

impl SimMember {
    pub fn size_bytes(&self) -> u64 {
        match self {
            SimMember::Model(s) => s.logical_bytes(),
            SimMember::Null { size_bytes } => *size_bytes,
        }
    }

    pub fn ssd(&self) -> Option<&Ssd> {
        match self {
            SimMember::Model(s) => Some(s),
            SimMember::Null { .. } => None,
        }
    }

    /// The FDP reclaim unit handles placed writes may name: 0 on a device without FDP (a
    /// conventional model, a null device), which refuses them.
    pub fn fdp_handles(&self) -> u32 {
        match self {
            SimMember::Model(s) if s.fdp_stats().is_some() => s.fdp_handles(),
            _ => 0,
        }
    }

    /// Warms what a command at `offset_bytes` will look up first (a hint; changes nothing
    /// simulated).
    #[inline]
    pub fn prefetch(&self, offset_bytes: u64) {
        if let SimMember::Model(ssd) = self {
            ssd.prefetch(offset_bytes);
        }
    }

    /// Sends `cmd` at `at_ns`; returns when it completes and how.
    #[inline(always)]
    pub fn send(&mut self, at_ns: u64, cmd: &MemberCmd) -> MemberOutcome {
        // Reads and writes on a model, the commands of every run, inline; the rest out of line.
        if let SimMember::Model(ssd) = self {
            let op = match cmd.op {
                CmdOp::Read => Op::Read,
                CmdOp::Write if !cmd.fua => Op::Write,
                _ => return self.send_other(at_ns, cmd),
            };
            return MemberOutcome {
                done_ns: ssd.submit(at_ns, op, cmd.offset_bytes, u64::from(cmd.len_bytes)),
                result: CmdResult::Ok,
            };
        }
        self.send_other(at_ns, cmd)
    }

    #[inline(never)]
    fn send_other(&mut self, at_ns: u64, cmd: &MemberCmd) -> MemberOutcome {
        let ok = |done_ns| MemberOutcome {
            done_ns,
            result: CmdResult::Ok,
        };
        let ssd = match self {
            SimMember::Null { size_bytes } => {
                // The model asserts its own range; a null device checks here, so a policy bug
                // shows at once rather than passing silently.
                assert!(
                    cmd.offset_bytes.saturating_add(u64::from(cmd.len_bytes)) <= *size_bytes,
                    "member command beyond the member: {} bytes at {} on a {size_bytes}-byte device",
                    cmd.len_bytes,
                    cmd.offset_bytes
                );
                return match cmd.op {
                    CmdOp::Control(Control::QueryBusy) => MemberOutcome {
                        done_ns: at_ns,
                        result: CmdResult::Busy { remaining_ns: 0 },
                    },
                    _ => ok(at_ns),
                };
            }
            SimMember::Model(s) => s,
        };
        let (off, len) = (cmd.offset_bytes, u64::from(cmd.len_bytes));
        match cmd.op {
            CmdOp::Read => ok(ssd.submit(at_ns, Op::Read, off, len)),
            CmdOp::FastFailRead { threshold_ns } => {
                match ssd.read_fast_fail(at_ns, off, len, threshold_ns) {
                    ReadOutcome::Done { completion_ns } => ok(completion_ns),
                    ReadOutcome::Busy {
                        remaining_ns,
                        completion_ns,
                    } => MemberOutcome {
                        done_ns: completion_ns,
                        result: CmdResult::Busy { remaining_ns },
                    },
                }
            }
            CmdOp::Write | CmdOp::WriteZeroes => {
                ok(ssd.submit_with(at_ns, Op::Write, off, len, cmd.fua))
            }
            // An FDP device's handle, or EINVAL (NVMe: Invalid Placement Handle, or the
            // directive not enabled on a conventional device).
            CmdOp::PlacedWrite { handle } => {
                if ssd.fdp_stats().is_none() || u32::from(handle) >= ssd.fdp_handles() {
                    return MemberOutcome {
                        done_ns: at_ns,
                        result: CmdResult::Err(EINVAL),
                    };
                }
                ok(ssd.submit_placed(at_ns, Op::Write, off, len, cmd.fua, u32::from(handle)))
            }
            CmdOp::Trim => ok(ssd.trim(at_ns, off, len)),
            // The model's flush: a volatile write cache programs what it holds; with
            // power-loss protection only the controller and `durability.flush_ns` are paid.
            CmdOp::Flush => ok(ssd.flush(at_ns)),
            CmdOp::Control(Control::SetWindow(w)) => {
                let window = match w {
                    Window::Deterministic => PlmWindow::Deterministic,
                    Window::NonDeterministic => PlmWindow::NonDeterministic,
                };
                ssd.select_window(at_ns, window);
                ok(at_ns)
            }
            CmdOp::Control(Control::GcNow { budget_ns }) => {
                let goal = GcGoal {
                    free_blocks_per_die: None,
                    budget_ns: Some(budget_ns),
                };
                ok(ssd.gc_now(at_ns, goal).until_ns)
            }
            CmdOp::Control(Control::QueryBusy) => MemberOutcome {
                done_ns: at_ns,
                result: CmdResult::Busy {
                    remaining_ns: if len == 0 {
                        ssd.busy_remaining_ns(at_ns)
                    } else {
                        ssd.range_busy_remaining_ns(at_ns, off, len)
                    },
                },
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nines_flash::DeviceConfig;

    fn cmd(op: CmdOp, offset_bytes: u64, len_bytes: u32) -> MemberCmd {
        MemberCmd {
            id: 0,
            member: 0,
            op,
            offset_bytes,
            len_bytes,
            buf: nines_array::BufRef::None,
            fua: false,
        }
    }

    #[test]
    fn null_member_completes_at_send_and_is_never_busy() {
        let mut m = SimMember::Null {
            size_bytes: 1 << 20,
        };
        assert_eq!(m.size_bytes(), 1 << 20);
        assert!(m.ssd().is_none());
        let out = m.send(1234, &cmd(CmdOp::Read, 4096, 4096));
        assert_eq!(
            out,
            MemberOutcome {
                done_ns: 1234,
                result: CmdResult::Ok
            }
        );
        let busy = m.send(99, &cmd(CmdOp::Control(Control::QueryBusy), 0, 0));
        assert_eq!(busy.result, CmdResult::Busy { remaining_ns: 0 });
    }

    #[test]
    #[should_panic(expected = "beyond the member")]
    fn null_member_refuses_a_command_past_its_end() {
        let mut m = SimMember::Null { size_bytes: 8192 };
        m.send(0, &cmd(CmdOp::Write, 8192, 4096));
    }

    #[test]
    fn model_member_takes_time_and_answers_as_the_model() {
        let cfg = DeviceConfig::load("afa-m2-2018-ideal").unwrap();
        let cfg = cfg
            .scaled(cfg.scale_for_budget(DEVICE_MODEL_BYTES_MAX))
            .unwrap();
        let mut twin = Ssd::new(&cfg, 7);
        let mut m = SimMember::Model(Ssd::new(&cfg, 7));
        assert_eq!(m.size_bytes(), twin.logical_bytes());
        let write = m.send(1000, &cmd(CmdOp::Write, 0, LOGICAL_BLOCK_BYTES));
        assert!(write.done_ns > 1000, "{write:?}");
        assert_eq!(write.done_ns, twin.submit(1000, Op::Write, 0, 4096));
        let read = m.send(write.done_ns, &cmd(CmdOp::Read, 0, LOGICAL_BLOCK_BYTES));
        assert_eq!(read.done_ns, twin.submit(write.done_ns, Op::Read, 0, 4096));
        assert_eq!(read.result, CmdResult::Ok);
    }
}
