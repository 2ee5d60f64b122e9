//! NVMe admin passthrough (`NVME_IOCTL_ADMIN_CMD`): Identify Controller, Identify Namespace, the
//! active namespace list and the SMART / Health log, read through a namespace's block device
//! (`/dev/nvme0n1`), its controller's character device (`/dev/nvme0`) or its generic character
//! device (`/dev/ng0n1`). The bytes are parsed by `nines_core::nvme`.
//!
//! An admin command is sent only to a device the kernel names as NVMe (sysfs: a block device
//! called `nvmeXnY[pZ]`, a character device of class `nvme` or `nvme-generic`), never to
//! anything else: an ioctl number means something else to another driver. Anything else is
//! [`Probe::NotNvme`], with the reason, which callers treat as "no NVMe data", not as a failure.
//!
//! Only reads: Identify and Get Log Page, the latter with Retain Asynchronous Event set, so
//! reading the SMART log does not clear a health event the host has not looked at. The kernel
//! asks for CAP_SYS_ADMIN for admin passthrough (Linux 6.1; from 6.2 Identify is allowed
//! without it, Get Log Page is not), so a run without it gets [`NvmeError::Ioctl`] with EACCES or EPERM,
//! said in words.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use nines_core::nvme::{
    IDENTIFY_BYTES, IdentifyController, IdentifyNamespace, NvmeParseError, NvmeReport,
    SMART_LOG_BYTES, SmartLog, parse_identify_controller, parse_identify_namespace,
    parse_namespace_list, parse_smart_log,
};

/// `struct nvme_passthru_cmd` (= `struct nvme_admin_cmd`) of linux/nvme_ioctl.h.
#[repr(C)]
#[derive(Debug, Default)]
struct PassthruCmd {
    opcode: u8,
    flags: u8,
    rsvd1: u16,
    nsid: u32,
    cdw2: u32,
    cdw3: u32,
    metadata: u64,
    addr: u64,
    metadata_len: u32,
    data_len: u32,
    cdw10: u32,
    cdw11: u32,
    cdw12: u32,
    cdw13: u32,
    cdw14: u32,
    cdw15: u32,
    timeout_ms: u32,
    result: u32,
}

const _: () = assert!(std::mem::size_of::<PassthruCmd>() == 72);

/// `_IOC(dir, type, nr, size)` of asm-generic/ioctl.h (x86, arm64, riscv: 2 direction bits,
/// 14 size bits).
const fn ioc(dir: u64, ty: u8, nr: u8, size: usize) -> u64 {
    (dir << 30) | ((size as u64) << 16) | ((ty as u64) << 8) | nr as u64
}

/// `_IO('N', 0x40)`: the namespace ID of a namespace's device node.
const NVME_IOCTL_ID: u64 = ioc(0, b'N', 0x40, 0);
/// `_IOWR('N', 0x41, struct nvme_admin_cmd)`.
pub const NVME_IOCTL_ADMIN_CMD: u64 = ioc(3, b'N', 0x41, std::mem::size_of::<PassthruCmd>());

const OPCODE_GET_LOG_PAGE: u8 = 0x02;
const OPCODE_IDENTIFY: u8 = 0x06;
const CNS_NAMESPACE: u32 = 0x00;
const CNS_CONTROLLER: u32 = 0x01;
const CNS_ACTIVE_NAMESPACES: u32 = 0x02;
const LOG_SMART: u32 = 0x02;
/// Get Log Page CDW10 bit 15: Retain Asynchronous Event.
const LOG_RAE: u32 = 1 << 15;
/// The broadcast namespace ID: the SMART log of the whole controller.
const NSID_ALL: u32 = 0xffff_ffff;
/// Each admin command gets this long before the kernel aborts it (0 would be the kernel's
/// admin timeout, 60 s by default).
const ADMIN_TIMEOUT_MS: u32 = 10_000;

