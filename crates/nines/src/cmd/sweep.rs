//! `nines sweep`: run `nines profile` (or `nines sim`) once per value of one parameter, as
//! subprocesses of this executable, and gather every point into one JSON and an HTML page.
//!
//! Subprocesses rather than calls into the drivers: each point then runs exactly as the user
//! would run it by hand (same validation, same report), and a point that fails (an engine the
//! device does not support) cannot take the sweep down with it.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{Context, bail};
use nines_core::report::Report;
use nines_core::workload::RwMode;
use nines_report::sweep::{
    SWEEP_SCHEMA_NAME, SWEEP_SCHEMA_VERSION, Sweep, SweepParam, SweepPoint, figures, metrics,
    render_html, text_table,
};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Queue depths, e.g. 1,2,4,8,16,32: each workload of --rws at each depth.
    #[arg(long, value_name = "LIST", value_delimiter = ',')]
    pub qd: Option<Vec<u32>>,
    /// Shares of writes in percent, e.g. 0,20,40,60,80: randrw with --mix 100-w.
    #[arg(long, value_name = "LIST", value_delimiter = ',')]
    pub write_fraction: Option<Vec<u8>>,
    /// Engines, e.g. io_uring,io_uring-poll (with --sim: interrupt or polled completion).
    #[arg(long, value_name = "LIST", value_delimiter = ',')]
    pub engines: Option<Vec<String>>,
    /// Workloads of a --qd sweep.
    #[arg(
        long,
        value_name = "LIST",
        value_delimiter = ',',
        default_value = "read,randread,write,randwrite"
    )]
    pub rws: Vec<String>,
    /// Run `nines sim --device PRESET` for each point instead of `nines profile`.
    #[arg(long, value_name = "PRESET")]
    pub sim: Option<String>,
    /// Write DIR/sweep.json, DIR/sweep.html and each point's run JSON in DIR/points.
    #[arg(short, long, value_name = "DIR")]
    pub output: Option<PathBuf>,
    /// Write the sweep JSON here (each point's run JSON goes in FILE.points/).
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Write the sweep's HTML page here.
    #[arg(long, value_name = "FILE")]
    pub html: Option<PathBuf>,
    /// Also write every figure as a PNG into this directory.
    #[arg(long, value_name = "DIR")]
    pub png: Option<PathBuf>,
    /// Targets and options for every point, as `profile` (or `sim`) takes them, after the
    /// sweep's own options: `nines sweep --qd 1,4,16 -o out /dev/nvme0n1 --runtime 10s`
    /// (a `--` before them is accepted too).
    #[arg(
        value_name = "ARGS",
        trailing_var_arg = true,
        allow_hyphen_values = true,
        num_args = 0..
    )]
    pub pass: Vec<String>,
}

/// The sweep's own options that take a value: written among the per-point options (after a
/// target), they still belong to the sweep.
const SWEEP_OPTIONS: [&str; 10] = [
    "--qd",
    "--write-fraction",
    "--engines",
    "--rws",
    "--sim",
    "--output",
    "-o",
    "--json",
    "--html",
    "--png",
];

