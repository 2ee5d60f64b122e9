//! `io_uring-cmd`: NVMe passthrough over io_uring (`IORING_OP_URING_CMD` on the NVMe generic
//! character device `/dev/ngXnY`): every I/O is an NVMe Read (02h) or Write (01h) command that
//! the nvme driver puts on an I/O queue as it is, with no block layer in between (no scheduler,
//! no merging, no splitting, no request accounting). fio calls this `ioengine=io_uring_cmd`.
//!
//! Ring: 128-byte submission entries (the 80 bytes after the header hold `struct
//! nvme_uring_cmd`, linux/nvme_ioctl.h) and 32-byte completions (the command's result dword
//! comes back in the second half: what a Zone Append's written LBA or an FDP placement
//! identifier's acknowledgement would use). Both need Linux 5.19; a kernel without them is
//! refused when the ring is made, in one line.
//!
//! Targets: `add_target` takes a descriptor of `/dev/ngXnY` and asks it for its namespace id
//! (`NVME_IOCTL_ID`) and its LBA size (sysfs of the namespace's block device); anything else is
//! refused in one line that names what to use instead. An I/O's offset and length must be whole
//! LBAs (the worker aligns to the target's logical block size, which `Target` reads from the
//! same block device).
//!
//! Completion status: the CQE's `res` is 0 on success, a negative errno when the kernel refused
//! the command, or the NVMe status (Status Code Type and Status Code) when the device failed it;
//! a device status is reported as -EIO (what the block layer maps most statuses to), since the
//! worker's completions carry errno values.
//!
//! Placement (FDP, not testable here: QEMU 7.2 has no FDP): a write with a placement handle is
//! this same Write command with DTYPE 2h (data placement) in CDW12 bits 23:20 and the
//! placement identifier (reclaim group and handle) in DSPEC, CDW13 bits 31:16 (NVMe 2.0 TP4146).
//! [`NvmeRw`] takes them; see docs/arch-io.md.

use std::os::fd::RawFd;

use io_uring::{IoUring, cqueue, opcode, squeue, types};
use nines_core::op::Op;

use super::{Completion, Engine, EngineError, EngineKind, IoDesc};

/// `NVME_URING_CMD_IO`: `_IOWR('N', 0x80, struct nvme_uring_cmd)`, the struct being 72 bytes.
pub const NVME_URING_CMD_IO: u32 = ioc(3, b'N', 0x80, 72);
/// `NVME_IOCTL_ID`: `_IO('N', 0x40)`, the namespace id of an NVMe block or generic device.
pub const NVME_IOCTL_ID: u32 = ioc(0, b'N', 0x40, 0);

const fn ioc(dir: u32, ty: u8, nr: u32, size: u32) -> u32 {
    (dir << 30) | (size << 16) | ((ty as u32) << 8) | nr
}

/// NVMe I/O command opcodes (NVM Command Set).
pub const NVME_CMD_WRITE: u8 = 0x01;
pub const NVME_CMD_READ: u8 = 0x02;

/// Directive type of Data Placement (FDP), CDW12 bits 23:20.
pub const NVME_DTYPE_PLACEMENT: u8 = 2;

/// An FDP placement identifier for a write: reclaim group and placement handle, packed as DSPEC
/// (NVMe 2.0 TP4146: the placement handle in the low bits, the reclaim group above them, as many
/// bits as the device's configuration says; the caller packs them).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Placement {
    pub dspec: u16,
}

/// One NVMe Read or Write of `nlb` LBAs (1..=65536) at `slba` on namespace `nsid`, into or
/// from `addr` (`data_len` bytes).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NvmeRw {
    pub opcode: u8,
    pub nsid: u32,
    pub slba: u64,
    pub nlb: u32,
    pub addr: u64,
    pub data_len: u32,
    pub fua: bool,
    pub placement: Option<Placement>,
}

