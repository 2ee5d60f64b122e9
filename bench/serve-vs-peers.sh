#!/usr/bin/env bash
# nines serve against its peers, side by side on the same socket path and the same backend:
#   nines serve   a passthrough volume over a file (page cache)
#   qemu-nbd      the same file (raw, cache=writeback)
#   nbdkit        the memory plugin (the transport floor: no backend work at all)
# driven by fio's nbd engine, 4 KiB randrw 50/50 at QD1 and QD16, servers alternating within
# each round, ROUNDS rounds, medians. Wall-clock figures: run on a quiet machine; the ratios
# against qemu-nbd come from the same run.
#
# Usage: bench/serve-vs-peers.sh   (QUICK=1: 3 rounds of 3 s per cell, under two minutes)
# Environment: NINES (a prebuilt binary; default cargo build --release), RUNTIME (10),
# ROUNDS (5), SIZE (256m).
# Last line: RESULT iops_vs_qemu_nbd=<nines/qemu-nbd IOPS at QD16> p9999_vs_qemu_nbd=<nines/
# qemu-nbd p99.99 at QD16> iops_vs_qemu_nbd_qd1=... p9999_vs_qemu_nbd_qd1=...
set -euo pipefail

RUNTIME=${RUNTIME:-10}
ROUNDS=${ROUNDS:-5}
SIZE=${SIZE:-256m}
if [ "${QUICK:-0}" = 1 ]; then RUNTIME=3; ROUNDS=3; fi

die() { echo "serve-vs-peers: $*" >&2; exit 1; }
for t in fio qemu-nbd nbdkit python3; do
  command -v "$t" >/dev/null || die "$t is missing; run scripts/setup.sh"
done
root="$(cd "$(dirname "$0")/.." && pwd)"
if [ -z "${NINES:-}" ]; then
  cargo build --release -q -p nines --manifest-path "$root/Cargo.toml" || die "build failed"
  NINES="$root/target/release/nines"
fi

work="$(mktemp -d)"
pid=
cleanup() { [ -n "$pid" ] && kill "$pid" 2>/dev/null; wait 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT
sock="$work/nbd.sock"
backend="$work/backend.img"
truncate -s "$SIZE" "$backend"

start() {
  rm -f "$sock"
  case "$1" in
    nines) "$NINES" serve --socket "$sock" "$backend" 2>/dev/null & ;;
    qemu-nbd) qemu-nbd -f raw --cache=writeback --aio=threads --persistent -k "$sock" -e 64 "$backend" 2>/dev/null & ;;
    nbdkit) nbdkit -f -U "$sock" memory "$SIZE" 2>/dev/null & ;;
  esac
  pid=$!
  for _ in $(seq 200); do [ -S "$sock" ] && return; sleep 0.05; done
  die "$1 did not listen"
}
stop() { kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; pid=; }

servers="nines qemu-nbd nbdkit"
for r in $(seq "$ROUNDS"); do
  for qd in 1 16; do
    for s in $servers; do
      start "$s"
      fio --name=serve --ioengine=nbd --uri="nbd+unix:///?socket=$sock" --rw=randrw \
        --rwmixread=50 --bs=4k --iodepth="$qd" --size="$SIZE" --time_based --runtime="$RUNTIME" \
        --percentile_list=50:99:99.99 --output-format=json --output="$work/$s-qd$qd-$r.json" \
        >/dev/null 2>&1 || die "fio against $s failed"
      stop
    done
  done
done

python3 - "$work" "$ROUNDS" <<'PY'
import json, statistics, sys
work, rounds = sys.argv[1], int(sys.argv[2])
def cell(s, qd):
    iops, p = [], []
    for r in range(1, rounds + 1):
        j = json.load(open(f"{work}/{s}-qd{qd}-{r}.json"))["jobs"][0]
        iops.append(j["read"]["iops"] + j["write"]["iops"])
        p.append(max(j[d]["clat_ns"]["percentile"]["99.990000"] for d in ("read", "write")))
    return statistics.median(iops), statistics.median(p) / 1000.0
res = {}
print(f"{'server':<10} {'QD':>3} {'IOPS (median)':>14} {'p99.99 us':>10}")
for qd in (1, 16):
    for s in ("nines", "qemu-nbd", "nbdkit"):
        res[(s, qd)] = cell(s, qd)
        print(f"{s:<10} {qd:>3} {res[(s, qd)][0]:>14.0f} {res[(s, qd)][1]:>10.1f}")
print("goal (issue 13): nines IOPS >= qemu-nbd's, p99.99 <= qemu-nbd's; nbdkit memory is the transport floor")
def ratio(qd, i):
    return res[("nines", qd)][i] / res[("qemu-nbd", qd)][i]
print(f"RESULT iops_vs_qemu_nbd={ratio(16, 0):.3f} p9999_vs_qemu_nbd={ratio(16, 1):.3f} "
      f"iops_vs_qemu_nbd_qd1={ratio(1, 0):.3f} p9999_vs_qemu_nbd_qd1={ratio(1, 1):.3f}")
PY
