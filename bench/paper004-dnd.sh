#!/usr/bin/env bash
# Paper 004, software approach #1 ("data redundancy, a D/ND I/O scheduler, and a write-back
# cache"), reproduced in the simulator: 4 KiB random reads at QD10 plus two 512 KiB random write
# streams, on P4600-class drives (preset p4600), in four configurations:
#   passthrough   one drive, reads and writes mixed                  (paper: "Passthrough set")
#   raid5 sched   3-drive RAID5, turns + write-back buffer, reads
#                 rebuilt around the member whose turn it is, no PLM  ("RAID5 ... w/IO scheduling")
#   raid5 dnd     the same, GC only in the owner's turn (members in PLM
#                 deterministic windows, GC asked for with a budget)  ("RAID5 ... w/D/ND")
#   raid5 dnd, no GC   the same volume preconditioned by a fill only, so no GC runs in the
#                 measured time: the GC-free reference for the p99 goal
#
# The write streams, as fio ran them: "512k writes with a thinktime of 2.56s / 1.28s" are
# bursts of B writes (fio's thinktime_blocks, here QD32), each followed by its thinktime once
# the burst completed. The paper does not give B for this table; its 250 MB/s and the two
# thinktimes fix it: 250 MB/s / (512 KiB x (1/2.56 s + 1/1.28 s)) = 407 (computed below). The
# bursts' own time makes the bandwidth a little lower. WRITES=paced runs the earlier form
# instead (each stream paced, --job ...,rate-iops=, to W1_IOPS=160 and W2_IOPS=320 writes/s).
# A run must hold many bursts: 30 s of simulated time (QUICK=1: 8 s, three of the 2.56 s
# stream's). With bursts the passthrough drive's reads wait behind a burst's queued programs
# (up to ~67 ms: the p4600 preset's dies serve programs and reads in order), so its p99.99 is
# far above the paper's 9.9 ms where the paced streams gave 8.6 ms; with read_priority (reads
# ahead of programs not started) it falls to ~3 ms, below the paper. No source says which the
# P4600 does, so the preset is left as it is and the figure is reported as it comes out.
# Simulated time is deterministic: the figures do not depend on the host.
#
# Scale: the drives are simulated at SCALE=0.1 of their blocks (256 blocks per plane, about
# 230 MB of model per drive and 12 s of preconditioning each), not at the default memory-fitted
# scale (36 blocks per plane). GC thresholds are whole blocks per die, so at 36 blocks per
# plane a die keeps 4 free blocks at the soft threshold and 2 in reserve: the PLM
# deterministic window can absorb only 2 blocks per die of writes before GC is forced (a
# window violation, reads behind it), where the real drive (2560 blocks per plane) has over a
# hundred. At 0.1 the window has 24 blocks per die, still far fewer than the real drive, and
# the volume's GC windows have to keep up with the GC the writes cause (they do: no forced GC
# in 60 s of simulated time, WAF 1.86). The read-wait breakdown printed below the table says
# what the slow reads of each configuration waited behind.
#
# Usage: bench/paper004-dnd.sh   (QUICK=1: 8 s of simulated time per row instead of 30 s)
# Environment: NINES (a prebuilt binary; default cargo build --release), RUNTIME (30s),
# WINDOW (100ms), CHUNK (64k), WRITES (bursts; paced), W1_IOPS/W2_IOPS (160/320, paced only),
# SCALE (0.1; auto: the default).
# Last line: RESULT p9999_ratio=<passthrough p99.99 / dnd p99.99> p99_vs_nogc=<dnd p99 / no-GC p99>
# passthrough_p99_ms=... passthrough_p9999_ms=... dnd_p9999_ms=... (absolute; paper: 4.49, 9.90,
# 0.338 ms)
set -euo pipefail

RUNTIME=${RUNTIME:-30s}
[ "${QUICK:-0}" = 1 ] && RUNTIME=8s
WRITES=${WRITES:-bursts}
WINDOW=${WINDOW:-100ms}
CHUNK=${CHUNK:-64k}
SCALE=${SCALE:-0.1}

die() { echo "paper004-dnd: $*" >&2; exit 1; }
command -v python3 >/dev/null || die "python3 is missing"
ROOT=$(cd "$(dirname "$0")/.." && pwd)
. "$(dirname "$0")/lib.sh"
bench_init paper004-dnd
bench_nines
bench_scratch WORK