/// Which kind of NVMe device node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NvmeNode {
    /// A namespace's block device (`nvme0n1`, or a partition of it, `nvme0n1p1`).
    Namespace,
    /// A controller's character device (`nvme0`): no namespace of its own.
    Controller,
    /// A namespace's generic character device (`ng0n1`).
    Generic,
}

/// What a path is, as far as NVMe admin commands go.
#[derive(Debug)]
pub enum Probe {
    Nvme(NvmeDevice),
    /// Not an NVMe device (a file, a zram or loop device, ...): why, in words.
    NotNvme(String),
}

/// Why an admin command on an NVMe device did not give its data.
#[derive(Debug, thiserror::Error)]
pub enum NvmeError {
    #[error("{path}: cannot open it: {source}")]
    Open { path: String, source: io::Error },
    #[error("{path}: {what}: {source}{}", privilege_hint(source))]
    Ioctl {
        path: String,
        what: &'static str,
        source: io::Error,
    },
    #[error("{path}: {what}: the controller returned status {status:#06x} ({})", status_text(*status))]
    Status {
        path: String,
        what: &'static str,
        status: u16,
    },
    #[error("{path}: {source}")]
    Parse {
        path: String,
        source: NvmeParseError,
    },
}

fn privilege_hint(e: &io::Error) -> &'static str {
    match e.raw_os_error() {
        Some(libc::EACCES) | Some(libc::EPERM) => {
            " (NVMe admin passthrough needs CAP_SYS_ADMIN: run as root)"
        }
        _ => "",
    }
}

/// An NVMe status as the kernel returns it (the completion's status field less its phase bit:
/// bits 7:0 status code, 10:8 status code type, 14 do not retry), in words.
pub fn status_text(status: u16) -> String {
    let sct = (status >> 8) & 0x7;
    let sc = status & 0xff;
    let name = match (sct, sc) {
        (0, 0x01) => "Invalid Command Opcode",
        (0, 0x02) => "Invalid Field in Command",
        (0, 0x06) => "Internal Error",
        (0, 0x0b) => "Invalid Namespace or Format",
        (1, 0x09) => "Invalid Log Page",
        _ => "",
    };
    if name.is_empty() {
        format!("status code type {sct}, status code {sc:#04x}")
    } else {
        name.to_string()
    }
}

/// Which NVMe node a device is, from what sysfs says of it: its kernel name (`DEVNAME` in its
/// uevent) and, for a character device, its class (the `subsystem` link's name). `None`: not
/// NVMe.
pub fn classify(block: bool, devname: &str, class: Option<&str>) -> Option<NvmeNode> {
    /// `digits` then the rest, where `digits` is at least one ASCII digit.
    fn digits(s: &str) -> Option<&str> {
        let rest = s.trim_start_matches(|c: char| c.is_ascii_digit());
        (rest.len() < s.len()).then_some(rest)
    }
    if block {
        // nvme<ctrl>n<ns>, or a partition nvme<ctrl>n<ns>p<part>.
        let rest = digits(devname.strip_prefix("nvme")?)?;
        let rest = digits(rest.strip_prefix('n')?)?;
        return match rest {
            "" => Some(NvmeNode::Namespace),
            r => digits(r.strip_prefix('p')?)
                .filter(|r| r.is_empty())
                .map(|_| NvmeNode::Namespace),
        };
    }
    match class? {
        "nvme" => digits(devname.strip_prefix("nvme")?)
            .filter(|r| r.is_empty())
            .map(|_| NvmeNode::Controller),
        "nvme-generic" => {
            let rest = digits(devname.strip_prefix("ng")?)?;
            digits(rest.strip_prefix('n')?)
                .filter(|r| r.is_empty())
                .map(|_| NvmeNode::Generic)
        }
        _ => None,
    }
}

/// A device node the kernel names as NVMe, opened read-only.
#[derive(Debug)]
pub struct NvmeDevice {
    path: PathBuf,
    file: File,
    node: NvmeNode,
    /// The kernel's name of it (`nvme0n1`).
    name: String,
}

