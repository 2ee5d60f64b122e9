#!/usr/bin/env bash
# Paper 004 (software tail cutting, approaches 2 and 3) in the simulator: write shaping and a
# lifetime-classified write buffer, each as an option on the same volume (docs/arch-shaping.md).
#
#   (a) throttling: 4 KiB random reads at QD10 beside two 512 KiB random-write burst streams
#       as fio ran them (thinktime_blocks): each stream writes a burst of B writes at QD32,
#       waits for them, then thinks 2.56 s / 1.28 s; with --throttle at several rates: write
#       bandwidth against read p99.99.
#   (b) chopping: the same workload with --chop 128k, 32k, 4k (the 512 KiB writes issued as
#       pieces one after another); the paper varies the client's block size instead.
#   B: the paper gives it only in its chopping table (T=1.28, B=160 at 512k, B x BS = 20 MiB at
#   the smaller sizes, ~15 MB/s, which B=160 at 512k cannot give: 80 MiB per 1.28 s is over
#   60 MB/s). Its throttling table gives the unthrottled bandwidth, 67 MB/s, and the two
#   thinktimes, which fix B: 67 MB/s / (512 KiB x (1/2.56 s + 1/1.28 s)) = 109 (computed below
#   from those three numbers, not fitted to the model).
#   Device for (a) and (b): p4600 (the P4600-class preset from the same author's FMS'18 talk;
#   the paper's tables are P4510 sets, the P4600's sibling), at the memory-fitted scale.
#   (c) the write buffer: three sequential 128 KiB write streams with 1x, 7x and 17x velocity
#       (QD4, each over its own 30% of the space) and one uniform 4 KiB random stream of 1x
#       velocity over 5% (QD16), beside 5000 random 4 KiB reads/s (QD16), from a sequentially
#       filled device; without and with --buffer z-ssd (4 GiB, 256 MiB buckets = the NAND erase
#       unit, 8 velocity classes, flushes paced at 14 MiB/s, started when 2 buckets are left
#       free, each run held while the NAND says it stays busy over 2 ms): the NAND device's
#       write amplification and the read percentile table, after 1800 s (and 2700 s) of
#       simulated time.
# NAND for (c): afa-m2-2018 at the smallest scale (19 GB); simulated latencies are deterministic.
# Paper numbers are Intel P4510/P4500 (1-2 TB sets) with an Optane P4800X buffer; the model is
# another drive, so compare directions and ratios, not milliseconds.
#
# Usage: bench/paper004-shaping.sh         QUICK=1 bench/paper004-shaping.sh (shorter runs)
# Environment: NINES (a prebuilt binary; default cargo build --release).
# Last line: RESULT waf_base=... waf_buffer=... read_p9999_ratio=... (baseline / buffered)
#   write_mb_s=... (the unthrottled run's write bandwidth; paper 67) throttle_p9999_ms=A..B
#   (unthrottled..lowest rate; paper 14.144..4.576) chop4k_p9999_ms=...
set -euo pipefail
cd "$(dirname "$0")/.."
QUICK="${QUICK:-}"
# (c) runs 1800 s (and 2700 s without QUICK).
if [ -n "$QUICK" ]; then AB_RT=30s; else AB_RT=120s; fi
. bench/lib.sh
bench_init paper004-shaping
bench_nines
bench_scratch TMP

# nines sim --quiet ARGS..., its summary line kept out of the tables (shown when it fails).
sim() {
    "$NINES" sim --quiet "$@" 2>"$TMP/err" || {
        cat "$TMP/err" >&2
        exit 1
    }
}