case "$WRITES" in
bursts)
    BURST=$(python3 -c "print(round(250e6 / (512 * 1024 * (1 / 2.56 + 1 / 1.28))))")
    JOBS=(--job reads:rw=randread,bs=4k,iodepth=10
          --job "w1:rw=randwrite,bs=512k,iodepth=32,thinktime=2.56s,thinktime-blocks=$BURST"
          --job "w2:rw=randwrite,bs=512k,iodepth=32,thinktime=1.28s,thinktime-blocks=$BURST") ;;
paced)
    JOBS=(--job reads:rw=randread,bs=4k,iodepth=10
          --job "w1:rw=randwrite,bs=512k,rate-iops=${W1_IOPS:-160}"
          --job "w2:rw=randwrite,bs=512k,rate-iops=${W2_IOPS:-320}") ;;
*) die "WRITES=$WRITES: use bursts or paced" ;;
esac
COMMON=(sim --quiet --device p4600 --scale "$SCALE" --runtime "$RUNTIME" "${JOBS[@]}")

run() { # name args...
    local name=$1; shift
    echo "paper004-dnd: $name" >&2
    "$NINES" "${COMMON[@]}" "$@" --json "$WORK/$name.json" > "$WORK/$name.txt" 2>&1 \
        || die "$name failed: $(tail -1 "$WORK/$name.txt")"
}
run passthrough --devices 1
run sched --devices 3 --layout raid5 --chunk "$CHUNK" --policy sched --window "$WINDOW"
run dnd --devices 3 --layout raid5 --chunk "$CHUNK" --policy dnd --window "$WINDOW"
run fastfail --devices 3 --layout raid5 --chunk "$CHUNK" --fast-fail "${FAST_FAIL:-1ms}"
run nogc --devices 3 --layout raid5 --chunk "$CHUNK" --policy dnd --window "$WINDOW" --precondition fill

python3 - "$WORK" "$RUNTIME" "$WINDOW" "$CHUNK" "$SCALE" <<'EOF'
import json, sys
work, runtime, window, chunk, scale = sys.argv[1:6]
rows = [("passthrough", "passthrough (1 drive)", (4.490, 9.896, 13.042, 27, 250)),
        ("sched", "raid5 sched (turns, no PLM)", (2.442, 4.490, 5.997, 27, 250)),
        ("dnd", "raid5 dnd", (0.181, 0.338, 0.868, 27, 250)),
        ("fastfail", "raid5 fast-fail reads (IODA)", None),
        ("nogc", "raid5 dnd, no GC (reference)", None)]
res = {}
for key, label, paper in rows:
    j = json.load(open(f"{work}/{key}.json"))
    reads = next(x for x in j["jobs"] if x["name"] == "reads")["read"]
    p = reads["lat_ns"]["percentiles"]
    wbw = sum(x["write"]["bw_bytes"] for x in j["jobs"]) / 1e6
    d = j["devices"][0]
    gc = sum((m.get("internals") or {}).get("gc_runs", 0) for m in (d.get("volume") or {}).get("members", [])) \
        if d.get("volume") else (d.get("internals") or {}).get("gc_runs", 0)
    st = (d.get("volume") or {}).get("stats", {})
    waits = (d.get("internals") or {}).get("read_waits", {})
    viol = (d.get("internals") or {}).get("window_violations", 0)
    res[key] = dict(label=label, paper=paper, p99=p["99"] / 1e6, p9999=p["99.99"] / 1e6,
                    p6=p["99.9999"] / 1e6, iops=reads["iops"] / 1e3, wbw=wbw, gc=gc, st=st,
                    waits=waits, viol=viol)
print()
print(f"paper 004 approach #1 in the simulator: p4600 x 3 (scale {scale}), {chunk} chunks, "
      f"{window} turns, {runtime} simulated; read latency in ms")
print(f"{'configuration':32} {'p99':>7} {'p99.99':>8} {'p99.9999':>9} {'rd kIOPS':>9} "
      f"{'wr MB/s':>8} {'GC runs':>8}   paper: {'p99':>6} {'p99.99':>7} {'p99.9999':>8} {'kIOPS':>6} {'MB/s':>5}")
