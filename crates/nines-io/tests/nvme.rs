//! NVMe admin passthrough on what this machine has, which is no NVMe: every other kind of
//! path is a typed "not an NVMe device" with the reason, and no admin command reaches it.
//! (The QEMU guest tests in crates/nines/tests/nvme_guest run the NVMe side.)

mod common;

use nines_io::nvme::{NvmeDevice, NvmeError, Probe};

fn not_nvme(path: &std::path::Path) -> String {
    match NvmeDevice::open(path) {
        Ok(Probe::NotNvme(why)) => {
            assert!(!why.contains('\n'), "{why}");
            why
        }
        other => panic!("{}: {other:?}", path.display()),
    }
}

#[test]
fn files_directories_fifos_and_null_are_not_nvme() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("data.img");
    std::fs::write(&file, vec![0u8; 8192]).unwrap();
    assert!(not_nvme(&file).contains("is a regular file, not an NVMe device"));
    assert!(not_nvme(dir.path()).contains("is a directory"));
    // A FIFO is never opened (opening one for reading would wait for a writer).
    let fifo = dir.path().join("fifo");
    common::run(&format!("mkfifo {}", fifo.display()));
    assert!(not_nvme(&fifo).contains("is a FIFO, not an NVMe device"));
    // A character device of another class.
    let why = not_nvme(std::path::Path::new("/dev/null"));
    assert!(
        why.contains("null, a character device that is not NVMe"),
        "{why}"
    );
    let e = NvmeDevice::open(&dir.path().join("missing")).unwrap_err();
    assert!(matches!(e, NvmeError::Open { .. }), "{e:?}");
    assert!(e.to_string().contains("missing: cannot open it"), "{e}");
}

#[test]
fn a_zram_device_is_not_nvme() {
    let Some(z) = common::Zram::create("16M") else {
        return;
    };
    let why = not_nvme(&z.path);
    assert!(
        why.contains(&format!(
            "{}, a block device that is not NVMe (driver zram)",
            z.name()
        )),
        "{why}"
    );
}
