//! `nines serve --exports-from-files`: one export per target, each served as it is (a
//! passthrough volume), named by its file name, as nbdkit's file plugin serves a directory.
//! Clients list them (NBD_OPT_LIST, `nbdinfo --list`) and choose one by name (NBD_OPT_GO,
//! NBD_OPT_INFO, NBD_OPT_EXPORT_NAME); the first is the default export. Each export has its
//! own core and I/O pool (nines-io's `Server::start_many`); the connection limit, the handshake
//! timeout and TLS are the server's.

use std::path::Path;
use std::time::Duration;

use anyhow::{Context, bail};
use nines_array::{LayoutSpec, Volume, VolumeParams};
use nines_core::op::Op;
use nines_core::units::{DEFAULT_PERCENTILES, counted};
use nines_io::serve::{
    Members, PAYLOAD_MAX_BYTES, ServeConfig, ServeLogs, ServedVolume, Server, TAGS, TlsConfig,
};
use nines_io::target::Target;
use nines_nbd::Export;

use super::output;
use super::serve::{Args, accept_loop, listen, open_member, served_extra, served_workload};

/// The export name of a target: its file name (emulated members keep their spec).
fn export_name(p: &Path) -> String {
    p.file_name()
        .map_or_else(|| p.display().to_string(), |n| n.to_string_lossy().into())
}

/// The names of `targets`' exports, or the two targets whose names collide.
pub(super) fn export_names(targets: &[std::path::PathBuf]) -> anyhow::Result<Vec<String>> {
    let names: Vec<String> = targets.iter().map(|p| export_name(p)).collect();
    for (i, n) in names.iter().enumerate() {
        if n.is_empty() || n.len() > 4096 {
            bail!(
                "--exports-from-files: {} makes no usable export name (1 to 4096 bytes); rename the file",
                targets[i].display()
            );
        }
        if let Some(j) = names[..i].iter().position(|m| m == n) {
            bail!(
                "--exports-from-files: {} and {} would both be export {n:?}; rename one (exports are named by file name)",
                targets[j].display(),
                targets[i].display()
            );
        }
    }
    Ok(names)
}

