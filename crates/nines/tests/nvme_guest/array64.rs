//! Paper 000's array shape on real nvme driver instances: 64 NVMe controllers in one guest,
//! placed by `nines tune --plan` (workers per CPU, each device's completions on its worker's
//! CPU), profiled together under SCHED_FIFO, with the report's across-device figures and the
//! interrupt attribution read from the real vectors.

use crate::guest::{in_guest, nines_ok, report};

#[test]
#[ignore = "runs inside the 64-controller NVMe guest (boot_64_controllers)"]
fn guest64_profile_over_64_controllers_with_a_tuned_placement() {
    in_guest();
    let devs: Vec<String> = (0..64).map(|n| format!("/dev/nvme{n}n1")).collect();
    for d in &devs {
        assert!(std::path::Path::new(d).exists(), "{d} is missing");
    }
    let dir = tempfile::tempdir().unwrap();
    let (plan, state, json) = (
        dir.path().join("plan.json"),
        dir.path().join("state.json"),
        dir.path().join("run.json"),
    );
    let plan_s = plan.to_str().unwrap();
    let mut args = vec!["tune", "--plan", "-o", plan_s];
    args.extend(devs.iter().map(String::as_str));
    nines_ok(&args);
    let p = report(&plan);
    // CPU 0 is kept for housekeeping; the 64 devices go round-robin over the other CPUs (Fig. 5:
    // several devices per worker CPU).
    let io_cpus: Vec<u64> = p["io_cpus"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_u64().unwrap())
        .collect();
    assert!(!io_cpus.contains(&0) && !io_cpus.is_empty(), "{io_cpus:?}");
    let placed = p["devices"].as_array().unwrap();
    assert_eq!(placed.len(), 64);
    for c in &io_cpus {
        let n = placed.iter().filter(|d| d["cpu"] == *c).count();
        assert!(
            n >= 64 / io_cpus.len(),
            "{n} devices on CPU {c} of {io_cpus:?}"
        );
    }
    nines_ok(&[
        "tune",
        "--apply",
        plan_s,
        "--state",
        state.to_str().unwrap(),
    ]);
    let mut args = vec![
        "profile",
        "--plan",
        plan_s,
        "--rt-priority",
        "10",
        "--rw",
        "randread",
        "--ios",
        "300",
        "--iodepth",
        "2",
        "--engine",
        "io_uring",
        "--json",
        json.to_str().unwrap(),
    ];
    args.extend(devs.iter().map(String::as_str));
    nines_ok(&args);
    nines_ok(&["tune", "--revert", state.to_str().unwrap()]);
    let r = report(&json);
    let measured = r["devices"].as_array().unwrap();
    assert_eq!(measured.len(), 64, "all 64 measured");
    assert_eq!(r["config"]["extra"]["rt_priority"], 10);
    let mut off_cpu = 0;
    for d in measured {
        assert_eq!(d["read"]["ios"], 300, "{}", d["name"]);
        let planned = placed.iter().find(|p| p["name"] == d["name"]).unwrap();
        assert_eq!(
            d["cpu"], planned["cpu"],
            "{}: worker CPU as planned",
            d["name"]
        );
        let i = &d["interrupts"];
        assert!(i["total"].as_u64().unwrap() > 0, "{i}");
        assert_eq!(i["submit_cpu"], planned["cpu"], "{i}");
        off_cpu += i["off_cpu_count"].as_u64().unwrap();
    }
    assert_eq!(off_cpu, 0, "interrupts served off their device's CPU");
    let across = &r["aggregate"]["across_devices"]["read"];
    let p99 = across
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["percentile"] == "99")
        .unwrap_or_else(|| panic!("{across}"));
    assert!(p99["mean_ns"].as_f64().unwrap() > 0.0 && p99["stddev_ns"].as_f64().is_some());
    let per_cpu: Vec<String> = io_cpus
        .iter()
        .map(|c| {
            let n = placed.iter().filter(|d| d["cpu"] == *c).count();
            format!("CPU {c}: {n}")
        })
        .collect();
    println!(
        "guest64: {} devices measured, workers {}, interrupts off their CPU {off_cpu}, p99 across \
         devices mean {:.0} ns stddev {:.0} ns",
        measured.len(),
        per_cpu.join(", "),
        p99["mean_ns"].as_f64().unwrap(),
        p99["stddev_ns"].as_f64().unwrap()
    );
}