# Reads job's percentile (ms) and the device's write bandwidth (MB/s) from a report.
fig() {
    python3 - "$1" "$2" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
what = sys.argv[2]
jobs = {j["name"]: j for j in r["jobs"]}
dev = r["devices"][0]
if what == "wbw":
    print("%.1f" % (dev["write"]["bw_bytes"] / 1e6))
elif what.startswith("p"):
    print("%.3f" % (jobs["reads"]["read"]["lat_ns"]["percentiles"][what[1:]] / 1e6))
elif what == "waf":
    members = dev.get("volume", {}).get("members") if dev.get("volume") else None
    internals = members[0]["internals"] if members else dev["internals"]
    print("%.3f" % internals["write_amplification"])
elif what == "waf_e2e":
    # Flash writes of the NAND device over what the clients wrote.
    members = dev.get("volume", {}).get("members") if dev.get("volume") else None
    i = members[0]["internals"] if members else dev["internals"]
    flash_units = i["host_units_written"] * i["write_amplification"]
    print("%.3f" % (flash_units * 4096 / dev["write"]["bytes"]))
elif what == "waits":
    # What the NAND device's reads that waited over 1 ms on their die waited behind.
    members = dev.get("volume", {}).get("members") if dev.get("volume") else None
    w = (members[0]["internals"] if members else dev["internals"])["read_waits"]
    print(", ".join("%s %d (max %.1f ms)" % (c, w[c]["slow_reads"], w[c]["wait_ns_max"] / 1e6)
                    for c in ("gc_forced", "gc_requested", "gc_idle", "programs", "reads")))
elif what == "buf":
    b = dev["volume"]["stats"]["buffer"]
    print("hit rate %.3f, flushed %.1f GB in %d buckets at %.1f MB/s, absorbed %.2f GB, "
          "writes held for room %d, writes per class %s" % (
        b["read_hit_rate"], b["flushed_bytes"] / 1e9, b["buckets_flushed"],
        b["flush_bytes_per_s"] / 1e6, b["absorbed_bytes"] / 1e9, b["held_writes"],
        "/".join(str(c["writes"]) for c in b["classes"])))
PY
}

# The burst length from the paper's throttling table (see the top).
BURST=$(python3 -c "print(round(67e6 / (512 * 1024 * (1 / 2.56 + 1 / 1.28))))")
AB=(--device p4600 --runtime "$AB_RT" --ramp 2s
    --job reads:rw=randread,bs=4k,iodepth=10
    --job "w1:rw=randwrite,bs=512k,iodepth=32,thinktime=2.56s,thinktime-blocks=$BURST"
    --job "w2:rw=randwrite,bs=512k,iodepth=32,thinktime=1.28s,thinktime-blocks=$BURST")

# shaping_table OPTION PAPER_ROWS...: one row per value of OPTION ("none": without it), the
# paper's row beside it; sets last_p9999 (and first_p9999).
shaping_table() {
    local opt="$1" i=0 v extra
    shift
    local paper=("$@")
    local values=(none "${VALUES[@]}")
    printf '%-16s %8s %8s %8s %10s   | paper %s\n' "${opt#--}" "p99" "p99.9" "p99.99" "wr MB/s" "p99 / p99.9 / p99.99 / wr MB/s"
    for v in "${values[@]}"; do
        extra=()
        [ "$v" != none ] && extra=("$opt" "$v")
        sim "${AB[@]}" "${extra[@]}" --json "$TMP/ab.json"
        printf '%-16s %8s %8s %8s %10s   | %s\n' "$v" "$(fig "$TMP/ab.json" p99)" "$(fig "$TMP/ab.json" p99.9)" \
            "$(fig "$TMP/ab.json" p99.99)" "$(fig "$TMP/ab.json" wbw)" "${paper[$i]}"
        if [ "$v" = none ]; then
            first_p9999=$(fig "$TMP/ab.json" p99.99)
            first_wbw=$(fig "$TMP/ab.json" wbw)
        fi
        last_p9999=$(fig "$TMP/ab.json" p99.99)
        i=$((i + 1))
    done
}

echo "(a) Throttling: read latency (ms) vs write bandwidth, bursts of $BURST x 512 KiB; paper: Intel P4510 1 TB sets"
# The paper's throttled bandwidths as the rates; the bursts' closed loop (think after the last
# write completes) writes less than the rate once it holds the bursts back.
VALUES=(57m 41m 20m)
shaping_table --throttle "5.088 / 6.88 / 14.144 / 67" "4.896 / 6.688 / 12.608 / 57" \
    "3.376 / 5.024 / 7.584 / 41" "1.4 / 3.056 / 4.576 / 20"
a_base=$first_p9999
a_last=$last_p9999
write_mb_s=$first_wbw
echo "unthrottled write bandwidth: $write_mb_s MB/s (paper 67)"
echo
echo "(b) Chopping 512 KiB writes: read latency (ms); paper: P4510 2 TB sets, client block size 512k/128k/32k/4k"
VALUES=(128k 32k 4k)
shaping_table --chop "2.544 / 6.752 / 17.536 / 15" "1.544 / 4.384 / 11.072 / 15.43" \
    "1.464 / 4.192 / 10.56 / 15.38" "1.48 / 3.984 / 5.28 / 14.42"
b_last=$last_p9999

