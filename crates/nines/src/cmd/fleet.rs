//! `nines fleet`: one nines command run as N tasks on a scheduler, then merged exactly.
//!
//! The task contract: task `i` of `N` runs `nines VERB ARGS...` with `{task}` replaced by `i`,
//! `{tasks}` by `N` and `{NAME}` by the value of `--param NAME=V0,V1,...` for task `i` (the
//! tasks are the cartesian product of the parameters, the last one varying fastest; `--tasks N`
//! without parameters repeats the command N times), plus `--quiet --json OUT/task-i.json`. Its
//! output goes to `OUT/task-i.log`. When every task succeeded, `nines merge` of the task reports
//! gives `OUT/merged.json`. `OUT/fleet.json` records the fleet (command, tasks, engine, job ids),
//! so `nines fleet status OUT` can report on it later.
//!
//! Engines: `local` runs the tasks as child processes here (`--parallel K` at a time); `slurm`
//! submits a job array (`sbatch --array=0-(N-1)`, each element runs `nines fleet task OUT
//! $SLURM_ARRAY_TASK_ID`) and a merge job with `--dependency=afterok` on the array, then waits
//! for the merge (or, with `--detach`, returns at once). Slurm does the scheduling; nines only
//! defines the tasks and merges.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use clap::{Parser, Subcommand, ValueEnum};
use serde::{Deserialize, Serialize};

#[derive(Parser, Debug)]
#[command(args_conflicts_with_subcommands = true)]
pub struct Args {
    #[command(subcommand)]
    pub sub: Option<Sub>,
    #[command(flatten)]
    pub run: RunArgs,
}

#[derive(Subcommand, Debug)]
pub enum Sub {
    /// Where a fleet stands: tasks done, failed, pending; the merged report when there is one.
    Status {
        /// The fleet's output directory.
        dir: PathBuf,
    },
    /// Run one task of a fleet (what each Slurm array element runs).
    #[command(hide = true)]
    Task { dir: PathBuf, index: usize },
    /// Merge a fleet's task reports (what the Slurm merge job runs).
    #[command(hide = true)]
    Collect { dir: PathBuf },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Engine {
    /// Child processes on this machine.
    Local,
    /// A Slurm job array plus a merge job (sbatch, squeue).
    Slurm,
}

#[derive(Parser, Debug)]
pub struct RunArgs {
    /// Where the tasks run
    #[arg(long, value_enum, default_value = "local")]
    pub engine: Engine,
    /// Run the command this many times (task i gets {task} = i); with --param, the number of
    /// parameter combinations is the task count
    #[arg(long)]
    pub tasks: Option<usize>,
    /// A parameter of the study, NAME=V0,V1,...: {NAME} in the command takes each value
    /// (repeat for a cartesian product)
    #[arg(long = "param", value_name = "NAME=V0,V1,...")]
    pub params: Vec<String>,
    /// Output directory (task reports, logs, fleet.json, merged.json); must not hold a fleet
    #[arg(short, long, default_value = "fleet", value_name = "DIR")]
    pub out: PathBuf,
    /// local: tasks run at the same time
    #[arg(long, default_value_t = 1)]
    pub parallel: usize,
    /// slurm: submit and return without waiting; `nines fleet status DIR` tells how it goes
    #[arg(long)]
    pub detach: bool,
    /// slurm: an extra sbatch option for the task array (repeatable), e.g. --sbatch=--partition=debug
    #[arg(long = "sbatch", value_name = "OPTION", allow_hyphen_values = true)]
    pub sbatch: Vec<String>,
    /// slurm: give up waiting after this long (the jobs keep running; see `nines fleet status`)
    #[arg(long, default_value = "24h")]
    pub wait: String,
    /// The nines command each task runs: a verb that writes --json (profile, sim, sweep point)
    /// and its arguments, after `--`
    #[arg(last = true, required = true, value_name = "VERB ARGS")]
    pub command: Vec<String>,
}

/// What `OUT/fleet.json` records.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Fleet {
    pub engine: Engine,
    /// The command template, as given.
    pub command: Vec<String>,
    /// Each task's parameter values (empty maps without --param).
    pub tasks: Vec<BTreeMap<String, String>>,
    /// slurm: the array job and the merge job.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub array_job: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub merge_job: Option<String>,
}

