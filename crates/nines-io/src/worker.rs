//! One worker thread: pins itself, optionally goes SCHED_FIFO, builds its engine, and runs the I/O
//! loop over its devices until the run ends.
//!
//! The loop, per turn: read the clock; swap interval histograms if an interval ended; for every
//! device, issue while a slot is free and ready (thinktime), the pacer says an I/O is due
//! (`--rate-iops`) and the device is not done; commit; reap (blocking only when nothing is
//! timed); read the clock once for the reaped batch; verify and record every completion.
//! Everything it touches was allocated before the first I/O.

use std::collections::VecDeque;
use std::io;
use std::os::fd::RawFd;
use std::sync::atomic::Ordering;
use std::sync::mpsc::TryRecvError;

use nines_core::latlog::{LatRecord, RECORD_BYTES};
use nines_core::op::Op;
use nines_core::stats::DeviceRecorder;
use nines_core::workload::Generator;

use crate::buf::BufPool;
use crate::clock;
use crate::driver::{DriverError, IntervalMsg, WorkerPlan, WorkerResult};
use crate::engine::{self, Completion, IoDesc};
use crate::sched::{self, ThreadUsage};

/// One device as the worker receives it.
pub(crate) struct DevPlan {
    pub index: u32,
    pub name: String,
    pub fd: RawFd,
    pub size_bytes: u64,
    pub logical_block_bytes: u32,
}

struct Dev {
    index: u32,
    name: String,
    engine_slot: usize,
    generator: Generator,
    rec: DeviceRecorder,
    interval: Option<Box<DeviceRecorder>>,
    issued: u64,
    /// I/Os of this device in flight.
    inflight: u32,
    /// I/Os counted in the statistics (completed after the ramp).
    counted: u64,
    /// Counted I/Os to run (`--ios`, ramp excluded).
    ios_max: u64,
    /// Free I/O slots, in the order they became free (so thinktime readiness is FIFO).
    free: VecDeque<u32>,
}

#[derive(Clone, Copy)]
struct Slot {
    dev: u32,
    op: Op,
    len_bytes: u32,
    offset_bytes: u64,
    /// When the I/O counts from: submission time, or its due time when rate-paced.
    start_ns: u64,
    /// Earliest time this slot may issue again (completion + thinktime).
    ready_ns: u64,
}

pub(crate) fn run(plan: WorkerPlan) -> Result<WorkerResult, DriverError> {
    let shared = plan.shared.clone();
    let mut at_gate = false;
    let r = run_inner(plan, &mut at_gate);
    if r.is_err() {
        shared.abort.store(true, Ordering::Relaxed);
    }
    if !at_gate {
        // Setup failed before the gate: still pass it (twice, like the others), or the driver
        // and the other workers would wait for this one forever.
        shared.gate.wait();
        shared.gate.wait();
    }
    r
}

