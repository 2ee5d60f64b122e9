#!/usr/bin/env bash
# Does a device's measured latency depend on the devices that share its worker? (issue: profile
# timing). 4 KiB random reads at QD1, libaio, on zram devices, run alternately (nines, fio, ...),
# medians over ROUNDS rounds.
#
#   1. sharing: each of NDEV zram devices measured alone on CPU $CPU1 (one run per device), then
#      all NDEV devices together on that one CPU: nines puts them in one worker, fio runs one job
#      (thread) per device on that CPU. Per-device percentiles are averaged over the devices.
#      The paper's host had a CPU per device for the "alone" case; this machine has 2 CPUs, so
#      "alone" here is one device at a time on the same CPU, which is the same thing measured.
#   2. heterogeneous: a zram device alone on CPU0, then sharing its worker with a file on the disk
#      that holds $SLOW_DIR (whose O_DIRECT submissions block), then with --cpus CPU0,CPU1
#      --isolate FILE (the file gets CPU1): the zram device's percentiles and whether nines'
#      warning named the file.
#   BASE=path/to/nines (optional): another nines build measured in the shared case too, for the
#      IOPS per worker CPU-second comparison.
#
# Latency is total latency (fio: --lat_percentiles=1, the submission plus completion that fio
# calls lat; nines: from just before the I/O's own submission to its completion being seen).
# Needs root (zram). QUICK=1: 1 round of 2 s (under two minutes). Environment: ROUNDS (3),
# RUNTIME_S (4), NDEV (4), DEV_SIZE (256M), CPU1 (1), CPU0 (0: the
# heterogeneous case's fast device; --isolate puts the file on CPU1), SLOW_DIR (/var/tmp), NINES (a prebuilt
# binary; default cargo build --release). Ends with one line
#   RESULT p50_inflation=... p999_inflation=... p9999_vs_fio=... hetero_p999_moved=... \
#          iops_per_cpu_s_vs_base=...
# inflation = shared / alone for nines (goal <= 1.10 up to p99.9); p9999_vs_fio = nines shared
# p99.99 / fio shared p99.99 (goal <= 0.1); hetero_p999_moved = the fast device's p99.9 sharing
# with the slow one / alone, with --isolate when nines warned (goal <= 1.10).
set -euo pipefail

if [ "${QUICK:-0}" = 1 ]; then
    ROUNDS=${ROUNDS:-1}
    RUNTIME_S=${RUNTIME_S:-2}
fi
ROUNDS=${ROUNDS:-3}
RUNTIME_S=${RUNTIME_S:-4}
NDEV=${NDEV:-4}
DEV_SIZE=${DEV_SIZE:-256M}
CPU1=${CPU1:-1}
CPU0=${CPU0:-0}
SLOW_DIR=${SLOW_DIR:-/var/tmp}
PCTS="50 90 99 99.9 99.99"

die() { echo "sharing: $*" >&2; exit 1; }

[ "$(id -u)" = 0 ] || die "needs root (it creates zram devices); run with sudo"
[ -e /sys/class/zram-control/hot_add ] || modprobe zram 2>/dev/null || true
[ -e /sys/class/zram-control/hot_add ] || die "no /sys/class/zram-control: load the zram module (modprobe zram)"
command -v fio >/dev/null || die "fio is missing: run scripts/setup.sh"
command -v python3 >/dev/null || die "python3 is missing: run scripts/setup.sh"

ROOT=$(cd "$(dirname "$0")/.." && pwd)
. "$(dirname "$0")/lib.sh"
bench_init sharing
bench_nines
[ -z "${BASE:-}" ] || [ -x "$BASE" ] || die "BASE=$BASE is not an executable"

bench_scratch WORK
SLOW=$(mktemp "$SLOW_DIR/nines-sharing-slow.XXXXXX")
ZRAMS=()
cleanup() {
    for n in "${ZRAMS[@]}"; do
        for _ in 1 2 3 4 5 6 7 8 9 10; do
            echo "$n" > /sys/class/zram-control/hot_remove 2>/dev/null && break
            sleep 0.2
        done
    done
    rm -f "$SLOW"
}
bench_on_exit cleanup

echo "sharing: $NDEV zram devices of $DEV_SIZE (random data) and a 256 MiB file in $SLOW_DIR" >&2
DEVS=()
for _ in $(seq "$NDEV"); do
    n=$(cat /sys/class/zram-control/hot_add)
    ZRAMS+=("$n")
    echo "$DEV_SIZE" > "/sys/block/zram$n/disksize"
    for _ in $(seq 100); do [ -b "/dev/zram$n" ] && break; sleep 0.05; done
    # Incompressible data, so reads decompress real pages instead of returning zero pages.
    dd if=/dev/urandom of="/dev/zram$n" bs=1M oflag=direct status=none 2>/dev/null || true
    DEVS+=("/dev/zram$n")
done
dd if=/dev/urandom of="$SLOW" bs=1M count=256 oflag=direct status=none

