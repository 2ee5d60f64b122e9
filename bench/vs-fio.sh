#!/usr/bin/env bash
# nines vs fio on the same zram devices, run alternately (fio, nines, fio, nines, ...), medians
# over ROUNDS rounds.
#
#   1. one device, 4 KiB random reads, QD1 and QD32, for each engine both tools have
#      (psync, libaio, io_uring): IOPS ratio and CPU-seconds per million I/Os ratio;
#   2. eight devices, QD1, both CPUs, every I/O logged by both tools (fio: one job per device
#      with --write_lat_log; nines: per-CPU workers with --lat-log): IOPS, CPU-seconds per
#      million I/Os and p99.99 over all devices.
#
# fio runs its jobs as threads (--thread), like nines' workers: forked fio jobs call setsid(), which
# would put them in another scheduling autogroup than the one NICE sets.
# Needs root (zram). Installs fio with apt-get if it is missing; builds nines in release.
# Environment: ROUNDS (3), RUNTIME_S (5), DEV_SIZE (256M), ENGINE8 (engine of part 2: libaio),
# CPU1 (CPU of part 1: 1), NICE (nice level of both tools: 0; e.g. -19 on a busy shared machine:
# with autogroup scheduling the script then runs in its own session and sets that group's nice),
# NINES (a prebuilt binary; default: cargo build --release).
#
# CPU time: fio's usr_cpu+sys_cpu (percent of the job's runtime) times the runtime, summed over
# jobs; nines' usr+sys of its worker threads from the report. "proc" CPU is the whole process
# (fio's parent and log writing, nines' setup and log writer thread), from bash's `time`. Latency: fio's total latency
# (submission + completion, --lat_percentiles=1, merged over jobs from its json+ histogram bins)
# against nines' latency (from just before submission to the completion being seen).
set -euo pipefail

# QUICK=1: one round of 2 s per case (under two minutes), for a first look; the figures quoted in
# docs come from the default three rounds of 5 s.
if [ -n "${QUICK:-}" ]; then
    ROUNDS=${ROUNDS:-1}
    RUNTIME_S=${RUNTIME_S:-2}
fi
ROUNDS=${ROUNDS:-3}
RUNTIME_S=${RUNTIME_S:-5}
DEV_SIZE=${DEV_SIZE:-256M}
ENGINE8=${ENGINE8:-libaio}
CPU1=${CPU1:-1}
NICE=${NICE:-0}
NDEV8=8

die() { echo "vs-fio: $*" >&2; exit 1; }

[ "$(id -u)" = 0 ] || die "needs root (it creates zram devices); run with sudo"
# Under autogroup scheduling a process's nice only counts inside its session's group, so a
# nice level for the tools needs a session (and group) of its own with that nice.
if [ "$NICE" != 0 ] && [ -e /proc/self/autogroup ] && [ -z "${VS_FIO_SESSION:-}" ]; then
    VS_FIO_SESSION=1 exec setsid -w bash "$0" "$@"
fi
if [ "$NICE" != 0 ] && [ -e /proc/$$/autogroup ]; then
    echo "$NICE" > "/proc/$$/autogroup" 2>/dev/null || echo "vs-fio: could not set the autogroup nice" >&2
fi
[ -e /sys/class/zram-control/hot_add ] || modprobe zram 2>/dev/null || true
[ -e /sys/class/zram-control/hot_add ] || die "no /sys/class/zram-control: load the zram module (modprobe zram)"
if ! command -v fio >/dev/null; then
    echo "vs-fio: installing fio" >&2
    apt-get update -qq && apt-get install -y -qq fio >/dev/null || die "could not install fio (apt-get install -y fio)"
fi
if ! command -v python3 >/dev/null; then
    apt-get update -qq && apt-get install -y -qq python3 >/dev/null || die "could not install python3"
fi

ROOT=$(cd "$(dirname "$0")/.." && pwd)
. "$(dirname "$0")/lib.sh"
bench_init vs-fio
bench_nines

bench_scratch WORK
ZRAMS=()
cleanup() {
    for n in "${ZRAMS[@]}"; do
        for _ in 1 2 3 4 5 6 7 8 9 10; do
            echo "$n" > /sys/class/zram-control/hot_remove 2>/dev/null && break
            sleep 0.2
        done
    done
}
bench_on_exit cleanup