pub fn run(args: Args, tls: Option<TlsConfig>) -> anyhow::Result<()> {
    let spec = args.volume.spec();
    if !matches!(spec, LayoutSpec::Independent) {
        bail!(
            "--exports-from-files serves each target as it is (one export per file); drop --layout {} or --exports-from-files",
            spec.name()
        );
    }
    for (flag, given) in [
        ("--hdr-log", args.hdr_log.is_some()),
        ("--lat-log", args.lat_log.is_some()),
        ("--create", args.create),
        ("--start-dirty-degraded", args.start_dirty_degraded),
    ] {
        if given {
            bail!("{flag} is not available with --exports-from-files; serve one volume to use it");
        }
    }
    let names = export_names(&args.targets)?;
    let named: Vec<(String, &Path)> = args
        .targets
        .iter()
        .enumerate()
        .map(|(i, p)| (format!("member {i}"), p.as_path()))
        .collect();
    output::check_distinct_inputs(&named)?;
    output::note_inputs("member", args.targets.iter().map(|p| p.as_path()));
    output::check_outputs(&[
        ("--json", args.json.as_deref()),
        ("--pidfile", args.pidfile.as_deref()),
    ])?;
    let emu = args.emu.context(1)?;
    let mut volumes = Vec::with_capacity(args.targets.len());
    let mut sizes = Vec::with_capacity(args.targets.len());
    for (p, name) in args.targets.iter().zip(&names) {
        let t: Target = open_member(&args, &spec, &emu, p)?;
        let block_bytes = t.logical_block_bytes().max(512);
        let vol = nines_array::build(
            &spec,
            &VolumeParams {
                member_sizes_bytes: &[t.size_bytes()],
                block_bytes,
                tags: TAGS,
                len_bytes_max: PAYLOAD_MAX_BYTES,
            },
        )
        .with_context(|| format!("cannot build export {name:?}"))?;
        let block = vol.block_bytes().max(block_bytes);
        let file = t.file().is_some() && !t.is_block_device();
        let export = Export {
            name: name.clone(),
            description: format!("nines passthrough of {}", p.display()),
            size_bytes: vol.size_bytes() / u64::from(block) * u64::from(block),
            block_min_bytes: block,
            block_preferred_bytes: vol.block_bytes().max(4096),
            payload_max_bytes: PAYLOAD_MAX_BYTES,
            read_only: args.read_only,
            fast_zero: file,
        };
        sizes.push(export.size_bytes);
        let files = vec![
            t.file()
                .map(std::fs::File::try_clone)
                .transpose()
                .context("cannot duplicate a member's descriptor")?,
        ];
        volumes.push(ServedVolume {
            vol,
            members: Members {
                files,
                emu: vec![t.emu().cloned()],
                block_device: vec![t.is_block_device()],
                names: vec![p.display().to_string()],
                on_failed: None,
            },
            export,
            logs: ServeLogs::default(),
        });
    }
    nines_io::sched::install_interrupt_handler()
        .context("cannot install the SIGINT/SIGTERM handler")?;
    let (listener, activated) = listen(&args)?;
    let tls_note = tls.as_ref().map_or("", |t| {
        if t.mode == nines_nbd::TlsMode::Require {
            " (TLS required)"
        } else {
            " (TLS offered)"
        }
    });
    let mut server = Server::start_many(
        volumes,
        ServeConfig {
            max_connections: args.max_connections,
            handshake_timeout: Duration::from_nanos(args.handshake_timeout),
            // Every export is one target served as is: block status reports a file's holes.
            identity_file_map: true,
            tls,
            // Large request buffers of all exports together take at most half of what the host
            // has available now, as one export's do.
            buffer_budget_bytes: super::hostmem::serve_buffer_budget_bytes(),
        },
    )
    .context("cannot start the server")?;
    if let Some(p) = &args.pidfile {
        output::write_all(
            "--pidfile",
            p,
            format!("{}\n", std::process::id()).as_bytes(),
        )?;
    }
    eprintln!(
        "nines: serving {} as exports {}{tls_note}; SIGINT/SIGTERM stops",
        counted(names.len() as u64, "file", "files"),
        names
            .iter()
            .map(|n| format!("{n:?}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let served_since = std::time::Instant::now();
    let start_unix_ns = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    accept_loop(&listener, activated, &mut server)?;
    let connections_refused = server.refused_connections();
    let outcomes = server.stop_all();
    let measured_ns = (served_since.elapsed().as_nanos() as u64).max(1);
    if let Some(p) = &args.socket {
        let _ = std::fs::remove_file(p);
    }
    if let Some(p) = &args.pidfile {
        let _ = std::fs::remove_file(p);
    }
    if let Some(path) = &args.json {
        let percentiles = args
            .percentiles
            .as_ref()
            .map_or_else(|| DEFAULT_PERCENTILES.to_vec(), |p| p.0.clone());
        let report = exports_report(
            &args,
            &names,
            &sizes,
            &outcomes,
            connections_refused,
            &percentiles,
            measured_ns,
            start_unix_ns,
        )?;
        let mut text = serde_json::to_vec_pretty(&report)?;
        text.push(b'\n');
        output::write_all("--json", path, &text)?;
    }
    let sum = |f: fn(&nines_io::serve::ServeOutcome) -> u64| outcomes.iter().map(f).sum::<u64>();
    eprintln!(
        "nines: served {}, {}, {} over {} to {}",
        counted(sum(|o| o.recorder.dir(Op::Read).ios), "read", "reads"),
        counted(sum(|o| o.recorder.dir(Op::Write).ios), "write", "writes"),
        counted(sum(|o| o.flushes), "flush", "flushes"),
        counted(sum(|o| o.connections), "connection", "connections"),
        counted(names.len() as u64, "export", "exports"),
    );
    Ok(())
}

/// The --json report of several exports: a nines report with one device per export, and the
/// server's counters per export under `nines_serve.exports`.
#[allow(clippy::too_many_arguments)]
fn exports_report(
    args: &Args,
    names: &[String],
    sizes: &[u64],
    outcomes: &[nines_io::serve::ServeOutcome],
    connections_refused: u64,
    percentiles: &[f64],
    measured_ns: u64,
    start_unix_ns: u64,
) -> anyhow::Result<serde_json::Value> {
    use nines_core::report::{DeviceMeta, ReportBuilder, RunConfig, RunKind};
    let mut all = nines_core::stats::DeviceRecorder::new();
    for o in outcomes {
        all.merge_from(&o.recorder);
    }
    let mut extra = served_extra();
    extra.insert("exports".into(), serde_json::json!(names));
    let config = RunConfig {
        workload: served_workload(&all, measured_ns),
        engine: "serve".into(),
        percentiles: percentiles.to_vec(),
        measured_ns,
        start_unix_ns: Some(start_unix_ns),
        lat_log: None,
        hdr_log: None,
        extra,
    };
    let mut b = ReportBuilder::new(RunKind::Profile, config);
    let mut blocks = Vec::with_capacity(outcomes.len());
    for (i, o) in outcomes.iter().enumerate() {
        b.device(
            DeviceMeta {
                name: names[i].clone(),
                path: Some(args.targets[i].display().to_string()),
                size_bytes: sizes[i],
                cpu: None,
            },
            &o.recorder,
        );
        let dir = |op| {
            let d = o.recorder.dir(op);
            serde_json::json!({
                "ios": d.ios,
                "bytes": d.bytes,
                "latency_ns": d.summary(percentiles),
            })
        };
        blocks.push(serde_json::json!({
            "export": names[i],
            "target": args.targets[i],
            "size_bytes": sizes[i],
            "connections": o.connections,
            "read": dir(Op::Read),
            "write": dir(Op::Write),
            "flushes": o.flushes,
            "trims": o.trims,
            "write_zeroes": o.write_zeroes,
            "refused": o.refused,
            "member_cmds": o.member_cmds,
            "member_errors": o.member_errors,
        }));
    }
    let mut v = serde_json::to_value(b.finish())?;
    if let Some(m) = v.as_object_mut() {
        m.insert(
            "nines_serve".into(),
            serde_json::json!({
                "exports": blocks,
                "connections_refused": connections_refused,
            }),
        );
    }
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    #[test]
    fn exports_are_named_by_file_name_and_collisions_refused() {
        let t = |v: &[&str]| v.iter().map(PathBuf::from).collect::<Vec<_>>();
        assert_eq!(
            export_names(&t(&["/d/a.img", "b.img", "emu:p4600:1g"])).unwrap(),
            ["a.img", "b.img", "emu:p4600:1g"]
        );
        let e = export_names(&t(&["/x/a.img", "/y/a.img"]))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("/x/a.img and /y/a.img would both be export \"a.img\""),
            "{e}"
        );
    }
}
