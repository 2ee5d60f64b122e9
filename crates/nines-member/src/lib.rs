//! The member seam (issue 32): a device as both drivers drive it. An SSD model (nines-flash), or
//! a zero-latency device (`--device null:SIZE`) that completes every command when it is sent, for
//! testing the loop and policies without any model. The simulated driver (nines-sim) sends each
//! member command to a [`SimMember`] at virtual time; the real driver's emulated devices
//! (nines-io's `emu:` targets) send it at the real clock. Neither driver depends on the other.
//!
//! A zoned model ([`SimMember::Zoned`], a nines-flash `ZonedSsd`) takes the zone commands
//! (`CmdOp::ZoneAppend`, `ZoneReset`, `ZoneFinish`), answers writes off a write pointer with the
//! errno a block device would, and TRIM and PLM/GC control with EOPNOTSUPP; the other members
//! answer zone commands EOPNOTSUPP.
//!
//! Every command reaches the device in non-decreasing time: a command a policy issues at an
//! event earlier than the device's last submission (the host model delays submissions by their
//! CPU cost) is sent at that last submission time instead.

use nines_array::{CmdOp, CmdResult, Control, MemberCmd, Window};
use nines_core::op::Op;
use nines_flash::zoned::EOPNOTSUPP;
use nines_flash::{GcGoal, PlmWindow, ReadOutcome, Ssd, ZoneDone, ZonedSsd};

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
    Null {
        size_bytes: u64,
    },
    /// A zoned device (NVMe ZNS); boxed: a rare kind, kept off the common variant's size.
    Zoned(Box<ZonedSsd>),
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
            SimMember::Zoned(z) => z.logical_bytes(),
        }
    }

    /// The timing model (a zoned device's too: its counters; its FTL is never used).
    pub fn ssd(&self) -> Option<&Ssd> {
        match self {
            SimMember::Model(s) => Some(s),
            SimMember::Null { .. } => None,
            SimMember::Zoned(z) => Some(z.ssd()),
        }
    }

    /// The zoned device, if this member is one.
    pub fn zoned(&self) -> Option<&ZonedSsd> {
        match self {
            SimMember::Zoned(z) => Some(z),
            _ => None,
        }
    }

    /// Zone size of a zoned member (0: not zoned).
    pub fn zone_bytes(&self) -> u64 {
        self.zoned().map_or(0, |z| z.config().zone_size_bytes)
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
            SimMember::Zoned(z) => return send_zoned(z, at_ns, cmd),
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
                    CmdOp::ZoneAppend | CmdOp::ZoneReset | CmdOp::ZoneFinish => MemberOutcome {
                        done_ns: at_ns,
                        result: CmdResult::Err(EOPNOTSUPP),
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
            // A conventional model has no zones: refused without device time.
            CmdOp::ZoneAppend | CmdOp::ZoneReset | CmdOp::ZoneFinish => MemberOutcome {
                done_ns: at_ns,
                result: CmdResult::Err(EOPNOTSUPP),
            },
        }
    }
}

