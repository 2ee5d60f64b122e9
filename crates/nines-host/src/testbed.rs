//! Synthetic host trees in the kernel's file formats, for tests and demos: the paper-000 AFA
//! host (two sockets, 40 logical CPUs, 64 NVMe SSDs) with default or tuned settings.
//! Deterministic: the same options always write the same bytes.

use std::io;
use std::path::Path;

/// CPUs of the AFA host: node 0 = 0-19, node 1 = 20-39; core k of a node has threads k and k+10.
pub const AFA_CPUS: usize = 40;
pub const AFA_NVME: usize = 64;
/// I/O queues per NVMe controller (one per CPU, as the nvme driver allocates them).
pub const AFA_QUEUES: usize = AFA_CPUS;
/// IRQ number of nvme0q0; controller n's queue q is `AFA_IRQ_BASE + n * 41 + q`.
pub const AFA_IRQ_BASE: u32 = 100;

#[derive(Debug, Clone, Copy, Default)]
pub struct AfaOptions {
    /// Isolation, pinned IRQs, performance governor, no housekeeping daemons, RT allowed.
    pub tuned: bool,
}

/// The IRQ of NVMe controller `n`'s queue `q` (q = 0 is the admin queue).
pub fn afa_irq(n: usize, q: usize) -> u32 {
    AFA_IRQ_BASE + (n * (AFA_QUEUES + 1) + q) as u32
}

/// NUMA node of nvme(n): devices alternate in blocks of 16, so the paper's Fig. 5 pairs
/// (nvme0 and nvme32 on cpu 4, nvme31 and nvme63 on cpu 39) come out of a NUMA-local plan.
pub fn afa_node(n: usize) -> usize {
    (n % 32) / 16
}

/// The paper's Fig. 5 CPU for nvme(n): CPUs 4-19 and 24-39, two devices per CPU.
pub fn fig5_cpu(n: usize) -> usize {
    let io: Vec<usize> = (4..20).chain(24..40).collect();
    io[n % 32]
}

fn w(root: &Path, rel: &str, text: &str) -> io::Result<()> {
    let p = root.join(rel);
    if let Some(d) = p.parent() {
        std::fs::create_dir_all(d)?;
    }
    std::fs::write(p, text)
}

pub fn limits_text(rtprio: &str, memlock: &str) -> String {
    let rows: [(&str, &str, &str, &str); 16] = [
        ("Max cpu time", "unlimited", "unlimited", "seconds"),
        ("Max file size", "unlimited", "unlimited", "bytes"),
        ("Max data size", "unlimited", "unlimited", "bytes"),
        ("Max stack size", "8388608", "unlimited", "bytes"),
        ("Max core file size", "0", "unlimited", "bytes"),
        ("Max resident set", "unlimited", "unlimited", "bytes"),
        ("Max processes", "96365", "96365", "processes"),
        ("Max open files", "1024", "524288", "files"),
        ("Max locked memory", memlock, memlock, "bytes"),
        ("Max address space", "unlimited", "unlimited", "bytes"),
        ("Max file locks", "unlimited", "unlimited", "locks"),
        ("Max pending signals", "96365", "96365", "signals"),
        ("Max msgqueue size", "819200", "819200", "bytes"),
        ("Max nice priority", "0", "0", ""),
        ("Max realtime priority", rtprio, rtprio, ""),
        ("Max realtime timeout", "unlimited", "unlimited", "us"),
    ];
    let mut s = format!(
        "{:<26}{:<21}{:<21}{:<10}\n",
        "Limit", "Soft Limit", "Hard Limit", "Units"
    );
    for (n, a, b, u) in rows {
        s.push_str(&format!("{n:<26}{a:<21}{b:<21}{u:<10}\n"));
    }
    s
}

/// The rest of a numbered /proc/interrupts line as show_interrupts() prints it:
/// " %8s" chip, " %*lu" hwirq, "-%-8s" trigger, "  %s" handler.
fn kernel_tail(chip: &str, hwirq: usize, name: &str) -> String {
    format!(" {chip:>8} {hwirq:>4}-{:<8}  {name}", "edge")
}

/// Writes the AFA host tree under `root`.
pub fn write_afa_host(root: &Path, o: AfaOptions) -> io::Result<()> {
    afa_cpus(root, o)?;
    afa_devices(root, o)?;
    afa_processes(root, o)
}

