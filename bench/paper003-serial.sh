#!/usr/bin/env bash
# Paper 003 (UNIST; SWAN, USENIX ATC'19): a serial array whose front-end SSD never collects
# garbage, against RAID0 on the same members, in the simulator: four intel-750 members, aged,
# 64 KiB random writes at QD32 over a footprint of about three quarters of the array (18 GiB of
# the 4 x 6.3 GB scaled members), run long enough that the members' GC is active.
#
#   raid0    --layout raid0 (128 KiB stripe), members aged as the paper ages them: random
#            overwrites of the footprint only (precondition steady:76, the members' first 76 %,
#            which holds raid0's share of the 18 GiB); the rest of each member was never written,
#            as on SWAN's fresh SSDs ("aging" = fio random writes over the 1200 GB footprint of
#            1600 GB), and as on serial's members, whose unused segments are trimmed
#   raid0-full  the same with the whole of each member aged (precondition steady): 24 % more
#            valid data than the footprint on every member, only the 12 % over-provisioning
#            left to the members' GC (what the bench compared with before; printed for
#            reference, not the paper's state)
#   serial   --layout serial, members aged by a sequential fill (precondition fill: the state a
#            log-structured writer leaves) and the volume started with the footprint mapped in
#            order (--start-full 18g); segments 144 MiB, SWAN's 1 MiB stripe unit (so a GC move
#            is 1 MiB: the stripe unit bounds it), rotation with 2 free segments left, GC from 20
#            to 24 free segments, 64 moves in flight (at most 22 GC writes to one column: spread
#            over the back-ends; 16 moves did not keep up with the front-end). 144 MiB is the member's block stripe (36 dies x 4 MiB blocks):
#            the model's FTL stripes a sequential stream page by page over its dies, so only a
#            segment of a whole number of block stripes fills whole blocks; with 64 MiB segments
#            each block held pieces of two or three segments, a trimmed segment left its blocks
#            partly valid, and the device's GC moved the rest, on the front-end too (7159 units
#            in QUICK, 2.5 M units on all members)
#
# serial's xGC spreads its writes over the back-ends, so the array is bound by its front-end
# member's write bandwidth (about 1 GB/s), not by one back-end's.
#
# Each layout runs twice: random writes (throughput per second from the per-I/O log, its
# coefficient of variation, write p99.99 and max) and a 50/50 random read/write mix (read
# p99.99). The ramp (excluded from every figure) lets the serial array's rotation and xGC
# settle. Printed beside the paper's figures. Simulated time is deterministic.
#
# Usage: bench/paper003-serial.sh   (QUICK=1: 15 s ramp + 10 s measured instead of 30 s + 30 s;
# about 13 s and 30 s of wall time)
# Environment: NINES (a prebuilt binary; default cargo build --release), RAMP, RUNTIME.
# Last line: RESULT frontend_gc_moves=<device GC units moved on the serial front-end while it was
# the front-end> cov_ratio=<raid0 CoV / serial CoV> write_p9999_ratio=<raid0 / serial write
# p99.99> (goals: 0, >= 5, >= 10), then the same two ratios against raid0-full
# (cov_ratio_full, write_p9999_ratio_full), and raid0_min_over_mean=<raid0's lowest per-second
# write throughput / its mean> (goal <= 0.5: intel-750's write cliff). Before that line the bench prints why the goals are
# (not) met: xGC's victim valid fraction against greedy's steady state at this utilisation, its
# bytes moved per client byte, and the bounds of both arrays.
set -euo pipefail

RAMP=${RAMP:-30s}
RUNTIME=${RUNTIME:-30s}
if [ "${QUICK:-0}" = 1 ]; then RAMP=15s; RUNTIME=10s; fi

die() { echo "paper003-serial: $*" >&2; exit 1; }
command -v python3 >/dev/null || die "python3 is missing"
ROOT=$(cd "$(dirname "$0")/.." && pwd)
. "$(dirname "$0")/lib.sh"
bench_init paper003-serial
bench_nines
bench_scratch WORK

FOOT=18g
COMMON=(sim --quiet --device intel-750 --devices 4 --scale 0.01 --bs 64k --iodepth 32
        --size "$FOOT" --ramp "$RAMP" --runtime "$RUNTIME")
RAID0=(--layout raid0 --precondition steady:76)
RAID0_FULL=(--layout raid0 --precondition steady)
SERIAL=(--layout serial --precondition fill --start-full "$FOOT" --segment 144m --stripe 1m
        --rotate-free 2 --gc-start 20 --gc-stop 24 --gc-depth 64 --gc-move 1m)

run() { # name args...
    local name=$1; shift
    echo "paper003-serial: $name" >&2
    "$NINES" "${COMMON[@]}" "$@" --json "$WORK/$name.json" --lat-log "$WORK/$name.lat" \
        > "$WORK/$name.txt" 2>&1 || die "$name failed: $(tail -1 "$WORK/$name.txt")"
}
run raid0 "${RAID0[@]}" --rw randwrite
run raid0-full "${RAID0_FULL[@]}" --rw randwrite
run serial "${SERIAL[@]}" --rw randwrite
run raid0-mix "${RAID0[@]}" --rw randrw --mix 50
run raid0-full-mix "${RAID0_FULL[@]}" --rw randrw --mix 50
run serial-mix "${SERIAL[@]}" --rw randrw --mix 50

