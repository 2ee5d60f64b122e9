#!/usr/bin/env bash
# Simulator speed and memory: simulated I/Os per wall-clock second (single-threaded) and peak
# resident memory of `nines sim`, median of $REPEATS runs (default 3), for
#   1. 64 independent afa-m2-2018 devices, QD1 4 KiB random reads;
#   2. the same with a 70/30 read/write mix from steady state (GC active);
#   3. a 1000-device raid0 array (4 KiB stripe, 64 KiB random reads, QD32 on the volume);
#   4. preconditioning each preset to steady state (fill + 2x random overwrite + GC settle);
#   1v, 2v. cases 1 and 2 with every variance source of issue 17 on (afa-m2-2018 plus a 64 MiB
#      mapping cache, 64-point firmware jitter, 1% read retry, two page types, APST, a volatile
#      write cache: bench/variance-devices.sh writes the TOML under a temp dir), with their
#      ratio to cases 1 and 2 of the same run, and with a BASE from before the sources, to
#      BASE's cases 1 and 2 (*_var_vs_base_off: issue 17's goal, no lower speed than before the
#      sources). VARIANCE=0 skips.
# Targets (issue 3): >= 1,000,000 sim I/O/s for case 1, >= 300,000 for case 2, <= 64 MiB per
# device at the default scale, preconditioning <= 10 s.
#
# Usage: bench/sim-speed.sh            (REPEATS=1 bench/sim-speed.sh for a quick look)
#        BASE=/path/to/other/nines bench/sim-speed.sh   runs every case on both binaries, in turn
#        (A B A B ...), and prints this build's speed as a ratio of BASE's (medians).
#        QUICK=1: one run of each case (unless REPEATS is given), shorter simulated times, no
#        preconditioning table.
# Last line: RESULT reads_iops=... mixed_iops=... raid0_iops=... [reads_var_iops=...
# reads_var_ratio=... mixed_var_iops=... mixed_var_ratio=...] [and *_vs_base=... with BASE].
set -euo pipefail
cd "$(dirname "$0")/.."
QUICK="${QUICK:-}"
[ -n "$QUICK" ] && REPEATS="${REPEATS:-1}"
REPEATS="${REPEATS:-3}"
BASE="${BASE:-}"
VARIANCE="${VARIANCE:-1}"
if [ -n "$BASE" ] && [ ! -x "$BASE" ]; then
    echo "BASE=$BASE is not an executable nines binary" >&2
    exit 2
fi

if [ ! -x /usr/bin/time ]; then
    echo "installing GNU time for peak-memory figures" >&2
    apt-get install -y time >/dev/null
fi
. bench/lib.sh
bench_init sim-speed
bench_nines
bench_scratch TMP
# shellcheck source=bench/variance-devices.sh
. bench/variance-devices.sh
variance_devices "$TMP/dev"

median() { sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) print "n/a"; else print v[int((NR + 1) / 2)] }'; }