/// Moves the sweep's own options out of the per-point arguments (where a user who wrote them
/// after the target put them), so `nines sweep /dev/x --runtime 2s --qd 1,4` means what it says.
/// Everything after a literal `--` stays with the points.
fn claim_own_options(args: &mut Args) -> anyhow::Result<()> {
    let mut rest = Vec::with_capacity(args.pass.len());
    let mut it = std::mem::take(&mut args.pass).into_iter();
    let list = |v: &str| -> Vec<String> { v.split(',').map(str::to_string).collect() };
    while let Some(a) = it.next() {
        if a == "--" {
            rest.extend(it.by_ref());
            break;
        }
        let (flag, inline) = match a.split_once('=') {
            Some((f, v)) if f.starts_with("--") => (f.to_string(), Some(v.to_string())),
            _ => (a.clone(), None),
        };
        if !SWEEP_OPTIONS.contains(&flag.as_str()) {
            rest.push(a);
            continue;
        }
        let Some(v) = inline.or_else(|| it.next()) else {
            bail!("{flag} needs a value");
        };
        let parse_list = |what: &str| -> anyhow::Result<Vec<u32>> {
            v.split(',')
                .map(|x| {
                    x.trim()
                        .parse::<u32>()
                        .map_err(|_| anyhow::anyhow!("{what} {v}: give whole numbers, e.g. 1,4,16"))
                })
                .collect()
        };
        match flag.as_str() {
            "--qd" => args.qd = Some(parse_list("--qd")?),
            "--write-fraction" => {
                let w = parse_list("--write-fraction")?;
                if w.iter().any(|x| *x > 100) {
                    bail!("--write-fraction takes percentages from 0 to 100, e.g. 0,20,40,60,80");
                }
                args.write_fraction = Some(w.into_iter().map(|x| x as u8).collect());
            }
            "--engines" => args.engines = Some(list(&v)),
            "--rws" => args.rws = list(&v),
            "--sim" => args.sim = Some(v),
            "--output" | "-o" => args.output = Some(PathBuf::from(v)),
            "--json" => args.json = Some(PathBuf::from(v)),
            "--html" => args.html = Some(PathBuf::from(v)),
            "--png" => args.png = Some(PathBuf::from(v)),
            _ => unreachable!("every sweep option is handled"),
        }
    }
    args.pass = rest;
    Ok(())
}

/// `--sim PRESET` names a preset or a TOML file that exists: checked before any point runs.
fn check_sim_device(args: &Args) -> anyhow::Result<()> {
    let Some(device) = &args.sim else {
        return Ok(());
    };
    if let Some(size) = device.strip_prefix("null:") {
        nines_core::units::parse_size_bytes(size)
            .map_err(|e| anyhow::anyhow!("--sim {device}: {e}; give null:SIZE, e.g. null:1g"))?;
        return Ok(());
    }
    nines_flash::DeviceConfig::load(device).with_context(|| format!("--sim {device}"))?;
    Ok(())
}

/// One point to run: the options the sweep adds and how it is described.
struct Plan {
    extra: Vec<String>,
    point: SweepPoint,
    name: String,
    /// The point writes to its targets.
    writes: bool,
}

fn rw_writes(rw: &str) -> bool {
    rw.parse::<RwMode>()
        .map(|m| !matches!(m, RwMode::Read | RwMode::RandRead))
        .unwrap_or(false)
}

/// Writing points on a block device without `--allow-writes` would each be refused by
/// `profile`: refuse the whole sweep before running anything, saying how to fix it.
fn check_writes(args: &Args, plans: &[Plan]) -> anyhow::Result<()> {
    use std::os::unix::fs::FileTypeExt;
    if args.sim.is_some() || args.pass.iter().any(|a| a == "--allow-writes") {
        return Ok(());
    }
    let writing: Vec<&str> = plans
        .iter()
        .filter(|p| p.writes)
        .map(|p| p.name.as_str())
        .collect();
    if writing.is_empty() {
        return Ok(());
    }
    let block = args
        .pass
        .iter()
        .find(|a| std::fs::metadata(a.as_str()).is_ok_and(|m| m.file_type().is_block_device()));
    if let Some(dev) = block {
        let fix = if args.qd.is_some() {
            "add --allow-writes after -- (destroys the data on it), or sweep reads only with --rws read,randread"
        } else {
            "add --allow-writes after -- (destroys the data on it)"
        };
        bail!(
            "{} of the sweep's points write ({}) and {dev} is a block device: {fix}",
            writing.len(),
            writing.join(", ")
        );
    }
    Ok(())
}

/// A failure that only says this machine cannot run the point (polled I/O without poll
/// queues): reported, but not a failure of the sweep.
fn unavailable_here(param: SweepParam, reason: &str) -> bool {
    param == SweepParam::Engine
        && (reason.contains("poll queues")
            || reason.contains("not supported")
            || reason.contains("SQPOLL was refused"))
}