fn run_inner(mut plan: WorkerPlan, at_gate: &mut bool) -> Result<WorkerResult, DriverError> {
    sched::pin_current_thread(plan.cpu)?;
    if let Some(p) = plan.rt_priority {
        sched::set_fifo_current_thread(p)?;
    }
    let usage_start = ThreadUsage::current_thread();
    let spec = plan.spec.clone();
    let iodepth = plan.iodepth;
    let ndev = plan.devices.len();
    let depth_max = iodepth * ndev as u32;
    let first_name = plan.devices[0].name.clone();
    let mut engine =
        engine::build(plan.engine, depth_max, plan.engine_options).map_err(|source| {
            DriverError::Engine {
                device: first_name.clone(),
                error: source,
            }
        })?;

    let bs = spec.block_size_bytes as usize;
    let mut bufs = BufPool::new(depth_max as usize, bs);
    // Fill with incompressible bytes so writes are real data (zram would shortcut zero pages).
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15 ^ spec.seed;
    for s in 0..depth_max as usize {
        for chunk in bufs.get_mut(s).as_mut_slice().chunks_mut(8) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let b = x.to_le_bytes();
            chunk.copy_from_slice(&b[..chunk.len()]);
        }
    }
    let buf_ptrs: Vec<*mut u8> = (0..depth_max as usize).map(|s| bufs.ptr(s)).collect();
    // io_uring: fixed buffers save pinning the pages on every I/O. Other engines, or a kernel that
    // refuses (RLIMIT_MEMLOCK), return Ok(false) and use plain buffers. The pool outlives the
    // engine (dropped after it below).
    let regions: Vec<(*mut u8, usize)> = buf_ptrs.iter().map(|&p| (p, bs)).collect();
    engine
        .register_buffers(&regions)
        .map_err(|source| DriverError::Engine {
            device: first_name.clone(),
            error: source,
        })?;

    // The slow part of the setup is done: tell the driver, which then chooses the common time
    // origin (so a worker that was slow to start, e.g. on a busy host, does not lose its ramp)
    // and opens the per-I/O log; take both.
    *at_gate = true;
    plan.shared.gate.wait();
    plan.shared.gate.wait();
    plan.start_ns = plan.shared.start_ns.load(Ordering::Relaxed);
    plan.lat_log = plan
        .shared
        .lanes
        .lock()
        .map_err(|_| DriverError::Panic("the driver panicked while starting".into()))?[plan.index]
        .take();

    let mut devs = Vec::with_capacity(ndev);
    let mut slots = Vec::with_capacity(depth_max as usize);
    for (local, d) in plan.devices.iter().enumerate() {
        let engine_slot = engine
            .add_target(d.fd)
            .map_err(|source| DriverError::Engine {
                device: d.name.clone(),
                error: source,
            })?;
        let generator = Generator::new(
            &spec,
            d.size_bytes,
            d.logical_block_bytes,
            d.index,
            plan.start_ns,
        )
        .map_err(|source| DriverError::Workload {
            device: d.name.clone(),
            error: source,
        })?;
        let mut free = VecDeque::with_capacity(iodepth as usize);
        for _ in 0..iodepth {
            free.push_back(slots.len() as u32);
            slots.push(Slot {
                dev: local as u32,
                op: Op::Read,
                len_bytes: 0,
                offset_bytes: 0,
                start_ns: 0,
                ready_ns: 0,
            });
        }
        let interval = match plan.intervals.as_ref() {
            Some((_, spare_rx)) => Some(
                spare_rx
                    .recv()
                    .map_err(|_| DriverError::Panic("the interval collector went away".into()))?,
            ),
            None => None,
        };
        devs.push(Dev {
            index: d.index,
            name: d.name.clone(),
            engine_slot,
            generator,
            rec: DeviceRecorder::new(),
            interval,
            issued: 0,
            inflight: 0,
            counted: 0,
            ios_max: spec.ios_max.unwrap_or(u64::MAX),
            free,
        });
    }
    let mut completions = vec![Completion::default(); depth_max as usize];

    let start_ns = plan.start_ns;
    let ramp_end_ns = start_ns + spec.ramp_ns;
    let end_ns = spec
        .runtime_ns
        .map_or(u64::MAX, |r| ramp_end_ns.saturating_add(r));
    let thinktime_ns = spec.thinktime_ns;
    let interval_ns = plan.interval_ns;
    // Intervals are aligned to the end of the ramp, so the first logged interval starts there.
    let mut interval_start_ns = ramp_end_ns;
    let mut next_interval_ns = ramp_end_ns + interval_ns;
    let mut interval_misses = 0u64;
    let mut inflight: u32 = 0;
    let mut completed: u64 = 0;
    let mut last_completion_ns = start_ns;
    let mut record = [0u8; RECORD_BYTES];
    let shared = plan.shared.clone();
    let published = &shared.published[plan.index];
    let abort = &shared.abort;

    // Wait for the common start so all workers begin together.
    clock::sleep_until_ns(start_ns);

    // Bounded: every turn either issues, reaps, or waits for a timed event; the run ends at
    // `end_ns` or after `ios_max` I/Os per device, and `abort` stops it early.
    loop {
        if abort.load(Ordering::Relaxed) {
            break;
        }
        let now = clock::now_ns();
        if now >= next_interval_ns && plan.intervals.is_some() {
            interval_misses += swap_intervals(&mut plan, &mut devs, interval_start_ns, now, false);
            interval_start_ns = now;
            next_interval_ns = now + interval_ns;
        }
        let mut queued = 0u32;
        let mut next_event_ns = u64::MAX;
        let issuing = now < end_ns;
        for dev in devs.iter_mut() {
            if !issuing {
                break;
            }
            while let Some(&s) = dev.free.front() {
                // After the ramp every I/O in flight will be counted, so this stops at exactly
                // `ios_max` counted I/Os; during the ramp I/Os are not limited.
                if now >= ramp_end_ns && dev.counted + u64::from(dev.inflight) >= dev.ios_max {
                    break;
                }
                let slot = &mut slots[s as usize];
                if slot.ready_ns > now {
                    next_event_ns = next_event_ns.min(slot.ready_ns);
                    break;
                }
                if let Some(due) = dev.generator.next_due_ns()
                    && due > now
                {
                    next_event_ns = next_event_ns.min(due);
                    break;
                }
                let req = dev.generator.next_request(now);
                dev.free.pop_front();
                slot.op = req.op;
                slot.len_bytes = req.len_bytes;
                slot.offset_bytes = req.offset_bytes;
                slot.start_ns = req.intended_ns.min(now);
                engine
                    .queue(IoDesc {
                        target: dev.engine_slot,
                        op: req.op,
                        offset_bytes: req.offset_bytes,
                        len_bytes: req.len_bytes,
                        buf: buf_ptrs[s as usize],
                        user_data: u64::from(s),
                    })
                    .map_err(|source| DriverError::Engine {
                        device: dev.name.clone(),
                        error: source,
                    })?;
                dev.issued += 1;
                dev.inflight += 1;
                queued += 1;
                inflight += 1;
            }
        }
        if queued > 0 {
            engine.commit().map_err(|source| DriverError::Engine {
                device: devs[0].name.clone(),
                error: source,
            })?;
        }
        if inflight == 0 {
            if next_event_ns == u64::MAX {
                // Nothing in flight and nothing will become ready: every device is done.
                break;
            }
            // Precise: sleep to just before the event, then spin on the clock, so thinktime and
            // rate-paced due times are kept to about a microsecond instead of the sleep's slack.
            clock::wait_until_ns(next_event_ns, abort);
            continue;
        }
        let min = if next_event_ns == u64::MAX { 1 } else { 0 };
        let n = engine
            .reap(min, &mut completions)
            .map_err(|source| DriverError::Engine {
                device: devs[0].name.clone(),
                error: source,
            })?;
        if n == 0 {
            continue;
        }
        let t = clock::now_ns();
        last_completion_ns = t;
        for c in &completions[..n] {
            let s = c.user_data as usize;
            assert!(s < slots.len(), "engine returned unknown user_data {s}");
            let slot = &mut slots[s];
            let dev = &mut devs[slot.dev as usize];
            if c.result != i64::from(slot.len_bytes) {
                return Err(io_failure(dev, slot, c.result));
            }
            let latency_ns = t.saturating_sub(slot.start_ns);
            dev.inflight -= 1;
            if t >= ramp_end_ns {
                dev.counted += 1;
                dev.rec.record(slot.op, latency_ns, slot.len_bytes);
                if let Some(iv) = dev.interval.as_mut() {
                    iv.record(slot.op, latency_ns, slot.len_bytes);
                }
            }
            if let Some(lane) = plan.lat_log.as_mut() {
                LatRecord {
                    completion_ns: t - start_ns,
                    latency_ns,
                    offset_bytes: slot.offset_bytes,
                    device: dev.index as u16,
                    op: slot.op,
                }
                .encode(&mut record);
                lane.push(&record);
            }
            slot.ready_ns = t + thinktime_ns;
            dev.free.push_back(s as u32);
        }
        inflight -= n as u32;
        completed += n as u64;
        published.completed.store(completed, Ordering::Relaxed);
    }
    if abort.load(Ordering::Relaxed) && inflight > 0 {
        // Another worker failed: drain what is in flight so buffers are not freed under the kernel.
        let mut turns = 0u32;
        while inflight > 0 && turns < 1_000_000 {
            let n = engine
                .reap(1, &mut completions)
                .unwrap_or(inflight as usize);
            inflight = inflight.saturating_sub(n as u32);
            turns += 1;
        }
    }

    // Flush the last, partial interval.
    if plan.intervals.is_some() {
        let end = clock::now_ns().max(interval_start_ns);
        interval_misses += swap_intervals(&mut plan, &mut devs, interval_start_ns, end, true);
    }
    let usage = ThreadUsage::current_thread().since(&usage_start);
    let latlog_stalls = plan.lat_log.take().map_or(0, |lane| lane.finish());
    drop(engine);
    drop(bufs);
    Ok(WorkerResult {
        devices: devs
            .into_iter()
            .map(|d| (d.index, d.rec, d.issued))
            .collect(),
        usage,
        last_completion_ns,
        latlog_stalls,
        interval_misses,
    })
}