# run_case LABEL DEVICES ARGS... : prints the medians of sim I/O/s, device commands/s,
# preconditioning seconds, peak RSS (MiB) and RSS per device.
run_case() {
    local label="$1" devices="$2"
    shift 2
    : >"$TMP/iops"; : >"$TMP/cmds"; : >"$TMP/prep"; : >"$TMP/rss"; : >"$TMP/base_iops"
    for _ in $(seq "$REPEATS"); do
        if [ -n "$BASE" ]; then
            /usr/bin/time -v "$BASE" sim --quiet --devices "$devices" "$@" 2>"$TMP/err" >/dev/null || {
                cat "$TMP/err" >&2
                exit 1
            }
            sed -n 's/.* = \([0-9]*\) sim I\/O\/s.*/\1/p' "$TMP/err" >>"$TMP/base_iops"
        fi
        /usr/bin/time -v "$NINES" sim --quiet --devices "$devices" "$@" 2>"$TMP/err" >/dev/null || {
            cat "$TMP/err" >&2
            exit 1
        }
        # nines sim: ... precondition steady in 1.23 s; N I/Os (M device commands, E events) in S s = R sim I/O/s
        sed -n 's/.* \([0-9]*\) I\/Os (\([0-9]*\) device commands.* in \([0-9.]*\) s = \([0-9]*\) sim I\/O\/s.*/\4/p' "$TMP/err" >>"$TMP/iops"
        sed -n 's/.* \([0-9]*\) I\/Os (\([0-9]*\) device commands.* in \([0-9.]*\) s = .*/\2 \3/p' "$TMP/err" |
            awk '{ printf "%.0f\n", $1 / ($2 > 0 ? $2 : 1e-9) }' >>"$TMP/cmds"
        sed -n 's/.*precondition [a-z]* in \([0-9.]*\) s;.*/\1/p' "$TMP/err" >>"$TMP/prep"
        sed -n 's/.*Maximum resident set size (kbytes): \([0-9]*\).*/\1/p' "$TMP/err" >>"$TMP/rss"
    done
    local iops cmds prep rss
    iops="$(median <"$TMP/iops")"
    cmds="$(median <"$TMP/cmds")"
    prep="$(median <"$TMP/prep")"
    rss="$(median <"$TMP/rss")"
    if [ -n "${PREP_ONLY:-}" ]; then
        iops="-"
        cmds="-"
    fi
    local vs=""
    if [ -n "$BASE" ] && [ -z "${PREP_ONLY:-}" ]; then
        base="$(median <"$TMP/base_iops")"
        vs="$(awk -v a="$iops" -v b="$base" 'BEGIN { printf "%.3f", a / b }')"
        LAST_BASE="$base"
    fi
    LAST_IOPS="$iops"
    LAST_VS="$vs"
    printf '%-44s %14s %16s %10s %10s %12s %10s\n' "$label" "$iops" "$cmds" "$prep" \
        "$((rss / 1024))" "$(awk -v r="$rss" -v n="$devices" 'BEGIN { printf "%.1f", r / 1024 / n }')" \
        "${vs:--}"
}

echo "nines sim speed ($(nproc) CPUs, $REPEATS runs each, medians; nines sim is single-threaded)"
echo "command: $NINES sim --quiet --devices N ARGS (see each row)"
[ -n "$BASE" ] && echo "base: $BASE (run in turn with this build; vs base = this build / base, medians)"
printf '%-44s %14s %16s %10s %10s %12s %10s\n' case "sim I/O/s" "dev cmds/s" "prep s" "RSS MiB" "MiB/device" "vs base"
SIM_READS=2s; SIM_MIXED=10s; SIM_RAID=1s
[ -n "$QUICK" ] && { SIM_READS=1s; SIM_MIXED=2s; SIM_RAID=500ms; }
run_case "64 x afa-m2-2018 randread 4k QD1 ($SIM_READS sim)" 64 \
    --device afa-m2-2018 --rw randread --bs 4k --iodepth 1 --runtime "$SIM_READS"
R_READS="$LAST_IOPS"; V_READS="$LAST_VS"; B_READS="${LAST_BASE:-}"
run_case "64 x afa-m2-2018 randrw 70/30 QD1 steady" 64 \
    --device afa-m2-2018 --rw randrw --mix 70 --bs 4k --iodepth 1 --runtime "$SIM_MIXED" --json "$TMP/gc.json"