fn empty_point(rw: &str, iodepth: u32) -> SweepPoint {
    SweepPoint {
        rw: rw.to_string(),
        iodepth,
        write_pct: None,
        engine: None,
        error: None,
        metrics: None,
        report: None,
    }
}

/// The value of `--NAME V` or `--NAME=V` among the pass-through arguments.
fn passed_value(pass: &[String], name: &str) -> Option<String> {
    let eq = format!("{name}=");
    pass.iter().enumerate().find_map(|(i, a)| {
        if a == name {
            pass.get(i + 1).cloned()
        } else {
            a.strip_prefix(&eq).map(str::to_string)
        }
    })
}

fn plan(args: &Args) -> anyhow::Result<(SweepParam, Vec<Plan>)> {
    let chosen = [
        args.qd.is_some(),
        args.write_fraction.is_some(),
        args.engines.is_some(),
    ]
    .iter()
    .filter(|b| **b)
    .count();
    if chosen != 1 {
        bail!("give exactly one of --qd LIST, --write-fraction LIST or --engines LIST");
    }
    let mut owned: Vec<&str> = vec!["--json", "--quiet", "-q"];
    let base_rw = passed_value(&args.pass, "--rw").unwrap_or_else(|| "randread".into());
    let base_qd: u32 = match passed_value(&args.pass, "--iodepth") {
        Some(v) => v
            .parse()
            .map_err(|_| anyhow::anyhow!("--iodepth {v} after -- is not a whole number"))?,
        None => 1,
    };
    let (param, plans) = if let Some(qds) = &args.qd {
        owned.extend(["--rw", "--iodepth"]);
        (SweepParam::Qd, qd_plans(args, qds)?)
    } else if let Some(ws) = &args.write_fraction {
        owned.extend(["--rw", "--mix"]);
        (
            SweepParam::WriteFraction,
            write_fraction_plans(ws, base_qd)?,
        )
    } else {
        owned.push(if args.sim.is_some() {
            "--completion"
        } else {
            "--engine"
        });
        (SweepParam::Engine, engine_plans(args, &base_rw, base_qd)?)
    };
    assert!(!plans.is_empty(), "every list was checked to be non-empty");
    if args.sim.is_some() {
        owned.push("--device");
    }
    for a in &args.pass {
        let flag = a.split('=').next().unwrap_or(a);
        if owned.contains(&flag) {
            bail!("{flag} is set by the sweep for each point; remove it from the options after --");
        }
    }
    Ok((param, plans))
}

/// `--qd`: each of `--rws` at each queue depth.
fn qd_plans(args: &Args, qds: &[u32]) -> anyhow::Result<Vec<Plan>> {
    // The points' own limit (--iodepth), checked before any folder or point exists.
    let max = nines_core::workload::IODEPTH_MAX;
    if qds.is_empty() || qds.iter().any(|q| *q == 0 || *q > max) {
        bail!("--qd takes queue depths from 1 to {max}, e.g. --qd 1,2,4,8");
    }
    let mut plans = Vec::new();
    for rw in &args.rws {
        rw.parse::<RwMode>()
            .map_err(|e| anyhow::anyhow!("--rws {rw}: {e}"))?;
        for &q in qds {
            plans.push(Plan {
                extra: vec!["--rw".into(), rw.clone(), "--iodepth".into(), q.to_string()],
                point: empty_point(rw, q),
                name: format!("{rw}-qd{q}"),
                writes: rw_writes(rw),
            });
        }
    }
    Ok(plans)
}

