#!/usr/bin/env bash
# Deterministic cost per simulated I/O of `nines sim` under cachegrind, for speed work on a
# loaded machine where wall time is noise: instructions, L1 data misses, and misses of a
# simulated 2 MiB last-level cache (about this machine's L2) per I/O, as the difference between
# a 100 ms and a 300 ms run (so set-up and preconditioning cancel out), of case 1 of
# bench/sim-speed.sh (64 devices, QD1 4 KiB random reads) on DEVICE (a preset or a TOML, e.g.
# one of bench/variance-devices.sh's). Takes about a minute per call.
#
# Usage: bench/sim-instructions.sh [NINES] DEVICE [SIM ARGS replacing the case-1 workload]
#        (the binary: the first argument when it is an executable file, else $NINES, else a
#        release build)
# Last line: RESULT ir_per_io=... d1_misses_per_io=... ll2m_misses_per_io=... ios=...
set -euo pipefail
. "$(dirname "$0")/lib.sh"
bench_init sim-instructions
if [ $# -ge 2 ] && [ -f "$1" ] && [ -x "$1" ]; then
    NINES=$1
    shift
fi
[ $# -ge 1 ] || {
    echo "usage: $0 [NINES] DEVICE [SIM ARGS]" >&2
    exit 2
}
command -v valgrind >/dev/null || {
    echo "needs valgrind (apt-get install valgrind)" >&2
    exit 2
}
bench_nines
DEVICE="$1"
shift
if [ $# -gt 0 ]; then ARGS=("$@"); else ARGS=(--devices 64 --rw randread --bs 4k --iodepth 1); fi
bench_scratch TMP
for rt in 100ms 300ms; do
    valgrind --tool=cachegrind --cache-sim=yes --LL=2097152,16,64 \
        --cachegrind-out-file="$TMP/cg.$rt" "$NINES" sim --quiet --device "$DEVICE" "${ARGS[@]}" \
        --runtime "$rt" >/dev/null 2>"$TMP/err.$rt" || {
        cat "$TMP/err.$rt" >&2
        exit 1
    }
    # nines sim: ... N I/Os (M device commands, ...
    ios="$(sed -n 's/.* \([0-9]*\) I\/Os (.*/\1/p' "$TMP/err.$rt")"
    # summary: Ir I1mr ILmr Dr D1mr DLmr Dw D1mw DLmw
    echo "$ios $(awk '/^summary:/ { print $2, $6 + $9, $7 + $10 }' "$TMP/cg.$rt")" >>"$TMP/sums"
done
awk 'NR == 1 { i = $1; r = $2; d = $3; l = $4 } NR == 2 { n = $1 - i;
    printf "ir_per_io=%.1f d1_misses_per_io=%.2f ll2m_misses_per_io=%.2f ios=%d\n",
        ($2 - r) / n, ($3 - d) / n, ($4 - l) / n, n }' "$TMP/sums" >"$TMP/result"
# shellcheck disable=SC2046 # one NAME=VALUE per word
bench_result $(cat "$TMP/result")
