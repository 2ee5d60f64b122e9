#!/usr/bin/env bash
# Keeping lifetimes apart, judged by the same tails (issue 33): paper 004's table (c) workload
# (bench/paper004-shaping.sh's buffer_table: three sequential 128 KiB write streams at 1x, 7x
# and 17x velocity, each over its own 5 GiB, one uniform 4 KiB random stream of 1x velocity
# over 1 GiB, beside 5000 random 4 KiB reads/s, from a sequentially filled device) on
#   (a) the conventional drive (afa-m2-2018),
#   (b) the same drive behind the lifetime-classified write buffer (--buffer z-ssd, as
#       paper004-shaping runs it: 4 GiB, 8 classes, flushes paced at 14 MiB/s),
#   (c) the same NAND with NVMe Flexible Data Placement (afa-m2-2018-fdp: 8 persistently
#       isolated reclaim unit handles) and --placement fdp: the buffer's classifier tags each
#       write with a handle, no buffer device.
# Each at the same scale (--scale, so the same blocks per die), 1800 s of simulated time
# (QUICK=1: 600 s). The scale is the smallest the FDP drive allows (160 blocks per plane, a
# 77 GB drive): its 8 handles keep 16 open blocks per die, which need more spare blocks than
# paper004-shaping's 78-block dies (19 GB) have; (a) and (b) run at the same scale, so the
# job lines (paper 004's, in absolute sizes) cover a smaller share of the drive than there. Prints the NAND device's WAF (and, for (c), per handle), the reads' p99,
# p99.99 and p99.9999, the write bandwidth, and what the slow reads waited behind.
#
# Usage: bench/placement.sh        QUICK=1 bench/placement.sh
# Environment: NINES (a prebuilt binary; default cargo build --release), SCALE (default 0.0825).
# Last line: RESULT fdp_waf=... fdp_read_p9999_gain=... (gain: conventional p99.99 / FDP p99.99)
set -euo pipefail
cd "$(dirname "$0")/.."
QUICK="${QUICK:-}"
if [ -n "$QUICK" ]; then RT=1800s; else RT=3600s; fi
SCALE="${SCALE:-0.0825}"
. bench/lib.sh
bench_init placement
bench_nines
bench_scratch TMP

sim() {
    "$NINES" sim --quiet "$@" 2>"$TMP/err" || {
        cat "$TMP/err" >&2
        exit 1
    }
}

# fig REPORT WHAT: a figure of the NAND device (the volume's first member when there is one).
fig() {
    python3 - "$1" "$2" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
what = sys.argv[2]
jobs = {j["name"]: j for j in r["jobs"]}
dev = r["devices"][0]
members = dev.get("volume", {}).get("members") if dev.get("volume") else None
internals = members[0]["internals"] if members else dev["internals"]
if what == "wbw":
    print("%.1f" % (dev["write"]["bw_bytes"] / 1e6))
elif what.startswith("p"):
    print("%.3f" % (jobs["reads"]["read"]["lat_ns"]["percentiles"][what[1:]] / 1e6))
elif what == "waf":
    print("%.3f" % internals["write_amplification"])
elif what == "blocks":
    print(r["config"]["extra"].get("blocks_per_plane", "?"))
elif what == "waits":
    w = internals["read_waits"]
    print(", ".join("%s %d (max %.1f ms)" % (c, w[c]["slow_reads"], w[c]["wait_ns_max"] / 1e6)
                    for c in ("gc_forced", "gc_requested", "gc_idle", "programs", "reads")))
elif what == "handles":
    f = internals.get("fdp")
    if f:
        print(" ".join("%d:%.0fMB/%.3f" % (h["handle"], h["host_bytes_written"] / 1e6,
                                           h["write_amplification"])
                       for h in f["by_handle"] if h["host_bytes_written"] > 0))
PY
}

X=4
C=(--runtime "$RT" --ramp 0s --precondition fill --scale "$SCALE"
    --percentiles 50,70,90,99,99.9,99.99,99.999,99.9999
    --job "seq1:rw=write,bs=128k,iodepth=4,rate-iops=$X,offset=0,size=5g"
    --job "seq2:rw=write,bs=128k,iodepth=4,rate-iops=$((7 * X)),offset=5g,size=5g"
    --job "seq3:rw=write,bs=128k,iodepth=4,rate-iops=$((17 * X)),offset=10g,size=5g"
    --job "rand:rw=randwrite,bs=4k,iodepth=16,rate-iops=$((32 * X)),offset=15g,size=1g"
    --job "reads:rw=randread,bs=4k,iodepth=16,rate-iops=5000")
sim --device afa-m2-2018 "${C[@]}" --json "$TMP/a.json"
sim --device afa-m2-2018 "${C[@]}" --buffer z-ssd --buffer-size 4g --flush-rate 14m \
    --buffer-classes 8 --buffer-half-life 3600s --json "$TMP/b.json"
sim --device afa-m2-2018-fdp "${C[@]}" --placement fdp --json "$TMP/c.json"

echo "Paper 004 table (c), $RT simulated, scale $SCALE ($(fig "$TMP/a.json" blocks) / $(fig "$TMP/c.json" blocks) blocks per plane)"
printf '%-26s %12s %12s %12s\n' "" "(a) conv" "(b) buffer" "(c) FDP"
row() {
    printf '%-26s %12s %12s %12s\n' "$1" "$(fig "$TMP/a.json" "$2")" "$(fig "$TMP/b.json" "$2")" "$(fig "$TMP/c.json" "$2")"
}
row "NAND device WAF" waf
row "read p99 (ms)" p99
row "read p99.9 (ms)" p99.9
row "read p99.99 (ms)" p99.99
row "read p99.9999 (ms)" p99.9999
row "write MB/s" wbw
echo "(c) per handle (host MB / WAF): $(fig "$TMP/c.json" handles)"
echo "NAND reads that waited over 1 ms, by what was ahead on the die:"
for x in a b c; do echo "  ($x) $(fig "$TMP/$x.json" waits)"; done
waf=$(fig "$TMP/c.json" waf)
gain=$(python3 -c "print('%.2f' % ($(fig "$TMP/a.json" p99.99) / $(fig "$TMP/c.json" p99.99)))")
echo "goals: FDP device WAF <= 1.1 (measured $waf), read p99.99 >= 3x lower than conventional (measured ${gain}x)"
bench_result "fdp_waf=$waf" "fdp_read_p9999_gain=$gain"