impl NvmeRw {
    /// The 72 bytes of `struct nvme_uring_cmd` (in the SQE's 80): opcode at 0, nsid at 4, addr
    /// at 24, data_len at 36, CDW10-11 the starting LBA, CDW12 the 0-based block count (bits
    /// 15:0), the directive type (bits 23:20) and FUA (bit 30), CDW13 the directive specific
    /// value (bits 31:16).
    pub fn encode(&self) -> [u8; 80] {
        assert!(
            (1..=1 << 16).contains(&self.nlb),
            "NLB is a 16-bit 0-based count"
        );
        let mut c = [0u8; 80];
        c[0] = self.opcode;
        c[4..8].copy_from_slice(&self.nsid.to_le_bytes());
        c[24..32].copy_from_slice(&self.addr.to_le_bytes());
        c[36..40].copy_from_slice(&self.data_len.to_le_bytes());
        c[40..44].copy_from_slice(&(self.slba as u32).to_le_bytes());
        c[44..48].copy_from_slice(&((self.slba >> 32) as u32).to_le_bytes());
        let mut cdw12 = self.nlb - 1;
        if self.fua {
            cdw12 |= 1 << 30;
        }
        let mut cdw13 = 0u32;
        if let Some(p) = self.placement {
            cdw12 |= u32::from(NVME_DTYPE_PLACEMENT) << 20;
            cdw13 = u32::from(p.dspec) << 16;
        }
        c[48..52].copy_from_slice(&cdw12.to_le_bytes());
        c[52..56].copy_from_slice(&cdw13.to_le_bytes());
        c
    }
}

/// A namespace behind an NVMe generic character device.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GenericNamespace {
    /// "ng0n1".
    pub name: String,
    pub nsid: u32,
    /// The namespace's block device ("/dev/nvme0n1"): its size, LBA size and safety checks.
    pub block_path: std::path::PathBuf,
    pub lba_bytes: u32,
}

/// Why a descriptor is not an NVMe generic device nines can drive.
#[derive(Debug, thiserror::Error)]
pub enum GenericError {
    #[error(
        "{what} is not an NVMe generic character device (/dev/ngXnY); the passthrough engine \
         io_uring-cmd drives only those: use the /dev/ngXnY of the namespace, or another engine"
    )]
    NotGeneric { what: String },
    #[error(
        "{name}: its namespace's block device was not found in sysfs ({detail}); nines needs it \
         for the size, the LBA size and the write-safety checks"
    )]
    NoBlockDevice { name: String, detail: String },
    #[error("{name}: {what}: {error}")]
    Sys {
        name: String,
        what: &'static str,
        error: std::io::Error,
    },
}

/// The NVMe generic device (`/dev/ngXnY`) with device number `rdev` (a character device), and
/// its namespace: the block device of the same namespace on the same controller, found in sysfs
/// (`/sys/dev/char/M:m` is `.../nvme/nvmeX/ngXnY`; the block device `nvmeXnY` with the same
/// `nsid` sits beside it).
pub fn generic_namespace(rdev: libc::dev_t, nsid: u32) -> Result<GenericNamespace, GenericError> {
    let (major, minor) = (libc::major(rdev), libc::minor(rdev));
    let link = format!("/sys/dev/char/{major}:{minor}");
    let dir = std::fs::canonicalize(&link).map_err(|_| GenericError::NotGeneric {
        what: format!("character device {major}:{minor}"),
    })?;
    let name = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    if !is_generic_name(&name) {
        return Err(GenericError::NotGeneric {
            what: format!("character device {major}:{minor} ({name})"),
        });
    }
    let ctrl = dir.parent().ok_or_else(|| GenericError::NoBlockDevice {
        name: name.clone(),
        detail: format!("{} has no parent", dir.display()),
    })?;
    let block = block_of(ctrl, &name, nsid).ok_or_else(|| GenericError::NoBlockDevice {
        name: name.clone(),
        detail: format!("no nvme*n* with nsid {nsid} under {}", ctrl.display()),
    })?;
    let lba_bytes = std::fs::read_to_string(format!("/sys/block/{block}/queue/logical_block_size"))
        .ok()
        .and_then(|s| s.trim().parse::<u32>().ok())
        .filter(|n| n.is_power_of_two() && *n >= 512)
        .ok_or_else(|| GenericError::NoBlockDevice {
            name: name.clone(),
            detail: format!("/sys/block/{block}/queue/logical_block_size is unreadable"),
        })?;
    Ok(GenericNamespace {
        name,
        nsid,
        block_path: std::path::PathBuf::from(format!("/dev/{block}")),
        lba_bytes,
    })
}

