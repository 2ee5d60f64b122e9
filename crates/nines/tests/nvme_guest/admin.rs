//! NVMe admin passthrough on the kernel's nvme driver (issue 41, "Identify and logs"): Identify
//! Controller, Identify Namespace, the active namespace list and the SMART log of QEMU's
//! controllers through every kind of node, the SMART counters around a `nines profile` write,
//! the report's `nvme` section and table lines, and `sim --calibrate --power-states-from` on a
//! device.

use std::path::Path;

use nines_io::nvme::{NvmeDevice, NvmeNode, Probe};

use crate::guest::{in_guest, nines_ok, read, report};

/// The controller (`nvmeN`) whose serial sysfs gives as `serial`.
fn controller_with_serial(serial: &str) -> String {
    let mut found = Vec::new();
    for e in std::fs::read_dir("/sys/class/nvme").expect("/sys/class/nvme") {
        let name = e.unwrap().file_name().to_string_lossy().into_owned();
        if read(format!("/sys/class/nvme/{name}/serial")) == serial {
            found.push(name);
        }
    }
    assert_eq!(
        found.len(),
        1,
        "controllers with serial {serial}: {found:?}"
    );
    found.pop().unwrap()
}

fn open(path: &str) -> NvmeDevice {
    match NvmeDevice::open(Path::new(path)).unwrap() {
        Probe::Nvme(d) => d,
        Probe::NotNvme(why) => panic!("{path}: {why}"),
    }
}