/// `--write-fraction`: randrw at each share of writes.
fn write_fraction_plans(ws: &[u8], base_qd: u32) -> anyhow::Result<Vec<Plan>> {
    if ws.is_empty() || ws.iter().any(|w| *w > 100) {
        bail!("--write-fraction takes percentages from 0 to 100, e.g. 0,20,40,60,80");
    }
    Ok(ws
        .iter()
        .map(|&w| {
            let mut point = empty_point("randrw", base_qd);
            point.write_pct = Some(w);
            Plan {
                extra: vec![
                    "--rw".into(),
                    "randrw".into(),
                    "--mix".into(),
                    (100 - w).to_string(),
                ],
                point,
                name: format!("writes{w}"),
                writes: w > 0,
            }
        })
        .collect())
}

/// `--engines`: each engine (simulated: each completion mode).
fn engine_plans(args: &Args, base_rw: &str, base_qd: u32) -> anyhow::Result<Vec<Plan>> {
    let engines = args.engines.as_deref().unwrap_or_default();
    if engines.is_empty() {
        bail!("--engines takes a list, e.g. --engines io_uring,io_uring-poll");
    }
    Ok(engines
        .iter()
        .map(|e| {
            let extra = match &args.sim {
                None => vec!["--engine".into(), e.clone()],
                Some(_) => {
                    let mode = match e.as_str() {
                        "io_uring-poll" | "polled" | "poll" => "polled",
                        "none" => "none",
                        _ => "interrupt",
                    };
                    vec!["--completion".into(), mode.into()]
                }
            };
            let mut point = empty_point(base_rw, base_qd);
            point.engine = Some(e.clone());
            Plan {
                extra,
                point,
                name: format!("engine-{e}"),
                writes: rw_writes(base_rw),
            }
        })
        .collect())
}

/// Runs one point; Ok(report) or Err(one-line reason).
/// One point, run as a child nines. The bool: the sweep was interrupted while it ran (its
/// report, if any, is of an unfinished point).
fn run_point(exe: &Path, args: &Args, plan: &Plan, json: &Path) -> (Result<Report, String>, bool) {
    let mut interrupted = false;
    let r = run_point_inner(exe, args, plan, json, &mut interrupted);
    (r, interrupted)
}

fn run_point_inner(
    exe: &Path,
    args: &Args,
    plan: &Plan,
    json: &Path,
    interrupted: &mut bool,
) -> Result<Report, String> {
    let mut cmd = Command::new(exe);
    match &args.sim {
        None => {
            cmd.arg("profile");
        }
        Some(preset) => {
            cmd.args(["sim", "--device", preset]);
        }
    }
    cmd.args(&args.pass)
        .args(&plan.extra)
        .arg("--json")
        .arg(json)
        .arg("--quiet")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let mut child = super::spawn_own_group(&mut cmd)
        .map_err(|e| format!("could not start {}: {e}", exe.display()))?;
    // Its stderr read on the side (bounded by what the child writes), so it never blocks.
    let mut pipe = child.stderr.take();
    let reader = std::thread::spawn(move || {
        let mut bytes = Vec::new();
        if let Some(p) = pipe.as_mut() {
            let _ = std::io::Read::read_to_end(p, &mut bytes);
        }
        bytes
    });
    let (status, stopped) =
        super::wait_forwarding(&mut child).map_err(|e| format!("waiting for the point: {e}"))?;
    *interrupted = stopped;
    let stderr_bytes = reader.join().unwrap_or_default();
    if stopped {
        return Err("interrupted".into());
    }
    if !status.success() {
        let stderr = String::from_utf8_lossy(&stderr_bytes);
        let last = stderr
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("failed with no message")
            .trim();
        return Err(last.strip_prefix("nines: ").unwrap_or(last).to_string());
    }
    let text = nines_core::input::read_to_string(json, nines_core::input::REPORT_MAX_BYTES)
        .map_err(|e| format!("the point wrote no JSON at {}: {e}", json.display()))?;
    Report::from_json(&text).map_err(|e| format!("reading {}: {e}", json.display()))
}