/// "ng0n1", "ng12n3" (not "ng0" or "ngx").
pub fn is_generic_name(name: &str) -> bool {
    let Some(rest) = name.strip_prefix("ng") else {
        return false;
    };
    let Some((c, n)) = rest.split_once('n') else {
        return false;
    };
    [c, n]
        .iter()
        .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
}

/// The block device of namespace `nsid` under controller directory `ctrl`: an entry `nvmeXnY`
/// whose `nsid` attribute is `nsid`; failing that (kernels without the attribute), the block
/// device named like the generic one (`ngXnY` -> `nvmeXnY`, the nvme driver's own naming
/// without multipath).
fn block_of(ctrl: &std::path::Path, generic: &str, nsid: u32) -> Option<String> {
    let entries = std::fs::read_dir(ctrl).ok()?;
    let mut by_name = None;
    let twin = format!("nvme{}", &generic[2..]);
    for e in entries.flatten() {
        let n = e.file_name().to_string_lossy().into_owned();
        let Some(rest) = n.strip_prefix("nvme") else {
            continue;
        };
        if !is_generic_name(&format!("ng{rest}"))
            || !std::path::Path::new("/sys/block").join(&n).exists()
        {
            continue;
        }
        let id = std::fs::read_to_string(e.path().join("nsid"))
            .ok()
            .and_then(|s| s.trim().parse::<u32>().ok());
        if id == Some(nsid) {
            return Some(n);
        }
        if n == twin {
            by_name = Some(n);
        }
    }
    by_name
}

/// The namespace id of an NVMe block or generic device (`NVME_IOCTL_ID`).
pub fn namespace_id(fd: RawFd) -> std::io::Result<u32> {
    // SAFETY: NVME_IOCTL_ID takes no argument and returns the id (or -1 with errno).
    let r = unsafe { libc::ioctl(fd, NVME_IOCTL_ID as libc::c_ulong) };
    if r < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(r as u32)
    }
}

struct CmdTarget {
    fd: RawFd,
    nsid: u32,
    lba_shift: u32,
}

pub(crate) struct UringCmd {
    ring: IoUring<squeue::Entry128, cqueue::Entry32>,
    /// IOPOLL: completions appear only when this thread polls for them.
    poll: bool,
    targets: Vec<CmdTarget>,
    in_flight: u32,
    depth_max: u32,
    /// Per in-flight slot: the caller's user_data and the I/O's length (a passthrough
    /// completion says 0, not the bytes done). The SQE carries the slot index; preallocated,
    /// `free` holds the unused slots.
    slots: Vec<(u64, u32)>,
    free: Vec<u32>,
}

const NAME: &str = EngineKind::IoUringCmd.name();
const NAME_POLL: &str = EngineKind::IoUringCmdPoll.name();