for key, label, paper in rows:
    r = res[key]
    line = (f"{label:32} {r['p99']:7.3f} {r['p9999']:8.3f} {r['p6']:9.3f} {r['iops']:9.1f} "
            f"{r['wbw']:8.1f} {r['gc']:8d}")
    if paper:
        line += f"   {'':6} {paper[0]:6.3f} {paper[1]:7.3f} {paper[2]:8.3f} {paper[3]:6d} {paper[4]:5d}"
    print(line)
print()
causes = ["gc_forced", "gc_requested", "gc_idle", "programs", "reads"]
print("what member reads waited behind on their dies: reads that waited over 1 ms "
      "(longest wait in ms), summed over the members")
print(f"{'configuration':32} " + " ".join(f"{c:>18}" for c in causes) + f" {'forced in DTWIN':>16}")
for key, label, paper in rows:
    w = res[key]["waits"]
    cells = []
    for c in causes:
        x = w.get(c) or {}
        cells.append(f"{x.get('slow_reads', 0):>8d} ({x.get('wait_ns_max', 0) / 1e6:6.1f})")
    print(f"{label:32} " + " ".join(f"{c:>18}" for c in cells) + f" {res[key]['viol']:>16d}")
ff = res["fastfail"]["st"]
print()
print("raid5 with fast-fail reads only (no turns, members collect garbage when they like): "
      "%d pieces rebuilt around a busy member, %d read again (a second busy piece in a row), "
      "read fan-out %.2f" % (ff.get("fast_fail_rebuilt", 0), ff.get("fast_fail_reread", 0),
                              ff.get("read_fan_out", 0)))
dn = res["dnd"]["st"]
dd = dn.get("dnd", {})
print()
print("costs of raid5 dnd: read fan-out %.2f member reads per read, %d pieces rebuilt, "
      "parity takes %.0f%% of capacity, write-back buffer %.0f MiB (peak %.1f MiB, %d of %d row entries, "
      "%d waits for room), %d window turns" % (dn.get("read_fan_out", 0), dn.get("rebuilt_pieces", 0),
                           100 * dn.get("parity_capacity_share", 0), dd.get("write_back_bytes", 0) / 2**20,
                           dd.get("occupancy_bytes_max", 0) / 2**20, dd.get("entries_used_max", 0),
                           dd.get("entries", 0), dd.get("buffer_waits", 0),
                           dd.get("window_switches", 0)))
ratio = res["passthrough"]["p9999"] / res["dnd"]["p9999"]
vs_nogc = res["dnd"]["p99"] / res["nogc"]["p99"]
print(f"goals: dnd p99.99 at least 10x below passthrough: {ratio:.1f}x (paper {9.896/0.338:.1f}x); "
      f"dnd p99 within 1.5x of no GC: {vs_nogc:.2f}x")
if res["dnd"]["gc"] == 0:
    print("note: no GC ran in the D/ND volume in this short run (its members defer GC in their "
          "deterministic windows), so it matches the no-GC reference; run without QUICK=1 for "
          "the steady-state figures")
pt, dn = res["passthrough"], res["dnd"]
within = lambda v, ref: ref / 2 <= v <= ref * 2
print(f"absolute goals (issue 28, p4600 with its variance sources): passthrough p99 {pt['p99']:.2f} ms"
      f" (paper 4.49; within 2x: {'met' if within(pt['p99'], 4.49) else 'NOT met'}), p99.99 {pt['p9999']:.2f} ms"
      f" (paper 9.90; {'met' if within(pt['p9999'], 9.896) else 'NOT met'}); D/ND p99.99 {dn['p9999']:.3f} ms"
      f" (paper 0.338; {'met' if within(dn['p9999'], 0.338) else 'NOT met'}); passthrough/D/ND at p99.99"
      f" {ratio:.0f}x (10-100x: {'met' if 10 <= ratio <= 100 else 'NOT met'})")
print(f"RESULT p9999_ratio={ratio:.2f} p99_vs_nogc={vs_nogc:.2f} passthrough_p99_ms={pt['p99']:.3f}"
      f" passthrough_p9999_ms={pt['p9999']:.3f} dnd_p9999_ms={dn['p9999']:.3f}")
EOF