/// A command to a zoned member.
fn send_zoned(z: &mut ZonedSsd, at_ns: u64, cmd: &MemberCmd) -> MemberOutcome {
    let (off, len) = (cmd.offset_bytes, u64::from(cmd.len_bytes));
    let answer = |d: ZoneDone| MemberOutcome {
        done_ns: d.done_ns,
        result: match d.result {
            Ok(_) => CmdResult::Ok,
            Err(e) => CmdResult::Err(e.errno()),
        },
    };
    match cmd.op {
        CmdOp::Read | CmdOp::FastFailRead { .. } => MemberOutcome {
            done_ns: z.read(at_ns, off, len),
            result: CmdResult::Ok,
        },
        CmdOp::Write | CmdOp::WriteZeroes => answer(z.write(at_ns, off, len, cmd.fua)),
        CmdOp::ZoneAppend => {
            let d = z.append(at_ns, off, len, cmd.fua);
            MemberOutcome {
                done_ns: d.done_ns,
                result: match d.result {
                    Ok(offset_bytes) => CmdResult::Appended { offset_bytes },
                    Err(e) => CmdResult::Err(e.errno()),
                },
            }
        }
        CmdOp::ZoneReset => answer(z.reset(at_ns, off, len)),
        CmdOp::ZoneFinish => answer(z.finish(at_ns, off)),
        CmdOp::Flush => MemberOutcome {
            done_ns: z.flush(at_ns),
            result: CmdResult::Ok,
        },
        CmdOp::Control(Control::QueryBusy) => MemberOutcome {
            done_ns: at_ns,
            result: CmdResult::Busy {
                remaining_ns: z.busy_remaining_ns(at_ns),
            },
        },
        CmdOp::Trim | CmdOp::Control(_) => answer(z.unsupported(at_ns)),
        // A zoned device has no reclaim unit handles: refused as a conventional model
        // without FDP refuses them (NVMe: the directive is not enabled).
        CmdOp::PlacedWrite { .. } => MemberOutcome {
            done_ns: at_ns,
            result: CmdResult::Err(EINVAL),
        },
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

    #[test]
    fn zone_commands_reach_a_zoned_model_and_others_refuse_them() {
        let mut cfg = DeviceConfig::load("zn540").unwrap();
        cfg.geometry.pages_per_block = 8;
        cfg.geometry.blocks_per_plane = 8;
        cfg.ftl.over_provisioning = 0.5;
        let z = cfg.zoned.as_mut().unwrap();
        (z.zone_size_bytes, z.zone_capacity_bytes) = (16 << 20, 8 << 20);
        let mut m = SimMember::Zoned(Box::new(ZonedSsd::new(&cfg, 1).unwrap()));
        assert_eq!(m.size_bytes(), 16 * (16 << 20));
        assert_eq!(m.zone_bytes(), 16 << 20);
        let zone1 = 16 << 20;
        let a = m.send(0, &cmd(CmdOp::ZoneAppend, zone1, 8192));
        assert_eq!(
            a.result,
            CmdResult::Appended {
                offset_bytes: zone1
            }
        );
        let b = m.send(a.done_ns, &cmd(CmdOp::ZoneAppend, zone1, 4096));
        assert_eq!(
            b.result,
            CmdResult::Appended {
                offset_bytes: zone1 + 8192
            }
        );
        // Off the write pointer: EINVAL; TRIM: EOPNOTSUPP.
        let w = m.send(b.done_ns, &cmd(CmdOp::Write, zone1, 4096));
        assert_eq!(w.result, CmdResult::Err(22));
        let t = m.send(w.done_ns, &cmd(CmdOp::Trim, zone1, 4096));
        assert_eq!(t.result, CmdResult::Err(EOPNOTSUPP));
        let w = m.send(t.done_ns, &cmd(CmdOp::Write, zone1 + 12288, 4096));
        assert_eq!(w.result, CmdResult::Ok);
        let r = m.send(w.done_ns, &cmd(CmdOp::ZoneReset, zone1, (16 << 20) as u32));
        assert_eq!(r.result, CmdResult::Ok);
        assert!(r.done_ns >= w.done_ns + 5_000_000, "a reset erases: {r:?}");
        let f = m.send(r.done_ns, &cmd(CmdOp::ZoneFinish, zone1, 0));
        assert_eq!(f.result, CmdResult::Ok);
        assert_eq!(m.zoned().unwrap().stats().zone_finishes, 1);
        assert_eq!(m.zoned().unwrap().stats().zone_resets, 1);
        // A conventional model and a null device refuse zone commands.
        let conv = DeviceConfig::load("afa-m2-2018-ideal").unwrap();
        let conv = conv
            .scaled(conv.scale_for_budget(DEVICE_MODEL_BYTES_MAX))
            .unwrap();
        let mut c = SimMember::Model(Ssd::new(&conv, 7));
        let mut n = SimMember::Null {
            size_bytes: 1 << 20,
        };
        for op in [CmdOp::ZoneAppend, CmdOp::ZoneReset, CmdOp::ZoneFinish] {
            assert_eq!(
                c.send(5, &cmd(op, 0, 4096)).result,
                CmdResult::Err(EOPNOTSUPP)
            );
            assert_eq!(
                n.send(5, &cmd(op, 0, 4096)).result,
                CmdResult::Err(EOPNOTSUPP)
            );
        }
        assert_eq!(c.zone_bytes(), 0);
    }
}