pub fn run(mut args: Args) -> anyhow::Result<()> {
    claim_own_options(&mut args)?;
    check_sim_device(&args)?;
    let (param, plans) = plan(&args)?;
    check_writes(&args, &plans)?;
    let (json_out, html_out, points_dir) = output_paths(&args)?;
    // The folders this sweep creates (deepest first): removed again if it measures nothing.
    let created: Vec<PathBuf> = points_dir
        .ancestors()
        .take_while(|a| !a.as_os_str().is_empty() && !a.exists())
        .map(Path::to_path_buf)
        .collect();
    // SIGINT/SIGTERM, from before the first write: the running point is told to stop
    // (SIGTERM), the points done are written, the unfinished point's files removed, and the
    // sweep exits 130.
    nines_io::sched::install_interrupt_handler()
        .context("cannot install the SIGINT/SIGTERM handler")?;
    std::fs::create_dir_all(&points_dir)
        .with_context(|| format!("creating {}", points_dir.display()))?;
    let total = plans.len();
    let ran = run_points(&args, param, plans, &points_dir)?;
    let sweep = &ran.sweep;
    assert!(sweep.points.len() <= total, "at most one point per plan");
    // A sweep that measured nothing writes nothing (its points' errors say why).
    if sweep.points.iter().all(|p| p.metrics.is_none()) {
        // Nothing to keep: the points' files and the folders made for them go (only empty
        // folders are removed, so nothing else in them is touched).
        for f in &ran.point_files {
            let _ = std::fs::remove_file(f);
        }
        for d in &created {
            let _ = std::fs::remove_dir(d);
        }
        if ran.interrupted {
            eprintln!("nines sweep: interrupted before a point finished; nothing written");
            std::process::exit(super::EXIT_INTERRUPTED);
        }
        bail!(
            "every point of the sweep failed; the first said: {}",
            sweep
                .points
                .first()
                .and_then(|p| p.error.clone())
                .unwrap_or_default()
        );
    }
    write_outputs(&args, sweep, &json_out, html_out.as_deref())?;
    if ran.interrupted {
        eprintln!(
            "nines sweep: interrupted after {} of {total} points; the sweep of those is written",
            sweep.points.len()
        );
        std::process::exit(super::EXIT_INTERRUPTED);
    }
    // What succeeded is written; the exit status still says that points failed.
    if !ran.failed.is_empty() {
        bail!(
            "{} of {total} points failed: {}",
            ran.failed.len(),
            ran.failed.join("; ")
        );
    }
    Ok(())
}

/// Where the sweep is written: its JSON, its HTML (if any) and the points' folder.
fn output_paths(args: &Args) -> anyhow::Result<(PathBuf, Option<PathBuf>, PathBuf)> {
    let (json_out, html_out, points_dir) = match (&args.output, &args.json) {
        (Some(dir), None) => (
            dir.join("sweep.json"),
            Some(args.html.clone().unwrap_or_else(|| dir.join("sweep.html"))),
            dir.join("points"),
        ),
        (None, Some(j)) => {
            // FILE.points/ goes beside a regular file only (never `-.points` or in /dev).
            if !super::output::is_regular_destination("--json", j)? {
                bail!(
                    "--json {}: is not a regular file, and the points' runs go in a folder \
                     beside it (FILE.points/); give --json a file name, or -o DIR",
                    j.display()
                );
            }
            let mut p = j.clone().into_os_string();
            p.push(".points");
            (j.clone(), args.html.clone(), PathBuf::from(p))
        }
        (Some(_), Some(_)) => bail!("give either -o DIR or --json FILE, not both"),
        (None, None) => bail!("say where to write the sweep: -o DIR, or --json FILE [--html FILE]"),
    };
    if args.output.is_none() {
        super::output::check_path("--json", &json_out)?;
    }
    if let Some(h) = &html_out
        && args.html.is_some()
    {
        super::output::check_path("--html", h)?;
    }
    Ok((json_out, html_out, points_dir))
}

/// The points run: the sweep of those done, the points that failed, the points' files, and
/// whether SIGINT/SIGTERM stopped it.
struct Ran {
    sweep: Sweep,
    failed: Vec<String>,
    point_files: Vec<PathBuf>,
    interrupted: bool,
}