echo "vs-fio: creating $NDEV8 zram devices of $DEV_SIZE and filling them with random data" >&2
DEVS=()
for _ in $(seq $NDEV8); do
    n=$(cat /sys/class/zram-control/hot_add)
    ZRAMS+=("$n")
    echo "$DEV_SIZE" > "/sys/block/zram$n/disksize"
    for _ in $(seq 100); do [ -b "/dev/zram$n" ] && break; sleep 0.05; done
    # Incompressible data, so reads decompress real pages instead of returning zero pages.
    dd if=/dev/urandom of="/dev/zram$n" bs=1M oflag=direct status=none 2>/dev/null || true
    DEVS+=("/dev/zram$n")
done

# fio_run OUT ENGINE QD CPUS LATLOG DEV...  -> json+ in OUT
fio_run() {
    local out=$1 engine=$2 qd=$3 cpus=$4 latlog=$5; shift 5
    local args=(--rw=randread --bs=4k --direct=1 --ioengine="$engine" --iodepth="$qd"
        --runtime="$RUNTIME_S" --time_based --cpus_allowed="$cpus" --cpus_allowed_policy=split
        --lat_percentiles=1 --randrepeat=0 --norandommap --output-format=json+ --thread)
    if [ "$latlog" = 1 ]; then args+=(--write_lat_log="$WORK/fio" --log_offset=1); fi
    local jobs=() i=0
    for d in "$@"; do jobs+=(--name="j$i" --filename="$d"); i=$((i + 1)); done
    local TIMEFORMAT='%3U %3S'
    { time nice -n "$NICE" fio "${args[@]}" "${jobs[@]}" > "$out" 2> "$out.err"; } 2> "$out.time" \
        || die "fio failed: $(tail -1 "$out.err")"
    rm -f "$WORK"/fio_*.log
}

# nines_run OUT ENGINE QD CPUS LATLOG DEV...
nines_run() {
    local out=$1 engine=$2 qd=$3 cpus=$4 latlog=$5; shift 5
    local args=(profile --rw randread --bs 4k --engine "$engine" --iodepth "$qd"
        --runtime "${RUNTIME_S}s" --cpus "$cpus" --quiet --json "$out")
    if [ "$latlog" = 1 ]; then args+=(--lat-log "$WORK/nines.lat"); fi
    local TIMEFORMAT='%3U %3S'
    { time nice -n "$NICE" "$NINES" "${args[@]}" "$@" > "$out.txt" 2> "$out.err"; } 2> "$out.time" \
        || die "nines failed: $(tail -1 "$out.err")"
    rm -f "$WORK/nines.lat"
}

# metrics TOOL FILE -> "iops cpu_s_per_mio p9999_ns proc_cpu_s_per_mio"
metrics() {
    python3 - "$1" "$2" <<'EOF'
import json, sys
tool, path = sys.argv[1], sys.argv[2]
j = json.load(open(path))
if tool == "fio":
    iops = ios = cpu_s = 0.0
    bins = {}
    for job in j["jobs"]:
        r = job["read"]
        iops += r["iops"]
        ios += r["total_ios"]
        cpu_s += (job["usr_cpu"] + job["sys_cpu"]) / 100.0 * job["job_runtime"] / 1000.0
        for k, v in r["lat_ns"].get("bins", {}).items():
            bins[int(k)] = bins.get(int(k), 0) + v
    total = sum(bins.values())
    acc, p = 0, 0
    for k in sorted(bins):
        acc += bins[k]
        if acc >= 0.9999 * total:
            p = k
            break
else:
    r = j["aggregate"]["read"]
    iops, ios = r["iops"], r["ios"]
    cpu_s = sum(w["usr_cpu_s"] + w["sys_cpu_s"] for w in j["workers"])
    p = r["lat_ns"]["percentiles"].get("99.99", 0)
u, s = open(path + ".time").read().split()
print(f"{iops:.0f} {cpu_s / (ios / 1e6):.4f} {p} {(float(u) + float(s)) / (ios / 1e6):.4f}")
EOF
}

median() { sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }

# bench NAME ENGINE QD CPUS LATLOG DEV...
#   -> prints "fio_iops fio_cpu fio_p fio_proc nines_iops nines_cpu nines_p nines_proc"
bench() {
    local name=$1 engine=$2 qd=$3 cpus=$4 latlog=$5; shift 5
    : > "$WORK/$name.fio"; : > "$WORK/$name.nines"
    for r in $(seq "$ROUNDS"); do
        echo "vs-fio: $name round $r/$ROUNDS" >&2
        fio_run "$WORK/f.json" "$engine" "$qd" "$cpus" "$latlog" "$@"
        metrics fio "$WORK/f.json" >> "$WORK/$name.fio"
        nines_run "$WORK/n.json" "$engine" "$qd" "$cpus" "$latlog" "$@"
        metrics nines "$WORK/n.json" >> "$WORK/$name.nines"
    done
    local out=""
    for t in fio nines; do
        for col in 1 2 3 4; do
            out+="$(cut -d' ' -f$col "$WORK/$name.$t" | median) "
        done
    done
    echo "$out"
}