# nines_run OUT BIN [ARGS...] TARGET... -> report JSON in OUT, stderr in OUT.err
nines_run() {
    local out=$1 bin=$2; shift 2
    "$bin" profile --rw randread --bs 4k --engine libaio --iodepth 1 --runtime "${RUNTIME_S}s" \
        --cpus "$CPU1" --quiet --json "$out" "$@" > "$out.txt" 2> "$out.err" \
        || die "nines failed: $(tail -1 "$out.err")"
}

# fio_run OUT DEV... -> json in OUT (one job per device, all on CPU1)
fio_run() {
    local out=$1; shift
    local jobs=() i=0
    for d in "$@"; do jobs+=(--name="j$i" --filename="$d"); i=$((i + 1)); done
    fio --rw=randread --bs=4k --direct=1 --ioengine=libaio --iodepth=1 --runtime="$RUNTIME_S" \
        --time_based --cpus_allowed="$CPU1" --lat_percentiles=1 --randrepeat=0 --norandommap \
        --percentile_list=50:90:99:99.9:99.99 --thread --output-format=json "${jobs[@]}" \
        > "$out" 2> "$out.err" || die "fio failed: $(tail -1 "$out.err")"
}

# pcts TOOL FILE [NAME_SUBSTRING] -> one line per device: "p50 p90 p99 p99.9 p99.99" (ns), and
# for nines reports the IOPS per worker CPU-second as a last line "cpu IOPS_PER_CPU_S"
pcts() {
    python3 - "$1" "$2" "${3:-}" <<'EOF'
import json, sys
tool, path, only = sys.argv[1], sys.argv[2], sys.argv[3]
j = json.load(open(path))
keys = ["50", "90", "99", "99.9", "99.99"]
if tool == "fio":
    for job in j["jobs"]:
        if only and only not in job["job options"]["filename"]:
            continue
        p = job["read"]["lat_ns"]["percentile"]
        print(" ".join(str(p["%.6f" % float(k)]) for k in keys))
else:
    for d in j["devices"]:
        if only and only not in d["name"]:
            continue
        if d["read"]["ios"] == 0:
            sys.exit("sharing: %s did no I/O in %s" % (d["name"], path))
        p = d["read"]["lat_ns"]["percentiles"]
        print(" ".join(str(p[k]) for k in keys))
    cpu = sum(w["usr_cpu_s"] + w["sys_cpu_s"] for w in j["workers"])
    ios = j["aggregate"]["read"]["ios"]
    print("cpu %.0f" % (ios / cpu if cpu > 0 else 0))
EOF
}