const VERBS: [&str; 3] = ["profile", "sim", "sweep"];

pub fn run(args: Args) -> Result<()> {
    match args.sub {
        Some(Sub::Status { dir }) => status(&dir),
        Some(Sub::Task { dir, index }) => task(&dir, index),
        Some(Sub::Collect { dir }) => collect(&dir).map(|_| ()),
        None => start(args.run),
    }
}

/// The tasks: the cartesian product of the parameters (last fastest), or `tasks` repeats.
pub fn expand(params: &[String], tasks: Option<usize>) -> Result<Vec<BTreeMap<String, String>>> {
    let mut combos: Vec<BTreeMap<String, String>> = vec![BTreeMap::new()];
    for p in params {
        let (name, values) = p
            .split_once('=')
            .with_context(|| format!("--param {p}: write NAME=V0,V1,..."))?;
        if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            bail!("--param {p}: the name must be letters, digits or _");
        }
        if ["task", "tasks"].contains(&name) {
            bail!("--param {p}: {{{name}}} is set by the fleet; choose another name");
        }
        if combos[0].contains_key(name) {
            bail!("--param {name} is given twice");
        }
        let values: Vec<&str> = values.split(',').filter(|v| !v.is_empty()).collect();
        if values.is_empty() {
            bail!("--param {p}: give at least one value");
        }
        combos = combos
            .into_iter()
            .flat_map(|c| {
                values.iter().map(move |v| {
                    let mut c = c.clone();
                    c.insert(name.to_string(), (*v).to_string());
                    c
                })
            })
            .collect();
        if combos.len() > TASKS_MAX {
            bail!("more than {TASKS_MAX} tasks; split the study");
        }
    }
    match (tasks, params.is_empty()) {
        (Some(0), _) => bail!("--tasks 0: a fleet needs at least one task"),
        (Some(n), true) if n > TASKS_MAX => bail!("--tasks {n}: at most {TASKS_MAX}"),
        (Some(n), true) => Ok(vec![BTreeMap::new(); n]),
        (Some(n), false) if n != combos.len() => bail!(
            "--tasks {n} but the parameters make {} tasks; drop --tasks",
            combos.len()
        ),
        (None, true) => bail!("give --tasks N or --param NAME=V0,V1,..."),
        _ => Ok(combos),
    }
}

/// The most tasks one fleet may have (a Slurm array's usual MaxArraySize is 1001).
pub const TASKS_MAX: usize = 1000;

/// Task `i`'s command line (after `nines`): placeholders replaced, --quiet --json added.
pub fn task_command(fleet: &Fleet, dir: &Path, i: usize) -> Result<Vec<String>> {
    let vals = &fleet.tasks[i];
    let mut out = Vec::with_capacity(fleet.command.len() + 3);
    for a in &fleet.command {
        let mut s = a
            .replace("{task}", &i.to_string())
            .replace("{tasks}", &fleet.tasks.len().to_string());
        for (k, v) in vals {
            s = s.replace(&format!("{{{k}}}"), v);
        }
        if let Some(open) = s.find('{')
            && let Some(close) = s[open..].find('}')
        {
            let name = &s[open + 1..open + close];
            if !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                bail!("{a}: {{{name}}} is not a parameter (give --param {name}=...)");
            }
        }
        out.push(s);
    }
    // Every task is quiet; a command that says so itself (`sim -q`) is not told twice (clap
    // refuses a repeated flag, and every task failed).
    if !out.iter().any(|a| a == "--quiet" || a == "-q") {
        out.push("--quiet".into());
    }
    out.push("--json".into());
    out.push(task_json(dir, i).display().to_string());
    Ok(out)
}

fn task_json(dir: &Path, i: usize) -> PathBuf {
    dir.join(format!("task-{i}.json"))
}