/// Runs each point in order, as a child nines, until the last or SIGINT/SIGTERM.
fn run_points(
    args: &Args,
    param: SweepParam,
    plans: Vec<Plan>,
    points_dir: &Path,
) -> anyhow::Result<Ran> {
    let exe = std::env::current_exe().context("finding the nines executable to run each point")?;
    let driver = match &args.sim {
        None => "profile".to_string(),
        Some(p) => format!("sim --device {p}"),
    };
    let total = plans.len();
    let mut ran = Ran {
        sweep: Sweep {
            schema: SWEEP_SCHEMA_NAME.into(),
            schema_version: SWEEP_SCHEMA_VERSION,
            parameter: param,
            driver,
            args: args.pass.clone(),
            points: Vec::with_capacity(total),
            notes: Vec::new(),
        },
        failed: Vec::new(),
        point_files: Vec::new(),
        interrupted: false,
    };
    for (i, plan) in plans.into_iter().enumerate() {
        if nines_io::sched::interrupted() {
            ran.interrupted = true;
            break;
        }
        let json = points_dir.join(format!("{:02}-{}.json", i + 1, plan.name));
        let mut point = plan.point.clone();
        ran.point_files.push(json.clone());
        let (result, stopped) = run_point(&exe, args, &plan, &json);
        if stopped {
            // Unfinished: what the point wrote goes, with a temporary file it may have left.
            let _ = std::fs::remove_file(&json);
            if let Some(name) = json.file_name() {
                super::output::remove_stale_partials(points_dir, &name.to_string_lossy());
            }
            ran.point_files.pop();
            ran.interrupted = true;
            break;
        }
        let at = format!("[{}/{total}]", i + 1);
        match result {
            Ok(report) => {
                let m = metrics(&report);
                eprintln!("nines sweep: {at} {}: {}", plan.name, point_summary(&m));
                point.metrics = Some(m);
                point.report = Some(report);
            }
            Err(reason) => {
                let what = match &point.engine {
                    Some(e) if unavailable_here(param, &reason) => {
                        format!(
                            "{e} is not available here ({reason}); the sweep ran the other engines"
                        )
                    }
                    _ => {
                        ran.failed.push(format!("{} ({reason})", plan.name));
                        format!("point {} failed: {reason}", plan.name)
                    }
                };
                eprintln!("nines sweep: {at} {what}");
                ran.sweep.notes.push(what);
                point.error = Some(reason);
            }
        }
        ran.sweep.points.push(point);
    }
    Ok(ran)
}

/// A point's line: IOPS, mean and tail per direction.
fn point_summary(m: &nines_report::sweep::PointMetrics) -> String {
    [m.read.as_ref(), m.write.as_ref()]
        .into_iter()
        .flatten()
        .map(|d| {
            format!(
                "{} IOPS, mean {}, p{} {}",
                nines_report::axis::format_plain(d.iops),
                nines_report::axis::format_ns(d.mean_ns),
                d.tail_percentile,
                nines_report::axis::format_ns(d.tail_ns as f64)
            )
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// The sweep's JSON, table, HTML and PNGs.
fn write_outputs(
    args: &Args,
    sweep: &Sweep,
    json_out: &Path,
    html_out: Option<&Path>,
) -> anyhow::Result<()> {
    super::output::write_all("--json", json_out, sweep.to_json().as_bytes())?;
    print!("{}", text_table(sweep));
    let figs = figures(sweep);
    if let Some(h) = html_out {
        let html = render_html(sweep, &figs)?;
        super::output::write_all("--html", h, html.as_bytes())?;
        eprintln!(
            "nines: wrote {} and {} ({})",
            json_out.display(),
            h.display(),
            nines_report::run::count(figs.len(), "figure", "figures")
        );
    } else {
        eprintln!("nines: wrote {}", json_out.display());
    }
    if let Some(dir) = &args.png {
        super::report::write_pngs(dir, &figs)?;
    }
    Ok(())
}