python3 - "$WORK" "$RAMP" "$RUNTIME" <<'EOF'
import json, math, statistics, struct, sys
work, ramp, runtime = sys.argv[1:4]

def per_second_write_mb(path):
    """Write MB completed in each whole second of the measured time, from the per-I/O log."""
    data = open(path, "rb").read()
    assert data[:8] == b"NINESLAT", path
    rec = struct.unpack_from("<I", data, 12)[0]
    n = struct.unpack_from("<I", data, 24)[0]
    pos = 28
    for _ in range(n):
        l = struct.unpack_from("<H", data, pos)[0]
        pos += 2 + l
    secs = {}
    first = None
    while pos + rec <= len(data):
        t = struct.unpack_from("<Q", data, pos)[0]
        write = data[pos + 23] & 1
        pos += rec
        if not write:
            continue
        first = t if first is None else min(first, t)
        s = t // 1_000_000_000
        secs[s] = secs.get(s, 0) + 65536
    ks = sorted(secs)[1:-1]  # whole seconds only
    return [secs[k] / 1e6 for k in ks]

def load(name):
    return json.load(open(f"{work}/{name}.json"))["devices"][0]

rows = {}
for name in ["raid0", "raid0-full", "serial"]:
    d = load(name)
    w = d["write"]["lat_ns"]
    mbs = per_second_write_mb(f"{work}/{name}.lat")
    mean = statistics.mean(mbs)
    cov = statistics.pstdev(mbs) / mean if mean else float("nan")
    mix = load(name + "-mix")
    v = d["volume"]
    members_gc = sum(m["internals"]["gc_units_moved"] for m in v["members"])
    front_gc = sum(m["internals"].get("gc_units_moved_while_gc_free", 0) for m in v["members"])
    rows[name] = dict(
        mbs=mbs, mean=mean, cov=cov, p9999=w["percentiles"]["99.99"] / 1e6,
        max=w["max_ns"] / 1e6, rp9999=mix["read"]["lat_ns"]["percentiles"]["99.99"] / 1e6,
        wp9999_mix=mix["write"]["lat_ns"]["percentiles"]["99.99"] / 1e6,
        members_gc=members_gc, front_gc=front_gc, stats=v["stats"])

print(f"paper 003 in the simulator: 4 x intel-750 (scaled), 64 KiB random writes QD32 over {sys.argv[1] and '18 GiB'},"
      f" ramp {ramp}, measured {runtime}")
print()
print("write MB/s per second (measured):")
for name in rows:
    print(f"  {name:7s} " + " ".join(f"{x:5.0f}" for x in rows[name]["mbs"]))
print()
hdr = f"{'':30s} {'raid0':>12s} {'raid0-full':>12s} {'serial':>12s}   paper"
print(hdr)
def line(label, key, fmt, paper):
    vals = " ".join(f"{fmt.format(rows[n][key]):>12s}" for n in ["raid0", "raid0-full", "serial"])
    print(f"{label:30s} {vals}   {paper}")
line("write throughput MB/s (mean)", "mean", "{:.0f}", "serial ~895 MB/s flat (front-end, 1 SSD); raid0 higher but fluctuating")
line("throughput CoV", "cov", "{:.3f}", "goal: serial at least 5x lower")
line("write p99.99 ms", "p9999", "{:.1f}", "goal: serial at least 10x lower")
line("write max ms", "max", "{:.1f}", "SWAN: max ~1 s vs 31-58 s for md RAID4/5 (trace replay)")
line("mixed 50/50: read p99.99 ms", "rp9999", "{:.1f}", "SWAN: RAID4 in place keeps lower read p99.99 (20-118 vs 122-328 ms, YCSB)")
line("mixed 50/50: write p99.99 ms", "wp9999_mix", "{:.1f}", "")
line("members' GC units moved", "members_gc", "{:d}", "")
print(f"{'front-end GC units moved':30s} {'-':>12s} {'-':>12s} {rows['serial']['front_gc']:>12d}   goal: 0")
s = rows["serial"]["stats"]
print(f"serial: array WAF {s['array_write_amplification']:.2f} (client {s['client_write_bytes']/1e9:.1f} GB,"
      f" xGC {s['gc_write_bytes']/1e9:.1f} GB), {s['rotations']} rotations, {s['gc_victims']} victims,"
      f" {s['write_waits']} writes waited for room (whole run, ramp included)")