/// Whether task `i` left a report (a failing verb may leave an empty file behind).
fn task_done(dir: &Path, i: usize) -> bool {
    std::fs::metadata(task_json(dir, i)).is_ok_and(|m| m.len() > 0)
}

fn task_log(dir: &Path, i: usize) -> PathBuf {
    dir.join(format!("task-{i}.log"))
}

fn read_fleet(dir: &Path) -> Result<Fleet> {
    let path = dir.join("fleet.json");
    let text = nines_core::input::read_to_string(&path, nines_core::input::REPORT_MAX_BYTES)
        .with_context(|| format!("{}: no fleet here (no fleet.json)", dir.display()))?;
    serde_json::from_str(&text).with_context(|| format!("{}: not a fleet record", path.display()))
}

fn write_fleet(dir: &Path, fleet: &Fleet) -> Result<()> {
    // Through the output layer, as every file nines writes: whole or not at all, never over
    // a block device or the run's own inputs (the folder is the user's --out).
    let text = serde_json::to_string_pretty(fleet)? + "\n";
    super::output::write_all("the fleet record", &dir.join("fleet.json"), text.as_bytes())
}

fn nines_exe() -> Result<PathBuf> {
    std::env::current_exe().context("cannot find the nines executable to run the tasks with")
}

fn start(args: RunArgs) -> Result<()> {
    let verb = args.command.first().map(String::as_str).unwrap_or("");
    if !VERBS.contains(&verb) {
        bail!(
            "the command after -- must be a nines verb that writes --json ({}), not {verb:?}",
            VERBS.join(", ")
        );
    }
    if args
        .command
        .iter()
        .any(|a| a == "--json" || a.starts_with("--json="))
    {
        bail!("leave --json out of the command: each task writes OUT/task-N.json");
    }
    if args.parallel == 0 {
        bail!("--parallel 0: run at least one task at a time");
    }
    let wait = nines_core::units::parse_duration_ns(&args.wait)
        .map_err(|e| anyhow::anyhow!("--wait {}: {e}", args.wait))?;
    let tasks = expand(&args.params, args.tasks)?;
    let dir = &args.out;
    if dir.join("fleet.json").exists() {
        let never =
            read_fleet(dir).is_ok_and(|f| f.engine == Engine::Slurm && f.array_job.is_none());
        bail!(
            "{} already holds a fleet{}; choose another --out",
            dir.display(),
            if never {
                " that was never submitted (sbatch failed or was interrupted): remove it, or"
            } else {
                ""
            }
        );
    }
    let mut fleet = Fleet {
        engine: args.engine,
        command: args.command.clone(),
        tasks,
        array_job: None,
        merge_job: None,
    };
    // Every task's command is checked before anything runs (or a folder is made).
    for i in 0..fleet.tasks.len() {
        task_command(&fleet, dir, i)?;
    }
    if matches!(args.engine, Engine::Local) {
        // Before the first write (run_local says what a signal does).
        nines_io::sched::install_interrupt_handler()
            .context("cannot install the SIGINT/SIGTERM handler")?;
    }
    let created = !dir.exists();
    std::fs::create_dir_all(dir)
        .with_context(|| format!("--out {}: cannot create", dir.display()))?;
    write_fleet(dir, &fleet)?;
    let n = fleet.tasks.len();
    assert!(n > 0, "expand makes at least one task");
    match args.engine {
        Engine::Local => {
            eprintln!(
                "fleet: {n} tasks on this machine, {} at a time, into {}",
                args.parallel,
                dir.display()
            );
            run_local(&fleet, dir, args.parallel)?;
            let merged = collect(dir)?;
            println!("fleet: {n} tasks done; merged report {}", merged.display());
            Ok(())
        }
        Engine::Slurm => {
            let merge = submit_slurm(&args, &mut fleet, dir, created)?;
            if args.detach {
                println!(
                    "fleet: follow it with `nines fleet status {}`",
                    dir.display()
                );
                return Ok(());
            }
            wait_slurm(dir, &merge, Duration::from_nanos(wait))?;
            println!(
                "fleet: {n} tasks done; merged report {}",
                dir.join("merged.json").display()
            );
            Ok(())
        }
    }
}