median() { sort -g | awk '{a[NR]=$1} END {if (NR == 0) print 0; else print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
# mean of each column over lines (devices) -> one line
colmean() { awk '{for (i = 1; i <= NF; i++) s[i] += $i; n++} END {for (i = 1; i <= 5; i++) printf "%s%.0f", (i > 1 ? " " : ""), s[i] / n; print ""}'; }
# column-wise median over lines (rounds) -> one line
colmedian() {
    local f=$1 out="" c
    for c in 1 2 3 4 5; do out+="$(cut -d' ' -f$c "$f" | median) "; done
    echo "${out% }"
}

for f in nines_alone nines_shared fio_alone fio_shared base_shared h_alone h_shared h_isolated; do
    : > "$WORK/$f"
done
: > "$WORK/cpu_new"; : > "$WORK/cpu_base"
WARNED=0
for r in $(seq "$ROUNDS"); do
    echo "sharing: round $r/$ROUNDS" >&2
    # 1. alone: one device at a time, then all together; nines and fio alternate.
    : > "$WORK/na"; : > "$WORK/fa"
    for d in "${DEVS[@]}"; do
        nines_run "$WORK/n.json" "$NINES" "$d"
        pcts nines "$WORK/n.json" | grep -v '^cpu' >> "$WORK/na"
        fio_run "$WORK/f.json" "$d"
        pcts fio "$WORK/f.json" >> "$WORK/fa"
    done
    colmean < "$WORK/na" >> "$WORK/nines_alone"
    colmean < "$WORK/fa" >> "$WORK/fio_alone"
    nines_run "$WORK/n.json" "$NINES" "${DEVS[@]}"
    pcts nines "$WORK/n.json" > "$WORK/ns"
    grep -v '^cpu' "$WORK/ns" | colmean >> "$WORK/nines_shared"
    grep '^cpu' "$WORK/ns" | cut -d' ' -f2 >> "$WORK/cpu_new"
    fio_run "$WORK/f.json" "${DEVS[@]}"
    pcts fio "$WORK/f.json" | colmean >> "$WORK/fio_shared"
    if [ -n "${BASE:-}" ]; then
        nines_run "$WORK/b.json" "$BASE" "${DEVS[@]}"
        pcts nines "$WORK/b.json" > "$WORK/bs"
        grep -v '^cpu' "$WORK/bs" | colmean >> "$WORK/base_shared"
        grep '^cpu' "$WORK/bs" | cut -d' ' -f2 >> "$WORK/cpu_base"
    fi
    # 2. heterogeneous: the first zram device alone on CPU0, sharing that CPU's worker with the
    #    slow file, and with the file isolated (--cpus CPU0,CPU1: the file takes CPU1).
    fast=${DEVS[0]}
    CPU1=$CPU0 nines_run "$WORK/h.json" "$NINES" "$fast"
    pcts nines "$WORK/h.json" "$(basename "$fast")" | grep -v '^cpu' >> "$WORK/h_alone"
    CPU1=$CPU0 nines_run "$WORK/h.json" "$NINES" "$fast" "$SLOW"
    pcts nines "$WORK/h.json" "$(basename "$fast")" | grep -v '^cpu' >> "$WORK/h_shared"
    if grep -q -- "--isolate" "$WORK/h.json.err"; then WARNED=1; fi
    CPU1=$CPU0,$CPU1 nines_run "$WORK/h.json" "$NINES" --isolate "$SLOW" "$fast" "$SLOW"
    pcts nines "$WORK/h.json" "$(basename "$fast")" | grep -v '^cpu' >> "$WORK/h_isolated"
done

row() { # label file
    # shellcheck disable=SC2046
    awk -v l="$1" 'BEGIN { printf "%-34s", l } { printf " %8.1f", $1 / 1000 } END { print "" }' \
        <<< "$(colmedian "$2" | tr ' ' '\n')"
}

echo
echo "4 KiB random reads, QD1, libaio, $NDEV zram devices, all on CPU $CPU1; medians of $ROUNDS"
echo "alternating rounds of ${RUNTIME_S}s; per-device percentiles averaged over the devices, us"
echo "(nines $("$NINES" --version | awk '{print $2}'), $(fio --version), $(nproc) CPUs, kernel $(uname -r))"
printf "%-34s %8s %8s %8s %8s %9s\n" "run" "p50" "p90" "p99" "p99.9" "p99.99"
row "nines, 1 device at a time" "$WORK/nines_alone"
row "nines, $NDEV devices in one worker" "$WORK/nines_shared"
[ -z "${BASE:-}" ] || row "base nines, $NDEV in one worker" "$WORK/base_shared"
row "fio, 1 job at a time" "$WORK/fio_alone"
row "fio, $NDEV jobs on one CPU" "$WORK/fio_shared"
echo
echo "paper's host (16 CPUs, 14 vs 56 zram, 4 per worker), us:"
echo "  nines 1/worker 2.3 2.6 3.4 19.5 44.8 | nines 4/worker 9.3 10.0 20.8 30.8 78.9"
echo "  fio 1 job/CPU  2.9 3.1 4.2 21.9 52.5 | fio 4 jobs/CPU 3.0 3.4 4.5 28.4 11993"
echo
echo "heterogeneous: $(basename "${DEVS[0]}") alone, sharing a worker with a file in $SLOW_DIR, and with --isolate"
printf "%-34s %8s %8s %8s %8s %9s\n" "run" "p50" "p90" "p99" "p99.9" "p99.99"
row "zram alone (CPU0)" "$WORK/h_alone"
row "zram + file, one worker (CPU0)" "$WORK/h_shared"
row "zram + file, --isolate (CPU1)" "$WORK/h_isolated"
echo "nines warned about the slow file's submissions: $([ $WARNED = 1 ] && echo yes || echo no)"

ratio() { # file_a file_b column -> a/b
    local a b
    a=$(colmedian "$1" | cut -d' ' -f"$3")
    b=$(colmedian "$2" | cut -d' ' -f"$3")
    awk -v a="$a" -v b="$b" 'BEGIN { printf "%.3f", (b > 0 ? a / b : 0) }'
}
P50=$(ratio "$WORK/nines_shared" "$WORK/nines_alone" 1)
P999=$(ratio "$WORK/nines_shared" "$WORK/nines_alone" 4)
P9999=$(ratio "$WORK/nines_shared" "$WORK/fio_shared" 5)
if [ $WARNED = 1 ]; then
    HET=$(ratio "$WORK/h_isolated" "$WORK/h_alone" 4)
else
    HET=$(ratio "$WORK/h_shared" "$WORK/h_alone" 4)
fi
CPU_VS_BASE=0
if [ -n "${BASE:-}" ]; then
    CPU_VS_BASE=$(awk -v a="$(median < "$WORK/cpu_new")" -v b="$(median < "$WORK/cpu_base")" \
        'BEGIN { printf "%.3f", (b > 0 ? a / b : 0) }')
    echo "IOPS per worker CPU-second, $NDEV devices in one worker: nines $(median < "$WORK/cpu_new"), base $(median < "$WORK/cpu_base")"
fi
bench_result "p50_inflation=$P50" "p999_inflation=$P999" "p9999_vs_fio=$P9999" "hetero_p999_moved=$HET" \
    "iops_per_cpu_s_vs_base=$CPU_VS_BASE"