# Why: the measured state of xGC against greedy's steady state, and the bounds of both arrays.
sd = load("serial")
opts = sd["volume"]["options"]
members = sd["volume"]["members"]
seg, unit, cm = opts["segment_bytes"], opts["unit_bytes"], opts["column_members"]
cols = len(members) // cm
segs_total = cols * (members[0]["size_bytes"] // (seg // cm))
u = opts["start_full_bytes"] / (segs_total * seg)
alpha = s["gc_units_moved"] / (s["gc_victims"] * (seg // unit)) if s["gc_victims"] else 0.0
lo, hi = 1e-9, 1 - 1e-9  # LRW/FIFO cleaning under uniform writes: u = (a - 1) / ln a
for _ in range(100):
    mid = (lo + hi) / 2
    lo, hi = (mid, hi) if (mid - 1) / math.log(mid) < u else (lo, mid)
gc_per_client = s["gc_write_bytes"] / s["client_write_bytes"]
qd, bs = 32, 65536
print()
print("why (serial):")
print(f"  utilisation {u:.3f} ({opts['start_full_bytes'] / 2**30:.0f} GiB of {segs_total} segments of"
      f" {seg >> 20} MiB); victims' valid fraction when xGC takes them {alpha:.3f} (greedy; uniform"
      f" random writes give about {lo:.3f} for least-recently-written cleaning at this utilisation)")
print(f"  xGC reads and writes {gc_per_client:.2f} bytes per client byte (array WAF"
      f" {s['array_write_amplification']:.2f}), on the back-ends only; the client is bound by the one"
      f" front-end member's write bandwidth (intel-750: 1.0 GB/s), raid0 by four members")
for n in ["serial", "raid0", "raid0-full"]:
    r = rows[n]
    print(f"  {n:10s} mean write latency at QD{qd} by Little's law {qd * bs / (r['mean'] * 1e6) * 1e3:5.2f} ms,"
          f" write p99.99 {r['p9999']:.1f} ms, per-second CoV {r['cov']:.3f}")
need_p = rows["raid0"]["p9999"] / 10
need_cov = rows["raid0"]["cov"] / 5
mean_p = qd * bs / (rows["serial"]["mean"] * 1e6) * 1e3
print(f"  goals against raid0 aged as the paper: serial write p99.99 <= {need_p:.2f} ms, {need_p / mean_p:.2f} x serial's"
      f" mean latency (a closed loop at QD{qd} on one front-end member), and per-second CoV <= {need_cov:.4f}")

cov_ratio = rows["raid0"]["cov"] / rows["serial"]["cov"] if rows["serial"]["cov"] else float("inf")
p_ratio = rows["raid0"]["p9999"] / rows["serial"]["p9999"]
cov_ratio_full = rows["raid0-full"]["cov"] / rows["serial"]["cov"] if rows["serial"]["cov"] else float("inf")
p_ratio_full = rows["raid0-full"]["p9999"] / rows["serial"]["p9999"]
notes = []
if rows["serial"]["front_gc"] != 0:
    notes.append("front-end GC moves are not 0")
if cov_ratio < 5:
    notes.append(f"CoV ratio {cov_ratio:.2f} < 5")
if p_ratio < 10:
    notes.append(f"write p99.99 ratio {p_ratio:.2f} < 10")
if rows["raid0"]["rp9999"] < rows["serial"]["rp9999"]:
    notes.append("raid0 has the lower read p99.99 in the mix")
if rows["raid0"]["wp9999_mix"] < rows["serial"]["wp9999_mix"]:
    notes.append("raid0 has the lower write p99.99 in the mix")
if rows["raid0"]["mean"] > rows["serial"]["mean"]:
    notes.append("raid0 has the higher mean write throughput")
min_over_mean = min(rows["raid0"]["mbs"]) / rows["raid0"]["mean"] if rows["raid0"]["mean"] else float("nan")
if min_over_mean > 0.5:
    notes.append(f"raid0 min/mean per-second throughput {min_over_mean:.3f} > 0.5 (no collapse)")
print(f"raid0 per-second write throughput: min {min(rows['raid0']['mbs']):.0f} MB/s, mean {rows['raid0']['mean']:.0f} MB/s,"
      f" min/mean {min_over_mean:.3f} (goal <= 0.5: the members' write cliff, intel-750's foreground GC)")
print(f"issue 10's goals: cov_ratio {cov_ratio:.2f} (>= 5: {'met' if cov_ratio >= 5 else 'NOT met'}),"
      f" write_p9999_ratio {p_ratio:.2f} (>= 10: {'met' if p_ratio >= 10 else 'NOT met'}),"
      f" front-end GC moves {rows['serial']['front_gc']} (0: {'met' if rows['serial']['front_gc'] == 0 else 'NOT met'})")
print("unmet goals / where raid0 is better: " + ("; ".join(notes) if notes else "none"))
print(f"RESULT frontend_gc_moves={rows['serial']['front_gc']} cov_ratio={cov_ratio:.3f} write_p9999_ratio={p_ratio:.3f}"
      f" cov_ratio_full={cov_ratio_full:.3f} write_p9999_ratio_full={p_ratio_full:.3f}"
      f" raid0_min_over_mean={min_over_mean:.3f}")
EOF