/// Submits the fleet to Slurm: a job array of its tasks (task.sh), and a merge job after it;
/// the jobs are recorded in fleet.json. The merge job's id.
fn submit_slurm(args: &RunArgs, fleet: &mut Fleet, dir: &Path, created: bool) -> Result<String> {
    let n = fleet.tasks.len();
    let exe = nines_exe()?;
    let script = dir.join("task.sh");
    let dir_abs = std::fs::canonicalize(dir)?;
    super::output::write_all(
        "the task script",
        &script,
        format!(
            "#!/bin/sh\n# One task of a nines fleet: Slurm sets SLURM_ARRAY_TASK_ID.\nexec '{}' fleet task '{}' \"$SLURM_ARRAY_TASK_ID\"\n",
            exe.display(),
            dir_abs.display()
        )
        .as_bytes(),
    )?;
    let mut sb = Command::new("sbatch");
    sb.arg("--parsable")
        .arg(format!("--array=0-{}", n - 1))
        .arg("--job-name=nines-fleet")
        .arg(format!("--output={}/task-%a.log", dir_abs.display()))
        .args(&args.sbatch)
        .arg(&script);
    let array = match sbatch(sb) {
        Ok(id) => id,
        Err(e) => return Err(unsubmitted(dir, created, e, None)),
    };
    let mut mb = Command::new("sbatch");
    mb.arg("--parsable")
        .arg(format!("--dependency=afterok:{array}"))
        .arg("--job-name=nines-fleet-merge")
        .arg(format!("--output={}/merge.log", dir_abs.display()))
        .args(args.sbatch.iter().filter(|a| !a.starts_with("--array")))
        .arg(format!(
            "--wrap=exec '{}' fleet collect '{}'",
            exe.display(),
            dir_abs.display()
        ));
    let merge = match sbatch(mb) {
        Ok(id) => id,
        Err(e) => return Err(unsubmitted(dir, created, e, Some(&array))),
    };
    fleet.array_job = Some(array.clone());
    fleet.merge_job = Some(merge.clone());
    write_fleet(dir, fleet)?;
    eprintln!("fleet: submitted job array {array} ({n} tasks) and merge job {merge}");
    Ok(merge)
}

/// A Slurm fleet that could not be submitted leaves nothing behind: the job array already
/// submitted (when the merge job failed) is cancelled, the files this run wrote are removed, and
/// the folder too when this run made it, so the same `--out` can be used again (issue 31 item
/// 10: a failed submission left a fleet that `status` showed as waiting and a rerun refused).
fn unsubmitted(dir: &Path, created: bool, e: anyhow::Error, array: Option<&str>) -> anyhow::Error {
    let cancelled = array.map(|job| {
        let ok = Command::new("scancel")
            .arg(job)
            .status()
            .is_ok_and(|s| s.success());
        if ok {
            format!("; job array {job} was cancelled")
        } else {
            format!("; cancel job array {job} with `scancel {job}`")
        }
    });
    for f in ["fleet.json", "fleet.json.tmp", "task.sh"] {
        let _ = std::fs::remove_file(dir.join(f));
    }
    // remove_dir removes only an empty folder: anything else in it stays.
    if created {
        let _ = std::fs::remove_dir(dir);
    }
    anyhow::anyhow!(
        "{e}{}; is this machine part of a Slurm cluster (`sinfo` should list its nodes)? To run \
         the tasks on this machine use --engine local; nothing was left in {}",
        cancelled.unwrap_or_default(),
        dir.display()
    )
}

/// sbatch's own words, short: its first `fatal:` line, else its last non-empty line (sbatch
/// without a configuration prints four lines about DNS before the one that says what failed).
fn sbatch_reason(stderr: &str) -> String {
    let lines: Vec<&str> = stderr
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    lines
        .iter()
        .find(|l| l.contains("fatal:"))
        .or(lines.last())
        .map_or_else(|| "no message".to_string(), |l| l.to_string())
}