impl UringCmd {
    pub(crate) fn new(depth_max: u32, poll: bool) -> Result<UringCmd, EngineError> {
        let name = if poll { NAME_POLL } else { NAME };
        let entries = depth_max.next_power_of_two();
        let mut b = IoUring::<squeue::Entry128, cqueue::Entry32>::builder();
        b.setup_cqsize(entries.max(2) * 2);
        if poll {
            b.setup_iopoll();
        }
        let ring = b
            .build(entries)
            .map_err(|source| match source.raw_os_error() {
                Some(libc::EINVAL) => EngineError::Unsupported {
                    engine: name,
                    detail: "this kernel's io_uring has no 128-byte submission entries (NVMe \
                             passthrough needs Linux 5.19 or later); use --engine io_uring on \
                             the block device"
                        .into(),
                },
                Some(libc::ENOSYS) => EngineError::Unsupported {
                    engine: name,
                    detail: "this kernel has no io_uring; use --engine libaio".into(),
                },
                Some(libc::EPERM) => EngineError::Unsupported {
                    engine: name,
                    detail: "io_uring is disabled (sysctl kernel.io_uring_disabled)".into(),
                },
                _ => EngineError::Sys {
                    engine: name,
                    what: "io_uring_setup",
                    error: source,
                },
            })?;
        Ok(UringCmd {
            ring,
            poll,
            targets: Vec::new(),
            in_flight: 0,
            depth_max,
            slots: vec![(0, 0); depth_max as usize],
            free: (0..depth_max).rev().collect(),
        })
    }
}

impl Engine for UringCmd {
    fn kind(&self) -> EngineKind {
        if self.poll {
            EngineKind::IoUringCmdPoll
        } else {
            EngineKind::IoUringCmd
        }
    }