/// The kernel command line, the CPUs (online, isolated, topology, governor, idle states) and
/// the NUMA nodes.
fn afa_cpus(root: &Path, o: AfaOptions) -> io::Result<()> {
    let io_list = "4-19,24-39";
    let mut cmdline = "BOOT_IMAGE=/vmlinuz-4.7.2 root=/dev/mapper/vg-root ro quiet".to_string();
    if o.tuned {
        cmdline.push_str(&format!(" isolcpus={io_list} nohz_full={io_list} rcu_nocbs={io_list} processor.max_cstate=1 idle=poll"));
    }
    w(root, "proc/cmdline", &format!("{cmdline}\n"))?;
    let cpu = "sys/devices/system/cpu";
    w(root, &format!("{cpu}/online"), "0-39\n")?;
    w(root, &format!("{cpu}/possible"), "0-39\n")?;
    w(
        root,
        &format!("{cpu}/isolated"),
        if o.tuned { "4-19,24-39\n" } else { "\n" },
    )?;
    w(
        root,
        &format!("{cpu}/nohz_full"),
        if o.tuned { "4-19,24-39\n" } else { "(null)\n" },
    )?;
    std::fs::create_dir_all(root.join(format!("{cpu}/cpufreq")))?;
    w(root, "sys/devices/system/node/node0/cpulist", "0-19\n")?;
    w(root, "sys/devices/system/node/node1/cpulist", "20-39\n")?;
    w(root, "sys/devices/system/node/online", "0-1\n")?;
    // Xeon E5-2690 v2 idle states (intel_idle); with max_cstate=1 only POLL and C1 remain.
    let states: &[(&str, u32)] = if o.tuned {
        &[("POLL", 0), ("C1", 2)]
    } else {
        &[("POLL", 0), ("C1", 2), ("C1E", 10), ("C3", 33), ("C6", 133)]
    };
    for c in 0..AFA_CPUS {
        let base = format!("{cpu}/cpu{c}");
        let node_base = (c / 20) * 20;
        let core = (c - node_base) % 10;
        let sib = format!("{},{}\n", node_base + core, node_base + core + 10);
        assert!(
            node_base + core + 10 < AFA_CPUS,
            "a sibling is one of the CPUs"
        );
        w(root, &format!("{base}/topology/thread_siblings_list"), &sib)?;
        w(
            root,
            &format!("{base}/topology/physical_package_id"),
            &format!("{}\n", c / 20),
        )?;
        w(
            root,
            &format!("{base}/cpufreq/scaling_governor"),
            if o.tuned {
                "performance\n"
            } else {
                "powersave\n"
            },
        )?;
        for (i, (name, lat)) in states.iter().enumerate() {
            w(
                root,
                &format!("{base}/cpuidle/state{i}/name"),
                &format!("{name}\n"),
            )?;
            w(
                root,
                &format!("{base}/cpuidle/state{i}/latency"),
                &format!("{lat}\n"),
            )?;
            w(root, &format!("{base}/cpuidle/state{i}/disable"), "0\n")?;
        }
    }
    Ok(())
}

/// /proc/interrupts in the kernel's layout: "%*d: " then "%10u " per CPU, chip, hwirq-trigger,
/// name.
struct Interrupts(String);

impl Interrupts {
    /// The header: prec + 8 spaces, then "CPU%-8d" per CPU (prec = 4 digits of IRQ numbers here).
    fn new() -> Interrupts {
        let mut ints = " ".repeat(4 + 8);
        for c in 0..AFA_CPUS {
            ints.push_str(&format!("CPU{c:<8}"));
        }
        ints.push('\n');
        Interrupts(ints)
    }

    fn line(&mut self, irq: &str, counts: &[u64], tail: &str) {
        assert_eq!(counts.len(), AFA_CPUS, "a count per CPU");
        self.0.push_str(&format!("{irq:>4}: "));
        for c in counts {
            self.0.push_str(&format!("{c:>10} "));
        }
        self.0.push_str(tail);
        self.0.push('\n');
    }
}

/// The NVMe devices (queues, interrupts and their affinity, block queue settings) and
/// /proc/interrupts.
fn afa_devices(root: &Path, o: AfaOptions) -> io::Result<()> {
    let mut ints = Interrupts::new();
    let mut counts = vec![0u64; AFA_CPUS];
    counts[0] = 44;
    ints.line("0", &counts, &kernel_tail("IO-APIC", 2, "timer"));
    counts[0] = 3;
    ints.line("8", &counts, &kernel_tail("IO-APIC", 8, "rtc0"));
    for n in 0..AFA_NVME {
        afa_nvme_irqs(root, o, n, &mut ints)?;
        afa_nvme_block(root, o, n)?;
    }
    counts = vec![0u64; AFA_CPUS];
    for (i, c) in counts.iter_mut().enumerate() {
        *c = 100_000 + i as u64;
    }
    ints.line("NMI", &counts, "  Non-maskable interrupts");
    ints.line("LOC", &counts, "  Local timer interrupts");
    ints.0.push_str("ERR:          0\nMIS:          0\n");
    w(root, "proc/interrupts", &ints.0)?;
    w(
        root,
        "sys/module/nvme/parameters/poll_queues",
        if o.tuned { "4\n" } else { "0\n" },
    )?;
    // APST at the kernel's default bound (100 ms), off on the tuned host.
    w(
        root,
        "sys/module/nvme_core/parameters/default_ps_max_latency_us",
        if o.tuned { "0\n" } else { "100000\n" },
    )?;
    std::fs::create_dir_all(root.join("sys/bus/virtio/devices"))?;
    Ok(())
}