impl NvmeDevice {
    /// Opens `path` if it is an NVMe device node; anything else is [`Probe::NotNvme`]. Nothing
    /// but a block or character device is opened (a FIFO would block; a file is no device).
    pub fn open(path: &Path) -> Result<Probe, NvmeError> {
        let err = |source| NvmeError::Open {
            path: path.display().to_string(),
            source,
        };
        let meta = std::fs::metadata(path).map_err(err)?;
        let ft = meta.file_type();
        if !ft.is_block_device() && !ft.is_char_device() {
            let what = if ft.is_file() {
                "a regular file"
            } else if ft.is_dir() {
                "a directory"
            } else if ft.is_fifo() {
                "a FIFO"
            } else if ft.is_socket() {
                "a socket"
            } else {
                "not a device"
            };
            return Ok(Probe::NotNvme(format!(
                "{} is {what}, not an NVMe device",
                path.display()
            )));
        }
        let block = ft.is_block_device();
        let (name, class, driver) = sysfs_names(block, meta.rdev());
        let Some(node) = classify(block, &name, class.as_deref()) else {
            let kind = if block { "block" } else { "character" };
            let driver = driver.map(|d| format!(" (driver {d})")).unwrap_or_default();
            let name = if name.is_empty() { "?" } else { &name };
            return Ok(Probe::NotNvme(format!(
                "{} is {name}, a {kind} device that is not NVMe{driver}",
                path.display()
            )));
        };
        // O_NONBLOCK: opening a device node never waits (a tape or tty-like driver would).
        let file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
            .open(path)
            .map_err(err)?;
        // The node opened is the one classified (not replaced in between).
        let opened = file.metadata().map_err(err)?;
        if opened.rdev() != meta.rdev() || opened.file_type() != ft {
            return Ok(Probe::NotNvme(format!(
                "{} changed while it was opened",
                path.display()
            )));
        }
        Ok(Probe::Nvme(NvmeDevice {
            path: path.to_path_buf(),
            file,
            node,
            name,
        }))
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn node(&self) -> NvmeNode {
        self.node
    }

    /// The kernel's name of the node (`nvme0n1`, `nvme0`, `ng0n1`).
    pub fn name(&self) -> &str {
        &self.name
    }

    fn path_text(&self) -> String {
        self.path.display().to_string()
    }

    /// The namespace this node is (`NVME_IOCTL_ID`); `None` for a controller's node.
    pub fn nsid(&self) -> Result<Option<u32>, NvmeError> {
        if self.node == NvmeNode::Controller {
            return Ok(None);
        }
        // SAFETY: NVME_IOCTL_ID takes no argument and returns the namespace ID; the descriptor
        // is open and is an NVMe namespace's node (classified above).
        let rc = unsafe { libc::ioctl(self.file.as_raw_fd(), NVME_IOCTL_ID as _) };
        match u32::try_from(rc) {
            Ok(id) if id > 0 => Ok(Some(id)),
            _ => Err(NvmeError::Ioctl {
                path: self.path_text(),
                what: "NVME_IOCTL_ID",
                source: io::Error::last_os_error(),
            }),
        }
    }

    /// One admin command reading `buf.len()` bytes into `buf`; returns the completion's
    /// Dword 0.
    fn admin(
        &self,
        what: &'static str,
        opcode: u8,
        nsid: u32,
        cdw10: u32,
        buf: &mut [u8],
    ) -> Result<u32, NvmeError> {
        debug_assert!(
            buf.len() <= IDENTIFY_BYTES,
            "admin buffers are at most 4 KiB"
        );
        let data_len = buf.len() as u32;
        let mut cmd = PassthruCmd {
            opcode,
            nsid,
            addr: buf.as_mut_ptr() as u64,
            data_len,
            cdw10,
            timeout_ms: ADMIN_TIMEOUT_MS,
            ..PassthruCmd::default()
        };
        // SAFETY: `cmd` is a `struct nvme_passthru_cmd` (repr(C), 72 bytes, checked at compile
        // time) that the kernel reads and writes back (its `result`); `addr`/`data_len` name
        // `buf`, borrowed mutably across the call, so the data the controller returns lands in
        // memory this function owns for that long. No metadata buffer. The descriptor is open
        // and the kernel named the node NVMe (`open`).
        let rc = unsafe {
            libc::ioctl(
                self.file.as_raw_fd(),
                NVME_IOCTL_ADMIN_CMD as _,
                &mut cmd as *mut PassthruCmd,
            )
        };
        match rc {
            0 => Ok(cmd.result),
            r if r < 0 => Err(NvmeError::Ioctl {
                path: self.path_text(),
                what,
                source: io::Error::last_os_error(),
            }),
            status => Err(NvmeError::Status {
                path: self.path_text(),
                what,
                status: status as u16,
            }),
        }
    }

    fn identify(&self, what: &'static str, cns: u32, nsid: u32) -> Result<Vec<u8>, NvmeError> {
        let mut buf = vec![0u8; IDENTIFY_BYTES];
        self.admin(what, OPCODE_IDENTIFY, nsid, cns, &mut buf)?;
        Ok(buf)
    }

    fn parsed<T>(&self, r: Result<T, NvmeParseError>) -> Result<T, NvmeError> {
        r.map_err(|source| NvmeError::Parse {
            path: self.path_text(),
            source,
        })
    }

    /// Identify Controller (CNS 01h).
    pub fn identify_controller(&self) -> Result<IdentifyController, NvmeError> {
        let b = self.identify("Identify Controller", CNS_CONTROLLER, 0)?;
        self.parsed(parse_identify_controller(&b))
    }

    /// Identify Namespace (CNS 00h) of `nsid`.
    pub fn identify_namespace(&self, nsid: u32) -> Result<IdentifyNamespace, NvmeError> {
        let b = self.identify("Identify Namespace", CNS_NAMESPACE, nsid)?;
        self.parsed(parse_identify_namespace(&b))
    }

    /// The active namespace IDs (CNS 02h from NSID 0: the first 1024).
    pub fn active_namespaces(&self) -> Result<Vec<u32>, NvmeError> {
        let b = self.identify("active namespace list", CNS_ACTIVE_NAMESPACES, 0)?;
        self.parsed(parse_namespace_list(&b))
    }

    /// The controller's SMART / Health Information log (Log Identifier 02h, NSID FFFFFFFFh).
    pub fn smart_log(&self) -> Result<SmartLog, NvmeError> {
        let mut buf = vec![0u8; SMART_LOG_BYTES];
        // CDW10: LID in bits 7:0, RAE in bit 15, NUMDL (dwords, 0's based) in bits 31:16.
        let numd = (SMART_LOG_BYTES / 4 - 1) as u32;
        let cdw10 = LOG_SMART | LOG_RAE | (numd << 16);
        self.admin(
            "Get Log Page (SMART / Health)",
            OPCODE_GET_LOG_PAGE,
            NSID_ALL,
            cdw10,
            &mut buf,
        )?;
        self.parsed(parse_smart_log(&buf))
    }

    /// What a report says of this device: the controller's identify data (its failure is the
    /// error), and as far as they can be read the namespace, the active namespaces and the
    /// SMART log (as `smart_before`); a command that fails after Identify Controller is a note.
    pub fn report(&self) -> Result<NvmeReport, NvmeError> {
        let controller = self.identify_controller()?;
        let mut notes = Vec::new();
        let mut note = |e: NvmeError| notes.push(e.to_string());
        let nsid = self.nsid().map_err(&mut note).ok().flatten();
        let namespace = nsid.and_then(|id| self.identify_namespace(id).map_err(&mut note).ok());
        let active_namespaces = self.active_namespaces().map_err(&mut note).ok();
        let smart_before = self.smart_log().map_err(&mut note).ok();
        Ok(NvmeReport {
            device: self.path_text(),
            controller,
            nsid,
            namespace,
            active_namespaces,
            smart_before,
            smart_after: None,
            smart_delta: None,
            notes,
        })
    }

    /// Reads the SMART log again after a run into `report` (`smart_after`, and the delta from
    /// `smart_before`); a failure is a note.
    pub fn finish_report(&self, report: &mut NvmeReport) {
        match self.smart_log() {
            Ok(after) => {
                report.smart_delta = report.smart_before.as_ref().and_then(|b| b.delta(&after));
                if report.smart_before.is_some() && report.smart_delta.is_none() {
                    report.notes.push(format!(
                        "{}: a SMART counter went down during the run (the controller was reset?): no delta",
                        self.path_text()
                    ));
                }
                report.smart_after = Some(after);
            }
            Err(e) => report.notes.push(format!("after the run: {e}")),
        }
    }
}

/// What sysfs says of a device number: its kernel name, its class (for a character device),
/// and its driver where it has one.
fn sysfs_names(block: bool, rdev: u64) -> (String, Option<String>, Option<String>) {
    let dir = PathBuf::from(format!(
        "/sys/dev/{}/{}:{}",
        if block { "block" } else { "char" },
        libc::major(rdev),
        libc::minor(rdev)
    ));
    let name = std::fs::read_to_string(dir.join("uevent"))
        .ok()
        .and_then(|u| {
            u.lines()
                .find_map(|l| l.strip_prefix("DEVNAME=").map(str::to_string))
        })
        .unwrap_or_default();
    let link_name = |p: PathBuf| {
        std::fs::read_link(p)
            .ok()
            .and_then(|l| l.file_name().map(|n| n.to_string_lossy().into_owned()))
    };
    let class = (!block).then(|| link_name(dir.join("subsystem"))).flatten();
    let driver = link_name(dir.join("device/driver")).or_else(|| {
        // zram, loop and friends have no device link; their name says it.
        ["zram", "loop", "nbd", "ram", "nullb", "dm-", "md"]
            .iter()
            .find(|p| name.starts_with(*p))
            .map(|p| p.trim_end_matches('-').to_string())
    });
    (name, class, driver)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ioctl_numbers_are_the_kernels() {
        // linux/nvme_ioctl.h: _IOWR('N', 0x41, struct nvme_admin_cmd), _IO('N', 0x40).
        assert_eq!(NVME_IOCTL_ADMIN_CMD, 0xC048_4E41);
        assert_eq!(NVME_IOCTL_ID, 0x4E40);
    }

    #[test]
    fn names_classify_as_the_kernel_names_nodes() {
        use NvmeNode::*;
        let cases: [(bool, &str, Option<&str>, Option<NvmeNode>); 16] = [
            (true, "nvme0n1", None, Some(Namespace)),
            (true, "nvme12n34", None, Some(Namespace)),
            (true, "nvme0n1p2", None, Some(Namespace)),
            (false, "nvme0", Some("nvme"), Some(Controller)),
            (false, "ng3n1", Some("nvme-generic"), Some(Generic)),
            (true, "nvme0", None, None),
            (true, "nvme0n", None, None),
            (true, "nvme0n1p", None, None),
            (true, "nvmen1", None, None),
            (true, "nvme0n1x", None, None),
            (true, "zram0", None, None),
            (true, "", None, None),
            (false, "nvme0", None, None),
            (false, "nvme0", Some("tty"), None),
            (false, "ng0n1", Some("nvme"), None),
            (false, "nvme-fabrics", Some("nvme"), None),
        ];
        for (block, name, class, want) in cases {
            assert_eq!(classify(block, name, class), want, "{name} {class:?}");
        }
    }

    #[test]
    fn statuses_in_words() {
        assert_eq!(status_text(0x4002), "Invalid Field in Command");
        assert_eq!(status_text(0x0109), "Invalid Log Page");
        assert_eq!(status_text(0x0281), "status code type 2, status code 0x81");
    }
}