fmt_row() { # label f_iops f_cpu f_p f_proc n_iops n_cpu n_p n_proc
    awk -v l="$1" -v fi="$2" -v fc="$3" -v fp="$4" -v fx="$5" -v ni="$6" -v nc="$7" -v np="$8" -v nx="$9" 'BEGIN {
        printf "%-22s %10.0f %10.0f %6.2f   %7.3f %7.3f %6.2f   %7.3f %7.3f %6.2f   %9.1f %9.1f\n",
            l, fi, ni, ni / fi, fc, nc, nc / fc, fx, nx, nx / fx, fp / 1000, np / 1000 }'
}

header() {
    printf "%-22s %10s %10s %6s   %7s %7s %6s   %7s %7s %6s   %9s %9s\n" "$1" "fio IOPS" "nines IOPS" "ratio" \
        "fio CPU" "nines" "ratio" "fio proc" "nines" "ratio" "fio p9999" "nines"
    printf "%-22s %10s %10s %6s   %7s %7s %6s   %7s %7s %6s   %9s %9s\n" "" "" "" "n/f" \
        "s/M I/O" "s/M I/O" "n/f" "s/M I/O" "s/M I/O" "n/f" "us" "us"
}

echo "vs-fio: nines $("$NINES" --version 2>/dev/null | awk '{print $2}'), $(fio --version), $ROUNDS rounds of ${RUNTIME_S}s, $(nproc) CPUs, kernel $(uname -r)" >&2
LOAD0=$(cut -d' ' -f1-3 /proc/loadavg)
RESULTS=()
for engine in psync libaio io_uring; do
    for qd in 1 32; do
        # psync is synchronous: fio ignores iodepth for it, so QD32 is not a psync case.
        if [ "$engine" = psync ] && [ "$qd" = 32 ]; then continue; fi
        row=$(bench "1dev-$engine-qd$qd" "$engine" "$qd" "$CPU1" 0 "${DEVS[0]}")
        RESULTS+=("1 dev $engine QD$qd|$row")
    done
done
row=$(bench "8dev" "$ENGINE8" 1 "0-$(($(nproc) - 1))" 1 "${DEVS[@]}")
RESULTS+=("8 dev $ENGINE8 QD1 +log|$row")

echo
echo "nines vs fio, 4 KiB random reads on zram, medians of $ROUNDS alternating rounds of ${RUNTIME_S}s"
echo "(1 dev: CPU $CPU1; 8 dev: all CPUs, fio one job per device, nines per-CPU workers, every I/O logged;"
echo " CPU = worker/job threads' usr+sys, proc = whole process; nice $NICE; load average before: $LOAD0)"
header "case"
for r in "${RESULTS[@]}"; do
    label=${r%%|*}
    # shellcheck disable=SC2086
    fmt_row "$label" ${r#*|}
done
row=${RESULTS[-1]#*|}
# shellcheck disable=SC2086
set -- $row
awk -v fc="$2" -v nc="$6" 'BEGIN { printf "8 dev: IOPS per CPU-second: fio %.0f, nines %.0f (ratio %.2f)\n", 1e6 / fc, 1e6 / nc, fc / nc }'
# One line for scripts: nines' IOPS over fio's per case (n/f), and the 8-device IOPS per CPU-second.
result=""
for r in "${RESULTS[@]}"; do
    label=${r%%|*}
    key=$(echo "$label" | awk '{ if ($1 == 8) print "8dev_log"; else print $3 "_" tolower($4) }')
    # shellcheck disable=SC2086
    set -- ${r#*|}
    result+=" ${key}_iops_ratio=$(awk -v f="$1" -v n="$5" 'BEGIN { printf "%.3f", n / f }')"
done
row=${RESULTS[-1]#*|}
# shellcheck disable=SC2086
set -- $row
result+=" 8dev_iops_per_cpu_ratio=$(awk -v fc="$2" -v nc="$6" 'BEGIN { printf "%.3f", fc / nc }')"
# shellcheck disable=SC2086 # one NAME=VALUE per word
bench_result $result