/// Hands every device's interval recorder to the collector and continues in a spare. Without a
/// spare (the collector lags) the device keeps its recorder, so the interval merges into the next;
/// returns how many devices did so. The final swap (`last`) sends the recorders themselves and
/// waits if it must: the run is over, and no interval may be lost.
fn swap_intervals(
    plan: &mut WorkerPlan,
    devs: &mut [Dev],
    start_ns: u64,
    end_ns: u64,
    last: bool,
) -> u64 {
    let Some((tx, spare_rx)) = plan.intervals.as_ref() else {
        return 0;
    };
    let mut misses = 0;
    for dev in devs.iter_mut() {
        if last {
            // An empty last interval (the run ended just after a boundary) is not worth a line.
            if let Some(rec) = dev.interval.take().filter(|r| r.ios() > 0) {
                let msg = IntervalMsg {
                    worker: plan.index,
                    device: dev.index,
                    start_ns,
                    end_ns,
                    rec,
                };
                // Fails only when the collector is gone, and then nobody wants the interval.
                let _ = tx.send(msg);
            }
            continue;
        }
        let spare = match spare_rx.try_recv() {
            Ok(s) => s,
            Err(TryRecvError::Empty | TryRecvError::Disconnected) => {
                misses += 1;
                continue;
            }
        };
        let full = dev
            .interval
            .replace(spare)
            .expect("interval recorder present");
        let msg = IntervalMsg {
            worker: plan.index,
            device: dev.index,
            start_ns,
            end_ns,
            rec: full,
        };
        if let Err(e) = tx.try_send(msg) {
            // Collector full or gone: keep recording into the same recorder; nothing is lost.
            let msg = match e {
                std::sync::mpsc::TrySendError::Full(m)
                | std::sync::mpsc::TrySendError::Disconnected(m) => m,
            };
            // The unused spare is dropped: a rare, cold path.
            drop(dev.interval.replace(msg.rec));
            misses += 1;
        }
    }
    misses
}

#[cold]
fn io_failure(dev: &Dev, slot: &Slot, result: i64) -> DriverError {
    if result < 0 {
        DriverError::Io {
            device: dev.name.clone(),
            op: slot.op,
            offset_bytes: slot.offset_bytes,
            len_bytes: slot.len_bytes,
            error: io::Error::from_raw_os_error((-result) as i32),
        }
    } else {
        DriverError::Short {
            device: dev.name.clone(),
            op: slot.op,
            offset_bytes: slot.offset_bytes,
            len_bytes: slot.len_bytes,
            done_bytes: result as u64,
        }
    }
}
