#!/usr/bin/env bash
# Checks that two nines binaries simulate the same thing: byte-identical `nines sim --json`
# reports for afa-m2-2018 with each of issue 17's variance sources on (bench/variance-devices.sh),
# with all of them, and with none, over reads, a 70/30 mix from steady state (GC, mapping-cache
# write-backs), reads with think time (power-state exits), and raid5 / serial volumes.
# For changes that must not change results (speed work). Simulated results are deterministic.
#
# Usage: bench/sim-identical.sh A [B]    (two nines binaries; e.g. a release build of main and
#        target/release/nines; B defaults to $NINES, else a release build of this tree).
#        Last line: RESULT runs=N identical=N differ=N
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
bench_init sim-identical
[ $# -ge 1 ] && [ $# -le 2 ] && [ -x "$1" ] || {
    echo "usage: $0 NINES_A [NINES_B] (two nines binaries; B defaults to \$NINES or a build)" >&2
    exit 2
}
A="$1"
[ $# -eq 2 ] && NINES=$2
bench_nines
B=$NINES
bench_scratch TMP
# shellcheck source=bench/variance-devices.sh
. bench/variance-devices.sh
variance_devices "$TMP/dev"

workloads=(
    "--devices 4 --rw randread --bs 4k --iodepth 1 --runtime 200ms"
    "--devices 2 --rw randrw --mix 70 --bs 4k --iodepth 4 --runtime 300ms"
    "--devices 2 --rw randrw --mix 70 --bs 16k --iodepth 2 --runtime 200ms --precondition fill"
    "--devices 2 --job idle:rw=randread,bs=4k,iodepth=1,thinktime=3ms --job busy:rw=randwrite,bs=8k,iodepth=2,thinktime=150ms --runtime 1s"
    "--devices 4 --layout raid5 --rw randrw --mix 50 --bs 16k --iodepth 8 --runtime 100ms"
    "--devices 3 --layout serial --rw randwrite --bs 4k --iodepth 4 --runtime 100ms"
)
runs=0
same=0
differ=0
for dev in afa-m2-2018 "$TMP"/dev/*.toml; do
    for w in "${workloads[@]}"; do
        # shellcheck disable=SC2086 # the workload is a list of arguments
        "$A" sim --quiet --device "$dev" $w --seed 7 --json "$TMP/a.json" >/dev/null 2>"$TMP/a.err" || {
            cat "$TMP/a.err" >&2
            exit 1
        }
        # shellcheck disable=SC2086
        "$B" sim --quiet --device "$dev" $w --seed 7 --json "$TMP/b.json" >/dev/null 2>"$TMP/b.err" || {
            cat "$TMP/b.err" >&2
            exit 1
        }
        runs=$((runs + 1))
        if cmp -s "$TMP/a.json" "$TMP/b.json"; then
            same=$((same + 1))
        else
            differ=$((differ + 1))
            echo "DIFFER: $(basename "$dev") $w" >&2
            diff "$TMP/a.json" "$TMP/b.json" | head -10 >&2 || true
        fi
    done
done
bench_result "runs=$runs" "identical=$same" "differ=$differ"
[ "$differ" -eq 0 ]