    fn add_target(&mut self, fd: RawFd) -> Result<usize, EngineError> {
        let unsupported = |detail: String| EngineError::Unsupported {
            engine: self.kind().name(),
            detail,
        };
        // SAFETY: fstat fills st.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        if unsafe { libc::fstat(fd, &mut st) } != 0 {
            return Err(EngineError::Sys {
                engine: self.kind().name(),
                what: "fstat",
                error: std::io::Error::last_os_error(),
            });
        }
        if st.st_mode & libc::S_IFMT != libc::S_IFCHR {
            let what = if st.st_mode & libc::S_IFMT == libc::S_IFBLK {
                "a block device"
            } else {
                "a file"
            };
            return Err(unsupported(format!(
                "{}",
                GenericError::NotGeneric {
                    what: format!("the target ({what})")
                }
            )));
        }
        let nsid = namespace_id(fd).map_err(|e| {
            unsupported(format!(
                "{}",
                GenericError::NotGeneric {
                    what: format!("the target (NVME_IOCTL_ID: {e})")
                }
            ))
        })?;
        let ns = generic_namespace(st.st_rdev, nsid).map_err(|e| unsupported(e.to_string()))?;
        if self.poll {
            let block = ns
                .block_path
                .file_name()
                .map(|n| n.to_string_lossy().into_owned());
            let block = block.unwrap_or_default();
            let io_poll = std::fs::read_to_string(format!("/sys/block/{block}/queue/io_poll"));
            if !io_poll.as_deref().is_ok_and(|v| v.trim() == "1") {
                return Err(EngineError::PollUnsupported {
                    detail: format!(
                        "{} (namespace {block}) has none (/sys/block/{block}/queue/io_poll is not 1)",
                        ns.name
                    ),
                });
            }
        }
        self.targets.push(CmdTarget {
            fd,
            nsid,
            lba_shift: ns.lba_bytes.trailing_zeros(),
        });
        Ok(self.targets.len() - 1)
    }

    fn queue(&mut self, io: IoDesc) -> Result<(), EngineError> {
        if self.in_flight >= self.depth_max {
            return Err(EngineError::QueueFull {
                engine: self.kind().name(),
                depth_max: self.depth_max,
            });
        }
        let t = &self.targets[io.target];
        let mask = (1u64 << t.lba_shift) - 1;
        let nlb = io.len_bytes >> t.lba_shift;
        if io.offset_bytes & mask != 0
            || u64::from(io.len_bytes) & mask != 0
            || nlb == 0
            || nlb > 1 << 16
        {
            return Err(EngineError::Unsupported {
                engine: self.kind().name(),
                detail: format!(
                    "an I/O of {} bytes at {} is not whole LBAs of {} bytes (or is over 65536 \
                     LBAs); use a --bs that is a multiple of the LBA size",
                    io.len_bytes,
                    io.offset_bytes,
                    1u64 << t.lba_shift
                ),
            });
        }
        let opcode_nvme = match io.op {
            Op::Read => NVME_CMD_READ,
            Op::Write => NVME_CMD_WRITE,
        };
        let cmd = NvmeRw {
            opcode: opcode_nvme,
            nsid: t.nsid,
            slba: io.offset_bytes >> t.lba_shift,
            nlb,
            addr: io.buf as u64,
            data_len: io.len_bytes,
            fua: false,
            placement: None,
        }
        .encode();
        let slot = self.free.pop().expect("a free slot below depth_max");
        self.slots[slot as usize] = (io.user_data, io.len_bytes);
        let entry = opcode::UringCmd80::new(types::Fd(t.fd), NVME_URING_CMD_IO)
            .cmd(cmd)
            .build()
            .user_data(u64::from(slot));
        // SAFETY: the caller keeps the buffer valid until this I/O is reaped; the command names
        // it by address, and the kernel reads the 80 command bytes at submission.
        let pushed = unsafe { self.ring.submission().push(&entry) };
        assert!(pushed.is_ok(), "submission queue full below depth_max");
        self.in_flight += 1;
        Ok(())
    }

    fn commit(&mut self) -> Result<(), EngineError> {
        super::uring::submit(self.ring.submitter(), self.kind().name())
    }

    fn reap(&mut self, min: usize, out: &mut [Completion]) -> Result<usize, EngineError> {
        if out.is_empty() {
            return Ok(0);
        }
        let min = min.min(out.len()).min(self.in_flight as usize);
        let mut n = 0;
        let mut polled = false;
        let engine = self.kind().name();
        // Bounded: each pass returns or waits in the kernel for completions in flight.
        loop {
            for cqe in self.ring.completion() {
                let res = cqe.result();
                let slot = cqe.user_data() as u32;
                let (user_data, len) = self.slots[slot as usize];
                self.free.push(slot);
                if self.poll && res == -libc::EOPNOTSUPP {
                    self.in_flight -= 1;
                    return Err(EngineError::PollUnsupported {
                        detail: "the kernel refused a polled NVMe passthrough command (polled \
                                 URING_CMD needs Linux 6.1 and poll queues); use --engine \
                                 io_uring-cmd"
                            .into(),
                    });
                }
                if res == -libc::EOPNOTSUPP || res == -libc::ENOTTY {
                    self.in_flight -= 1;
                    return Err(EngineError::Unsupported {
                        engine,
                        detail: "the kernel refused an NVMe passthrough command (no \
                                 IORING_OP_URING_CMD for this device: Linux 5.19 or later); \
                                 use --engine io_uring on the block device"
                            .into(),
                    });
                }
                // The worker's completions are bytes done or -errno; passthrough answers 0 for
                // success (the data length is the command's), an NVMe status above 0.
                let result = match res {
                    0 => i64::from(len),
                    r if r > 0 => -(libc::EIO as i64),
                    r => i64::from(r),
                };
                out[n] = Completion { user_data, result };
                n += 1;
                self.in_flight -= 1;
                if n == out.len() {
                    break;
                }
            }
            if n >= min && (polled || n > 0 || !self.poll) {
                return Ok(n);
            }
            // IOPOLL completions appear only when someone polls: enter the kernel even for
            // min == 0 (submit_and_wait sets GETEVENTS for IOPOLL rings).
            polled = true;
            super::uring::enter(self.ring.submitter(), min - n.min(min), engine)?;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ioctl_numbers_are_the_kernels() {
        // linux/nvme_ioctl.h: NVME_URING_CMD_IO = _IOWR('N', 0x80, struct nvme_uring_cmd),
        // NVME_IOCTL_ID = _IO('N', 0x40).
        assert_eq!(NVME_URING_CMD_IO, 0xC048_4E80);
        assert_eq!(NVME_IOCTL_ID, 0x4E40);
    }

    #[test]
    fn a_read_command_has_the_spec_layout() {
        let c = NvmeRw {
            opcode: NVME_CMD_READ,
            nsid: 3,
            slba: 0x1_2345_6789,
            nlb: 8,
            addr: 0x0dea_dbee_f000,
            data_len: 4096,
            ..NvmeRw::default()
        }
        .encode();
        assert_eq!(c[0], 0x02);
        assert_eq!(u32::from_le_bytes(c[4..8].try_into().unwrap()), 3);
        assert_eq!(
            u64::from_le_bytes(c[24..32].try_into().unwrap()),
            0x0dea_dbee_f000
        );
        assert_eq!(u32::from_le_bytes(c[36..40].try_into().unwrap()), 4096);
        assert_eq!(
            u32::from_le_bytes(c[40..44].try_into().unwrap()),
            0x2345_6789
        );
        assert_eq!(u32::from_le_bytes(c[44..48].try_into().unwrap()), 1);
        assert_eq!(
            u32::from_le_bytes(c[48..52].try_into().unwrap()),
            7,
            "0-based NLB"
        );
        assert_eq!(&c[52..], &[0u8; 28][..]);
    }

    #[test]
    fn fua_and_placement_go_into_cdw12_and_cdw13() {
        let p = Placement { dspec: 0x0102 };
        let c = NvmeRw {
            opcode: NVME_CMD_WRITE,
            nsid: 1,
            nlb: 1,
            data_len: 512,
            fua: true,
            placement: Some(p),
            ..NvmeRw::default()
        }
        .encode();
        assert_eq!(c[0], 0x01);
        let cdw12 = u32::from_le_bytes(c[48..52].try_into().unwrap());
        assert_eq!(cdw12 & 0xffff, 0);
        assert_eq!(cdw12 >> 30 & 1, 1, "FUA");
        assert_eq!(cdw12 >> 20 & 0xf, 2, "DTYPE data placement");
        let cdw13 = u32::from_le_bytes(c[52..56].try_into().unwrap());
        assert_eq!(cdw13 >> 16, 0x0102, "DSPEC");
    }

    #[test]
    fn generic_names() {
        for ok in ["ng0n1", "ng12n34"] {
            assert!(is_generic_name(ok), "{ok}");
        }
        for bad in [
            "ng0", "ngn1", "ng0n", "nvme0n1", "ng0n1p1", "ng0c0n1", "", "ng",
        ] {
            assert!(!is_generic_name(bad), "{bad}");
        }
    }

    proptest::proptest! {
        /// Any block count in range round-trips through CDW12, and the starting LBA through
        /// CDW10-11.
        #[test]
        fn fields_round_trip(slba in 0u64..u64::MAX, nlb in 1u32..=65536, nsid: u32) {
            let c = NvmeRw { opcode: NVME_CMD_WRITE, nsid, slba, nlb, ..NvmeRw::default() }.encode();
            let lo = u64::from(u32::from_le_bytes(c[40..44].try_into().unwrap()));
            let hi = u64::from(u32::from_le_bytes(c[44..48].try_into().unwrap()));
            proptest::prop_assert_eq!(lo | hi << 32, slba);
            let cdw12 = u32::from_le_bytes(c[48..52].try_into().unwrap());
            proptest::prop_assert_eq!((cdw12 & 0xffff) + 1, nlb);
            proptest::prop_assert_eq!(u32::from_le_bytes(c[4..8].try_into().unwrap()), nsid);
        }
    }
}