/// NVMe device `n`'s queue interrupts: their /proc/interrupts lines and their affinity.
fn afa_nvme_irqs(root: &Path, o: AfaOptions, n: usize, ints: &mut Interrupts) -> io::Result<()> {
    for q in 0..=AFA_QUEUES {
        let irq = afa_irq(n, q);
        let mut cts = vec![0u64; AFA_CPUS];
        // Default host: irqbalance spread each queue's interrupts anywhere; tuned: served on
        // the device's Fig. 5 CPU only.
        if q > 0 {
            let served = if o.tuned {
                fig5_cpu(n)
            } else {
                (n * 7 + q * 3) % AFA_CPUS
            };
            cts[served] = 1000 + (n * 41 + q) as u64;
        }
        let hw = 524288 * (n + 1) + q;
        ints.line(
            &irq.to_string(),
            &cts,
            &format!(" IR-PCI-MSI {hw}-edge      nvme{n}q{q}"),
        );
        let (smp, eff) = if q == 0 {
            ("0-39".to_string(), "0".to_string())
        } else if o.tuned {
            (fig5_cpu(n).to_string(), fig5_cpu(n).to_string())
        } else {
            ("0-39".to_string(), ((n * 7 + q * 3) % AFA_CPUS).to_string())
        };
        w(
            root,
            &format!("proc/irq/{irq}/smp_affinity_list"),
            &format!("{smp}\n"),
        )?;
        w(
            root,
            &format!("proc/irq/{irq}/effective_affinity_list"),
            &format!("{eff}\n"),
        )?;
    }
    Ok(())
}

/// NVMe device `n`'s block device: its queue settings, NUMA node, MSI-X vectors and blk-mq
/// hardware contexts.
fn afa_nvme_block(root: &Path, o: AfaOptions, n: usize) -> io::Result<()> {
    let name = format!("nvme{n}n1");
    let q = format!("sys/block/{name}/queue");
    w(
        root,
        &format!("{q}/scheduler"),
        if o.tuned {
            "[none] mq-deadline kyber bfq\n"
        } else {
            "none [mq-deadline] kyber bfq\n"
        },
    )?;
    w(
        root,
        &format!("{q}/nomerges"),
        if o.tuned { "2\n" } else { "0\n" },
    )?;
    w(
        root,
        &format!("{q}/iostats"),
        if o.tuned { "0\n" } else { "1\n" },
    )?;
    w(
        root,
        &format!("{q}/rq_affinity"),
        if o.tuned { "2\n" } else { "1\n" },
    )?;
    w(root, &format!("{q}/nr_requests"), "1023\n")?;
    w(root, &format!("{q}/io_poll"), "0\n")?;
    w(root, &format!("{q}/write_cache"), "write through\n")?;
    w(root, &format!("{q}/rotational"), "0\n")?;
    w(
        root,
        &format!("sys/block/{name}/device/numa_node"),
        &format!("{}\n", afa_node(n)),
    )?;
    for q in 0..=AFA_QUEUES {
        w(
            root,
            &format!("sys/block/{name}/device/device/msi_irqs/{}", afa_irq(n, q)),
            "msix\n",
        )?;
    }
    // blk-mq: hardware context h serves CPU h (queue nvmeXq(h+1)).
    for h in 0..AFA_QUEUES {
        w(
            root,
            &format!("sys/block/{name}/mq/{h}/cpu_list"),
            &format!("{h}\n"),
        )?;
    }
    Ok(())
}

/// The processes (irqbalance and smartd on the default host), nines's own limits and
/// capabilities, and the RT throttle.
fn afa_processes(root: &Path, o: AfaOptions) -> io::Result<()> {
    let mut procs: Vec<(u32, &str, &str)> = vec![
        (1, "systemd", "/sbin/init\0splash\0"),
        (812, "sshd", "/usr/sbin/sshd\0-D\0"),
    ];
    if !o.tuned {
        procs.push((640, "irqbalance", "/usr/sbin/irqbalance\0--foreground\0"));
        procs.push((655, "smartd", "/usr/sbin/smartd\0-n\0"));
        w(
            root,
            "etc/smartd.conf",
            "# smartd.conf\nDEVICESCAN -a -n standby -i 600 -m root\n",
        )?;
    }
    for (pid, comm, args) in procs {
        w(root, &format!("proc/{pid}/comm"), &format!("{comm}\n"))?;
        w(root, &format!("proc/{pid}/cmdline"), args)?;
    }
    let (rtprio, capeff) = if o.tuned {
        ("99", "000001ffffffffff")
    } else {
        ("0", "0000000000000000")
    };
    w(
        root,
        "proc/self/limits",
        &limits_text(rtprio, if o.tuned { "unlimited" } else { "8388608" }),
    )?;
    w(
        root,
        "proc/self/status",
        &format!(
            "Name:\tnines\nUmask:\t0022\nState:\tR (running)\nCapInh:\t0000000000000000\nCapPrm:\t{capeff}\nCapEff:\t{capeff}\nCapBnd:\t000001ffffffffff\n"
        ),
    )?;
    w(
        root,
        "proc/sys/kernel/sched_rt_runtime_us",
        if o.tuned { "-1\n" } else { "950000\n" },
    )?;
    Ok(())
}