R_MIXED="$LAST_IOPS"; V_MIXED="$LAST_VS"; B_MIXED="${LAST_BASE:-}"
gc_runs="$(grep -o '"gc_runs": [0-9]*' "$TMP/gc.json" | awk '{ s += $2 } END { print s }')"
moved="$(grep -o '"gc_units_moved": [0-9]*' "$TMP/gc.json" | awk '{ s += $2 } END { print s }')"
echo "    (GC active in the 70/30 case: $gc_runs victim blocks reclaimed, $moved units moved, over 64 devices)"
if [ "$VARIANCE" != 0 ]; then
    # A BASE older than the variance sources refuses their TOML: then these two cases run on
    # this build alone (their on/off ratio needs no base).
    base_all="$BASE"
    if [ -n "$BASE" ] && ! "$BASE" sim --quiet --devices 1 --device "$TMP/dev/all.toml" \
        --rw randread --ios 1 >/dev/null 2>"$TMP/err"; then
        echo "    (BASE refuses the variance TOML, so the two cases below run on this build only: $(head -c 160 "$TMP/err"))"
        BASE=""
    fi
    run_case "case 1, every variance source on" 64 \
        --device "$TMP/dev/all.toml" --rw randread --bs 4k --iodepth 1 --runtime "$SIM_READS"
    R_READS_VAR="$LAST_IOPS"; V_READS_VAR="$LAST_VS"
    run_case "case 2, every variance source on" 64 \
        --device "$TMP/dev/all.toml" --rw randrw --mix 70 --bs 4k --iodepth 1 --runtime "$SIM_MIXED"
    R_MIXED_VAR="$LAST_IOPS"; V_MIXED_VAR="$LAST_VS"
    BASE="$base_all"
    ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f", a / b }'; }
    Q_READS_VAR="$(ratio "$R_READS_VAR" "$R_READS")"
    Q_MIXED_VAR="$(ratio "$R_MIXED_VAR" "$R_MIXED")"
    echo "    (sources on / off, this build: reads $Q_READS_VAR, 70/30 $Q_MIXED_VAR; device: bench/variance-devices.sh all.toml)"
    # Issue 17's goal read against a BASE from before the sources (the figures when it was
    # filed): this build with every source on / BASE with none.
    if [ -n "$B_READS" ] && [ -n "$B_MIXED" ]; then
        W_READS_VAR="$(ratio "$R_READS_VAR" "$B_READS")"
        W_MIXED_VAR="$(ratio "$R_MIXED_VAR" "$B_MIXED")"
        echo "    (sources on, this build / sources off, base: reads $W_READS_VAR, 70/30 $W_MIXED_VAR)"
    fi
fi
run_case "raid0 1000 x afa-m2-2018 64k/4k-stripe QD32" 1000 \
    --device afa-m2-2018 --layout raid0 --stripe 4k --rw randread --bs 64k --iodepth 32 --runtime "$SIM_RAID"
R_RAID="$LAST_IOPS"; V_RAID="$LAST_VS"
if [ -z "$QUICK" ]; then
    echo
    echo "preconditioning to steady state, one device at the default scale (median seconds):"
    for preset in afa-m2-2018 intel-750 z-ssd mqsim-default ttflash-fast17; do
        PREP_ONLY=1 run_case "precondition $preset" 1 --device "$preset" --precondition steady --rw randwrite --ios 1
    done
fi
echo
echo "MQSim (CMU-SAFARI/MQSim), quoted from issue 3, not measured here (no network to fetch it):"
echo "  about 28,000 simulated requests/s for writes and 57,000 for reads; 2.3 GB of memory for one"
echo "  512 GiB SSD; one SSD per process; a GC-heavy 512 GiB run preconditioned for 14 minutes."
result="reads_iops=$R_READS mixed_iops=$R_MIXED raid0_iops=$R_RAID"
[ "$VARIANCE" != 0 ] && result="$result reads_var_iops=$R_READS_VAR reads_var_ratio=$Q_READS_VAR mixed_var_iops=$R_MIXED_VAR mixed_var_ratio=$Q_MIXED_VAR"
[ -n "$BASE" ] && result="$result reads_vs_base=$V_READS mixed_vs_base=$V_MIXED raid0_vs_base=$V_RAID"
[ -n "$BASE" ] && [ "$VARIANCE" != 0 ] && result="$result reads_var_vs_base=${V_READS_VAR:-n/a} mixed_var_vs_base=${V_MIXED_VAR:-n/a}"
[ -n "${W_READS_VAR:-}" ] && result="$result reads_var_vs_base_off=$W_READS_VAR mixed_var_vs_base_off=$W_MIXED_VAR"
# shellcheck disable=SC2086 # one NAME=VALUE per word
bench_result $result