fn sbatch(mut cmd: Command) -> Result<String> {
    let out = cmd
        .output()
        .context("sbatch: cannot run it; is Slurm installed and on PATH?")?;
    if !out.status.success() {
        bail!(
            "sbatch could not submit the job ({})",
            sbatch_reason(&String::from_utf8_lossy(&out.stderr))
        );
    }
    let id = String::from_utf8_lossy(&out.stdout)
        .trim()
        .split(';')
        .next()
        .unwrap_or("")
        .to_string();
    if id.is_empty() || !id.chars().all(|c| c.is_ascii_digit()) {
        bail!("sbatch answered {id:?}, not a job id");
    }
    Ok(id)
}

/// Jobs of `job` still known to Slurm (pending or running), by squeue.
fn slurm_states(job: &str) -> Result<Vec<(String, String)>> {
    let out = Command::new("squeue")
        .args(["-h", "-r", "-j", job, "-t", "PD,R,CG,CF,S", "-o", "%i %T"])
        .output()
        .context("squeue: cannot run it; is Slurm installed and on PATH?")?;
    // squeue fails for a job id it has forgotten: that is a finished job.
    if !out.status.success() {
        return Ok(Vec::new());
    }
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_once(' '))
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect())
}

fn wait_slurm(dir: &Path, merge_job: &str, limit: Duration) -> Result<()> {
    let start = Instant::now();
    let mut last = String::new();
    let fleet = read_fleet(dir)?;
    let array = fleet.array_job.clone().unwrap_or_default();
    // Bounded by --wait.
    loop {
        let states = slurm_states(merge_job)?;
        if states.is_empty() {
            break;
        }
        // The array is over but a task left no report: the merge's afterok dependency can
        // never be met, so Slurm would keep it pending forever. Cancel it and say why.
        if slurm_states(&array)?.is_empty() && (0..fleet.tasks.len()).any(|i| !task_done(dir, i)) {
            let _ = Command::new("scancel").arg(merge_job).status();
            bail!(
                "{}; the merge job {merge_job} was cancelled",
                failure_hint(dir)?
            );
        }
        let line = summary_line(dir)?;
        if line != last {
            eprintln!("fleet: {line}");
            last = line;
        }
        if start.elapsed() > limit {
            bail!(
                "gave up waiting after --wait; the jobs go on: `nines fleet status {}`",
                dir.display()
            );
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    if !dir.join("merged.json").exists() {
        bail!(
            "the merge job ended without a merged report: {}",
            failure_hint(dir)?
        );
    }
    Ok(())
}

/// A failed task's report (a verb may write one before it fails) is not merged: it is renamed
/// `task-i.json.failed`, so "has a report" means "succeeded" for the merge and for status.
fn set_aside(dir: &Path, i: usize) {
    let p = task_json(dir, i);
    if p.exists() {
        let _ = std::fs::rename(&p, p.with_extension("json.failed"));
    }
}

/// Task `i` failed: its log's last line.
fn task_hint(dir: &Path, i: usize) -> String {
    let log = std::fs::read_to_string(task_log(dir, i)).unwrap_or_default();
    let last = log
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("no output");
    format!("task {i} failed ({}: {last})", task_log(dir, i).display())
}

/// What went wrong: the first task without a report, else the merge's log.
fn failure_hint(dir: &Path) -> Result<String> {
    let fleet = read_fleet(dir)?;
    if let Some(i) = (0..fleet.tasks.len()).find(|&i| !task_done(dir, i)) {
        return Ok(task_hint(dir, i));
    }
    let log = std::fs::read_to_string(dir.join("merge.log")).unwrap_or_default();
    Ok(format!(
        "merge: {}",
        log.lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("no output")
    ))
}

fn run_local(fleet: &Fleet, dir: &Path, parallel: usize) -> Result<()> {
    let exe = nines_exe()?;
    let n = fleet.tasks.len();
    let mut next = 0usize;
    let mut running: Vec<(usize, std::process::Child)> = Vec::new();
    let mut failed: Vec<usize> = Vec::new();
    // SIGINT/SIGTERM: the running tasks are told to stop (SIGTERM) and waited for, their files
    // removed (unfinished), no new task starts, nothing is merged, exit 130.
    nines_io::sched::install_interrupt_handler()
        .context("cannot install the SIGINT/SIGTERM handler")?;
    let mut finished = 0usize;
    // Bounded: each turn starts a task or waits for one; n tasks in all.
    while next < n || !running.is_empty() {
        while running.len() < parallel && next < n && !nines_io::sched::interrupted() {
            let args = task_command(fleet, dir, next)?;
            let log_path = task_log(dir, next);
            super::output::check_path("a task's log", &log_path)?;
            let log = std::fs::File::create(&log_path)
                .with_context(|| format!("{}: cannot write", log_path.display()))?;
            let child = super::spawn_own_group(
                Command::new(&exe)
                    .args(&args)
                    .stdout(log.try_clone()?)
                    .stderr(log),
            )
            .with_context(|| format!("task {next}: cannot start {}", exe.display()))?;
            running.push((next, child));
            next += 1;
        }
        if running.is_empty() {
            break;
        }
        let (i, mut child) = running.remove(0);
        let (status, stopped) = super::wait_forwarding(&mut child)?;
        if stopped {
            for (j, mut other) in std::iter::once((i, child)).chain(running.drain(..)) {
                if j != i {
                    let _ = super::wait_forwarding(&mut other);
                }
                let _ = std::fs::remove_file(task_json(dir, j));
                let _ = std::fs::remove_file(task_log(dir, j));
                super::output::remove_stale_partials(dir, &format!("task-{j}.json"));
            }
            eprintln!(
                "nines fleet: interrupted: {finished} of {n} tasks finished (their reports are in {}); nothing merged",
                dir.display()
            );
            std::process::exit(super::EXIT_INTERRUPTED);
        }
        finished += 1;
        if !status.success() || !task_done(dir, i) {
            set_aside(dir, i);
            failed.push(i);
        }
        eprintln!(
            "fleet: task {i} {} ({} of {n} finished)",
            if status.success() { "done" } else { "FAILED" },
            next - running.len()
        );
    }
    if nines_io::sched::interrupted() {
        // Between tasks: every task started had finished; the rest never started.
        eprintln!(
            "nines fleet: interrupted: {finished} of {n} tasks finished (their reports are in {}); nothing merged",
            dir.display()
        );
        std::process::exit(super::EXIT_INTERRUPTED);
    }
    if let Some(&i) = failed.first() {
        bail!(
            "{} of {n} tasks failed, nothing merged; first: {}",
            failed.len(),
            task_hint(dir, i)
        );
    }
    Ok(())
}

fn task(dir: &Path, index: usize) -> Result<()> {
    let fleet = read_fleet(dir)?;
    if index >= fleet.tasks.len() {
        bail!("task {index}: the fleet has {} tasks", fleet.tasks.len());
    }
    let args = task_command(&fleet, dir, index)?;
    let status = Command::new(nines_exe()?).args(&args).status()?;
    if !status.success() {
        set_aside(dir, index);
        bail!("task {index} failed: nines {}", args.join(" "));
    }
    Ok(())
}

/// Merges the task reports into OUT/merged.json; returns its path.
fn collect(dir: &Path) -> Result<PathBuf> {
    let fleet = read_fleet(dir)?;
    let mut inputs = Vec::with_capacity(fleet.tasks.len());
    for i in 0..fleet.tasks.len() {
        let p = task_json(dir, i);
        if !task_done(dir, i) {
            bail!(
                "task {i} has no report ({}); {}",
                p.display(),
                failure_hint(dir)?
            );
        }
        inputs.push(super::merge::read_run(&p)?);
    }
    let merged = nines_core::merge::merge(inputs)?;
    let out = dir.join("merged.json");
    super::output::write_all("the merged report", &out, merged.to_json().as_bytes())?;
    Ok(out)
}

fn summary_line(dir: &Path) -> Result<String> {
    let fleet = read_fleet(dir)?;
    let n = fleet.tasks.len();
    let done = (0..n).filter(|&i| task_done(dir, i)).count();
    let mut line = format!("{done} of {n} tasks have reports");
    if let Some(array) = &fleet.array_job {
        let states = slurm_states(array)?;
        let running = states.iter().filter(|(_, s)| s == "RUNNING").count();
        let pending = states.iter().filter(|(_, s)| s == "PENDING").count();
        line += &format!(", {running} running, {pending} pending in Slurm (job {array})");
    }
    Ok(line)
}

fn status(dir: &Path) -> Result<()> {
    let fleet = read_fleet(dir)?;
    println!(
        "fleet in {}: {} engine, command: nines {}",
        dir.display(),
        match fleet.engine {
            Engine::Local => "local",
            Engine::Slurm => "slurm",
        },
        fleet.command.join(" ")
    );
    println!("{}", summary_line(dir)?);
    let merged = dir.join("merged.json");
    let missing = (0..fleet.tasks.len()).any(|i| !task_done(dir, i));
    if merged.exists() {
        println!("merged report: {}", merged.display());
    } else if fleet.engine == Engine::Slurm && fleet.array_job.is_none() {
        println!(
            "never submitted: sbatch failed or was interrupted; remove {} and start the fleet again",
            dir.display()
        );
    } else if let Some(m) = &fleet.merge_job {
        let array_over = fleet
            .array_job
            .as_deref()
            .map_or(Ok(true), |a| slurm_states(a).map(|s| s.is_empty()))?;
        if slurm_states(m)?.is_empty() {
            println!("not merged: {}", failure_hint(dir)?);
        } else if array_over && missing {
            // afterok can never be met: the merge job would stay pending for ever.
            println!(
                "not merged: {}; merge job {m} can never start: cancel it with `scancel {m}`",
                failure_hint(dir)?
            );
        } else {
            println!("merge job {m} waits for the tasks");
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parameters_make_a_cartesian_product_last_fastest() {
        let t = expand(&["a=1,2".into(), "b=x,y,z".into()], None).unwrap();
        assert_eq!(t.len(), 6);
        assert_eq!(t[1]["a"], "1");
        assert_eq!(t[1]["b"], "y");
        assert_eq!(t[3]["a"], "2");
        assert_eq!(expand(&[], Some(3)).unwrap().len(), 3);
        for (p, n, err) in [
            (vec!["a"], None, "NAME=V0"),
            (vec!["task=1"], None, "set by the fleet"),
            (vec!["a=1", "a=2"], None, "twice"),
            (vec!["a="], None, "at least one value"),
            (vec!["a-b=1"], None, "letters"),
            (vec![], None, "--tasks N"),
            (vec!["a=1,2"], Some(3), "drop --tasks"),
        ] {
            let p: Vec<String> = p.into_iter().map(String::from).collect();
            let e = expand(&p, n).unwrap_err().to_string();
            assert!(e.contains(err), "{p:?}: {e}");
        }
        assert!(expand(&[], Some(0)).is_err());
        assert!(
            expand(
                &[
                    "a=1,2,3,4,5,6,7,8,9,10".into(),
                    "b=1,2,3,4,5,6,7,8,9,10".into(),
                    "c=1,2,3,4,5,6,7,8,9,10,11".into()
                ],
                None
            )
            .is_err()
        );
    }

    #[test]
    fn task_commands_substitute_and_refuse_unknown_names() {
        let fleet = Fleet {
            engine: Engine::Local,
            command: vec![
                "sim".into(),
                "--devices".into(),
                "{n}".into(),
                "--seed".into(),
                "{task}".into(),
            ],
            tasks: expand(&["n=1,8".into()], None).unwrap(),
            array_job: None,
            merge_job: None,
        };
        let c = task_command(&fleet, Path::new("/o"), 1).unwrap();
        assert_eq!(
            c,
            [
                "sim",
                "--devices",
                "8",
                "--seed",
                "1",
                "--quiet",
                "--json",
                "/o/task-1.json"
            ]
        );
        let bad = Fleet {
            command: vec!["sim".into(), "--devices".into(), "{m}".into()],
            ..fleet
        };
        assert!(
            task_command(&bad, Path::new("/o"), 0)
                .unwrap_err()
                .to_string()
                .contains("{m} is not a parameter")
        );
    }
}