X=4
# buffer_table RUNTIME: (c) without and with the buffer over RUNTIME of simulated time; sets
# waf_base, waf_buffer and ratio (read p99.99, baseline / buffer).
buffer_table() {
    local rt="$1" i=0 p base buf
    local C=(--runtime "$rt" --ramp 0s --precondition fill
        --percentiles 50,70,90,99,99.9,99.99,99.999,99.9999
        --job "seq1:rw=write,bs=128k,iodepth=4,rate-iops=$X,offset=0,size=5g"
        --job "seq2:rw=write,bs=128k,iodepth=4,rate-iops=$((7 * X)),offset=5g,size=5g"
        --job "seq3:rw=write,bs=128k,iodepth=4,rate-iops=$((17 * X)),offset=10g,size=5g"
        --job "rand:rw=randwrite,bs=4k,iodepth=16,rate-iops=$((32 * X)),offset=15g,size=1g"
        --job "reads:rw=randread,bs=4k,iodepth=16,rate-iops=5000")
    sim "${C[@]}" --json "$TMP/c0.json"
    sim "${C[@]}" --buffer z-ssd --buffer-size 4g --flush-rate 14m --buffer-classes 8 --buffer-half-life 3600s \
        --json "$TMP/c1.json"
    waf_base=$(fig "$TMP/c0.json" waf)
    waf_buffer=$(fig "$TMP/c1.json" waf)
    echo
    echo "(c) Write buffer, $rt simulated: NAND write amplification; paper: P4500 1 TiB + Optane P4800X"
    printf '%-28s %10s %10s   | paper %s\n' "" "baseline" "buffer" "baseline / buffer"
    printf '%-28s %10s %10s   | %s\n' "NAND device WAF" "$waf_base" "$waf_buffer" "2.46 / 1.25"
    printf '%-28s %10s %10s   | %s\n' "flash writes / client writes" "$(fig "$TMP/c0.json" waf_e2e)" \
        "$(fig "$TMP/c1.json" waf_e2e)" "(not given)"
    echo "buffer: $(fig "$TMP/c1.json" buf)"
    echo "NAND reads that waited over 1 ms, by what was ahead on the die:"
    echo "  baseline: $(fig "$TMP/c0.json" waits)"
    echo "  buffer:   $(fig "$TMP/c1.json" waits)"
    echo "(c) Read latency (ms), $rt simulated. The paper's latency table for the buffer is of another"
    echo "    workload (FIO 'Facebook workload', 4K_L2R6DWP.DIO), not in the paper and not reproducible"
    echo "    here; for this streams workload it gives only Read QoS P99.99 34% (better with streams)."
    printf '%-10s %10s %10s\n' "pct" "baseline" "buffer"
    for p in 50 70 90 99 99.9 99.99 99.999 99.9999; do
        base=$(fig "$TMP/c0.json" "p$p")
        buf=$(fig "$TMP/c1.json" "p$p")
        printf '%-10s %10s %10s\n' "p$p" "$base" "$buf"
    done
    ratio=$(python3 -c "print('%.2f' % ($(fig "$TMP/c0.json" p99.99) / $(fig "$TMP/c1.json" p99.99)))")
}

# Longer runs: by 2700 s the baseline's long-lived data fills some dies with valid data (host
# pages go round robin over dies whatever their lifetime); the model then places host pages on
# the other dies (WAF near 4.8, read p99 1.4 ms); before that fix its futile GC there made reads
# queue for seconds. The RESULT line takes the 1800 s run, before any die fills.
if [ -z "$QUICK" ]; then
    buffer_table 2700s
fi
buffer_table 1800s
waf_cut=$(python3 -c "print('%.0f' % (100 * (1 - $waf_buffer / $waf_base)))")
echo
echo "goals (1800 s): WAF cut >= 40% (measured ${waf_cut}%; paper 2.46 -> 1.25, 49%), read p99.99 lower" \
    "by at least the paper's 34% on this workload, i.e. baseline / buffer >= 1.52x (measured ${ratio}x;" \
    "nines' own target 2.5x); unthrottled writes within 20% of the paper's 67 MB/s (measured $write_mb_s);" \
    "throttling p99.99 ${a_base} -> ${a_last} ms (paper 14.144 -> 4.576, each within 2x), chopping to" \
    "4k -> ${b_last} ms (paper 5.28)"
echo "RESULT waf_base=$waf_base waf_buffer=$waf_buffer read_p9999_ratio=$ratio write_mb_s=$write_mb_s throttle_p9999_ms=$a_base..$a_last chop4k_p9999_ms=$b_last"