#[test]
#[ignore = "runs inside the NVMe guest (boot_mixed_controllers)"]
fn guest_admin_identify_qemu_controllers_through_every_node() {
    in_guest();
    // scripts/nvme-guest.sh names controller k's serial nines<k>; MIXED gives controller 0 one
    // 256 MiB namespace and controller 1 two namespaces.
    let c0 = controller_with_serial("nines0");
    let n = &c0["nvme".len()..];
    for (path, node) in [
        (format!("/dev/{c0}n1"), NvmeNode::Namespace),
        (format!("/dev/{c0}"), NvmeNode::Controller),
        (format!("/dev/ng{n}n1"), NvmeNode::Generic),
    ] {
        let dev = open(&path);
        assert_eq!(dev.node(), node, "{path}");
        let c = dev.identify_controller().unwrap();
        assert_eq!(c.model, "QEMU NVMe Ctrl", "{path}");
        assert_eq!(c.serial, "nines0", "{path}");
        assert_eq!(c.vendor_id, 0x1b36, "{path}: Red Hat's PCI vendor ID");
        assert!(
            !c.firmware.is_empty() && !c.firmware.ends_with(' '),
            "{c:?}"
        );
        // sysfs shows the same identify strings.
        assert_eq!(
            c.firmware,
            read(format!("/sys/class/nvme/{c0}/firmware_rev"))
        );
        assert_eq!(c.model, read(format!("/sys/class/nvme/{c0}/model")));
        // QEMU: one operational power state (25 W, ENLAT 16 us, EXLAT 4 us), no APST.
        assert_eq!(c.power_states.len(), 1, "{c:?}");
        let ps0 = c.power_states[0];
        assert!(ps0.operational && ps0.power_uw_max == 25_000_000, "{ps0:?}");
        assert_eq!((ps0.latency_us_entry, ps0.latency_us_exit), (16, 4));
        assert!(!c.apst_supported);
        assert!(c.namespaces_max >= 1);
        assert_eq!(dev.active_namespaces().unwrap(), vec![1], "{path}");
        let nsid = dev.nsid().unwrap();
        assert_eq!(nsid, (node != NvmeNode::Controller).then_some(1), "{path}");
        let ns = dev.identify_namespace(1).unwrap();
        assert_eq!(ns.block_bytes, Some(512), "{ns:?}");
        assert_eq!(ns.size_bytes, Some(256 << 20), "{ns:?}");
        let smart = dev.smart_log().unwrap();
        assert!(
            (-40..150).contains(&smart.temperature_c_composite),
            "{smart:?}"
        );
        assert_eq!(smart.critical_warning, 0, "{smart:?}");
    }
    // Controller 1's two namespaces.
    let c1 = controller_with_serial("nines1");
    assert_eq!(
        open(&format!("/dev/{c1}")).active_namespaces().unwrap(),
        vec![1, 2]
    );
    // doctor lists each controller from sysfs: model, firmware, write cache, APST.
    let doc = crate::guest::nines_ok(&["doctor", "--json", "-"]);
    let doc: serde_json::Value = serde_json::from_slice(&doc.stdout).unwrap();
    let line = doc["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["id"] == "block.nvme" && f["subject"] == c0.as_str())
        .unwrap_or_else(|| panic!("no block.nvme finding for {c0}: {doc}"));
    let title = line["title"].as_str().unwrap();
    assert!(
        title.starts_with(&format!("{c0}: QEMU NVMe Ctrl, firmware "))
            && title.contains(&format!("volatile write cache: write back ({c0}n1)"))
            && title.ends_with(
                "APST not in use (the controller does not support it, or the driver left it off)"
            ),
        "{title}"
    );
    // As root, each controller's power-state table and what the kernel's APST enters.
    let ps = doc["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["id"] == "block.nvme.power_states" && f["subject"] == c0.as_str())
        .unwrap_or_else(|| panic!("no power-state finding for {c0}: {doc}"));
    let title = ps["title"].as_str().unwrap();
    assert!(
        title.starts_with(&format!("{c0}: power states PS0 "))
            && title.contains(" op")
            && title.ends_with("enters: none"),
        "{title}"
    );
    assert!(
        doc["findings"]
            .as_array()
            .unwrap()
            .iter()
            .any(|f| f["id"] == "host.apst"),
        "{doc}"
    );
    // What is not NVMe in the guest is said so, without an admin command.
    for path in ["/dev/null", "/proc/version", "/tmp"] {
        assert!(
            matches!(
                NvmeDevice::open(Path::new(path)).unwrap(),
                Probe::NotNvme(_)
            ),
            "{path}"
        );
    }
}

#[test]
#[ignore = "runs inside the NVMe guest (boot_mixed_controllers)"]
fn guest_admin_smart_counts_a_profiles_writes_and_the_report_carries_it() {
    in_guest();
    let c0 = controller_with_serial("nines0");
    let path = format!("/dev/{c0}n1");
    let dev = open(&path);
    let before = dev.smart_log().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("w.json");
    const WRITES: u64 = 2000;
    let out = nines_ok(&[
        "profile",
        &path,
        "--rw",
        "randwrite",
        "--bs",
        "4k",
        "--size",
        "32M",
        "--ios",
        &WRITES.to_string(),
        "--iodepth",
        "4",
        "--allow-writes",
        "--json",
        json.to_str().unwrap(),
    ]);
    let after = dev.smart_log().unwrap();
    let grew = before.delta(&after).expect("SMART counters only grow");
    assert!(
        grew.host_write_commands >= WRITES,
        "{} host write commands for {WRITES} writes",
        grew.host_write_commands
    );
    // 2000 x 4 KiB is 16 data units of 512,000 bytes (each count rounded up by the device).
    assert!(grew.data_units_written >= 15, "{grew:?}");
    let r = report(&json);
    let d = &r["devices"][0];
    assert_eq!(d["write"]["ios"], WRITES);
    let n = &d["nvme"];
    assert_eq!(n["device"], path.as_str());
    assert_eq!(n["controller"]["model"], "QEMU NVMe Ctrl");
    assert_eq!(n["controller"]["serial"], "nines0");
    assert_eq!(n["nsid"], 1);
    assert_eq!(n["active_namespaces"], serde_json::json!([1]));
    assert_eq!(n["namespace"]["block_bytes"], 512);
    // The host's APST policy (6.1's five nvme_core parameters) for a replay under it.
    assert_eq!(
        r["host"]["apst"]["apst_primary_timeout_ms"], 100,
        "{}",
        r["host"]
    );
    assert_eq!(n["controller"]["power_states"][0]["latency_us_entry"], 16);
    assert!(n["controller"]["volatile_write_cache"].is_boolean());
    // The report's delta brackets the run: at least its writes, at most what this test saw.
    let in_report = n["smart_delta"]["host_write_commands"].as_u64().unwrap();
    assert!(
        (WRITES..=grew.host_write_commands).contains(&in_report),
        "{in_report} in the report, {} around it",
        grew.host_write_commands
    );
    assert!(
        n["smart_before"]["host_write_commands"].as_u64()
            < n["smart_after"]["host_write_commands"].as_u64()
    );
    assert!(n.get("notes").is_none(), "{n}");
    // The table on stdout.
    let table = String::from_utf8_lossy(&out.stdout).into_owned();
    let model_line = format!("nvme {c0}n1: {path}: QEMU NVMe Ctrl (firmware ");
    assert!(table.contains(&model_line), "{table}");
    assert!(
        table.contains("power states: PS0 25.00 W, entry 16 µs, exit 4 µs"),
        "{table}"
    );
    assert!(
        table.contains(&format!(
            "nvme {c0}n1: SMART during the run: {in_report} host write"
        )),
        "{table}"
    );
    // The HTML page of `nines report`.
    let html = dir.path().join("w.html");
    nines_ok(&[
        "report",
        json.to_str().unwrap(),
        "-o",
        html.to_str().unwrap(),
    ]);
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(page.contains("<h2>NVMe devices</h2>") && page.contains("QEMU NVMe Ctrl"));
    // A file target in the same guest (on tmpfs: no O_DIRECT) has no nvme section and no
    // nvme lines.
    let file = dir.path().join("f.img");
    std::fs::write(&file, vec![1u8; 4 << 20]).unwrap();
    let fjson = dir.path().join("f.json");
    let out = nines_ok(&[
        "profile",
        file.to_str().unwrap(),
        "--ios",
        "200",
        "--buffered",
        "--json",
        fjson.to_str().unwrap(),
    ]);
    assert!(report(&fjson)["devices"][0].get("nvme").is_none());
    assert!(!String::from_utf8_lossy(&out.stdout).contains("nvme "));
}

#[test]
#[ignore = "runs inside the NVMe guest (boot_mixed_controllers)"]
fn guest_admin_calibrate_takes_power_states_from_the_device() {
    in_guest();
    let c0 = controller_with_serial("nines0");
    let dir = tempfile::tempdir().unwrap();
    let (run, toml) = (dir.path().join("qd1.json"), dir.path().join("fit.toml"));
    // A run to fit (simulated: quick in a TCG guest), then the device's table on top.
    nines_ok(&[
        "sim",
        "--quiet",
        "--completion",
        "none",
        "--ios",
        "12000",
        "--json",
        run.to_str().unwrap(),
    ]);
    let dev = format!("/dev/{c0}n1");
    let out = nines_ok(&[
        "sim",
        "--calibrate",
        run.to_str().unwrap(),
        "--completion",
        "none",
        "--calibrate-ios",
        "12000",
        "--power-states-from",
        &dev,
        "--calibrate-out",
        toml.to_str().unwrap(),
    ]);
    let table = String::from_utf8_lossy(&out.stdout).into_owned();
    // QEMU's controller has one operational state and no APST: nothing for the model, said so.
    assert!(
        table.starts_with(&format!(
            "power states from {dev}: QEMU NVMe Ctrl (firmware "
        )),
        "{table}"
    );
    assert!(
        table.contains("(APSTA 0): the model gets no power states"),
        "{table}"
    );
    let fitted = nines_flash::DeviceConfig::load(toml.to_str().unwrap()).unwrap();
    assert!(fitted.power.states.is_empty());
    assert!(
        std::fs::read_to_string(&toml)
            .unwrap()
            .starts_with("# power states from ")
    );
}

/// Every one of the 64 controllers identifies itself, each with its own serial.
#[test]
#[ignore = "runs inside the 64-controller NVMe guest (boot_64_controllers)"]
fn guest64_admin_identifies_every_controller() {
    in_guest();
    let mut serials: Vec<String> = (0..64)
        .map(|k| {
            let dev = open(&format!("/dev/nvme{k}"));
            let c = dev.identify_controller().unwrap();
            assert_eq!(c.model, "QEMU NVMe Ctrl");
            assert_eq!(dev.active_namespaces().unwrap(), vec![1]);
            c.serial
        })
        .collect();
    serials.sort();
    let mut want: Vec<String> = (0..64).map(|k| format!("nines{k}")).collect();
    want.sort();
    assert_eq!(serials, want);
}
