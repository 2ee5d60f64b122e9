#!/usr/bin/env bash
# nines serve against its peers, the issue's goal table (issue 30): on the same file (SIZE of
# random data, in the page cache), fio's nbd engine, servers alternating within each round,
# ROUNDS rounds, medians of IOPS and p99.99:
#   4 KiB randrw 70/30 at QD16: nines serve vs qemu-nbd (raw, cache=writeback, aio=threads)
#                               (goal: nines IOPS >= 1.5x qemu-nbd's)
#   4 KiB randread at QD1:      nines serve vs nbdkit's file plugin
#                               (goal: nines IOPS >= 1.0x nbdkit file's)
# Wall-clock figures: run on a quiet machine; ratios come from the same run, servers
# alternating, so a loaded machine's drift falls on all of them alike.
#
# End to end (E2E=1): fio through nines serve on a RAID5 D/ND volume of emulated SSDs
# (EMU_MEMBERS x emu:EMU_PRESET:EMU_SIZE, aged to steady state as the emulator does for writing
# workloads) against a passthrough export of one such emulated member and the transport floor
# (nbdkit memory), 4 KiB randrw 70/30 at QD EMU_QD, alternating, medians: what the tail-cutting
# volume gives a real NBD client, and what the server costs on top of the floor.
#
# Usage: bench/serve-vs-peers.sh   (QUICK=1: 3 rounds of 2 s per cell, no end-to-end part,
# under two minutes)
# Environment: NINES (a prebuilt binary; default cargo build --release), RUNTIME (10),
# ROUNDS (5), SIZE (256m), EMU_PRESET (p4600), EMU_SIZE (1g), EMU_MEMBERS (4), EMU_QD (16),
# E2E (1, 0 with QUICK=1; 0 skips the end-to-end part).
# Last line: RESULT qd16_7030_vs_qemu_nbd=<nines/qemu-nbd IOPS> qd16_7030_p9999_vs_qemu_nbd=
# <nines/qemu-nbd p99.99, lower is better> qd1_randread_vs_nbdkit_file=<nines/nbdkit IOPS>
# qd1_randread_p9999_vs_nbdkit_file=... nines_qd16_7030_iops=... qemu_nbd_qd16_7030_iops=...
# nines_qd1_randread_iops=... nbdkit_file_qd1_randread_iops=...
# [e2e_dnd_read_p9999_us=... e2e_one_read_p9999_us=... e2e_floor_read_p9999_us=...
# e2e_dnd_iops=... e2e_one_iops=... e2e_floor_iops=...]
set -euo pipefail

RUNTIME=${RUNTIME:-10}
ROUNDS=${ROUNDS:-5}
SIZE=${SIZE:-256m}
EMU_PRESET=${EMU_PRESET:-p4600}
EMU_SIZE=${EMU_SIZE:-1g}
EMU_MEMBERS=${EMU_MEMBERS:-4}
EMU_QD=${EMU_QD:-16}
if [ "${QUICK:-0}" = 1 ]; then RUNTIME=2; ROUNDS=3; E2E=${E2E:-0}; fi
E2E=${E2E:-1}

die() { echo "serve-vs-peers: $*" >&2; exit 1; }
for t in fio qemu-nbd nbdkit python3; do
  command -v "$t" >/dev/null || die "$t is missing; run scripts/setup.sh"
done
. "$(dirname "$0")/lib.sh"
bench_init serve-vs-peers
bench_nines

bench_scratch work
pid=
cleanup() { [ -n "$pid" ] && kill "$pid" 2>/dev/null; wait 2>/dev/null || true; }
bench_on_exit cleanup
sock="$work/nbd.sock"
backend="$work/backend.img"
# Real data (not a sparse file, whose reads are of holes), then in the page cache.
python3 - "$backend" "$SIZE" <<'PY'
import os, sys
units = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
s = sys.argv[2].lower()
size = int(s[:-1]) * units[s[-1]] if s[-1] in units else int(s)
with open(sys.argv[1], "wb") as f:
    chunk = os.urandom(1 << 20)
    for i in range(size // len(chunk)):
        f.write(chunk[i % 251:] + chunk[:i % 251])
PY
cat "$backend" >/dev/null

emu_members=()
for _ in $(seq "$EMU_MEMBERS"); do emu_members+=("emu:$EMU_PRESET:$EMU_SIZE"); done

start() {
  rm -f "$sock"
  case "$1" in
    nines) "$NINES" serve --socket "$sock" "$backend" 2>/dev/null & ;;
    e2e-dnd) "$NINES" serve --socket "$sock" --layout raid5 --policy dnd "${emu_members[@]}" 2>"$work/$1.err" & ;;
    e2e-one) "$NINES" serve --socket "$sock" "emu:$EMU_PRESET:$EMU_SIZE" 2>"$work/$1.err" & ;;
    e2e-floor) nbdkit -f -U "$sock" memory "$SIZE" 2>/dev/null & ;;
    qemu-nbd) qemu-nbd -f raw --cache=writeback --aio=threads --persistent -k "$sock" -e 64 "$backend" 2>/dev/null & ;;
    nbdkit-file) nbdkit -f -U "$sock" file "file=$backend" 2>/dev/null & ;;
  esac
  pid=$!
  # Emulated members are aged before the server listens: allow minutes.
  for _ in $(seq 6000); do
    [ -S "$sock" ] && return
    kill -0 "$pid" 2>/dev/null || die "$1 exited: $(cat "$work/$1.err" 2>/dev/null)"
    sleep 0.05
  done
  die "$1 did not listen"
}
stop() { kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; pid=; }

# fio on the nbd engine: job name, fio's --rw, QD, output.
run_fio() {
  fio --name=serve --ioengine=nbd --uri="nbd+unix:///?socket=$sock" --rw="$2" \
    --rwmixread=70 --bs=4k --iodepth="$3" --size="$SIZE" --time_based --runtime="$RUNTIME" \
    --percentile_list=50:99:99.99 --output-format=json --output="$4" \
    >/dev/null 2>&1 || die "fio ($2, QD$3) against $1 failed"
}

for r in $(seq "$ROUNDS"); do
  for s in nines qemu-nbd; do
    start "$s"; run_fio "$s" randrw 16 "$work/$s-qd16-$r.json"; stop
  done
  for s in nines nbdkit-file; do
    start "$s"; run_fio "$s" randread 1 "$work/$s-qd1-$r.json"; stop
  done
done

if [ "$E2E" = 1 ]; then
  for r in $(seq "$ROUNDS"); do
    for s in e2e-dnd e2e-one e2e-floor; do
      start "$s"
      fio --name=serve --ioengine=nbd --uri="nbd+unix:///?socket=$sock" --rw=randrw \
        --rwmixread=70 --bs=4k --iodepth="$EMU_QD" --size="$SIZE" --time_based --runtime="$RUNTIME" \
        --percentile_list=50:99:99.99 --output-format=json --output="$work/$s-$r.json" \
        >/dev/null 2>&1 || die "fio against $s failed"
      stop
    done
  done
fi

python3 - "$work" "$ROUNDS" "$E2E" "$EMU_MEMBERS" "$EMU_PRESET" "$EMU_SIZE" "$EMU_QD" <<'PY'
import json, statistics, sys
work, rounds, e2e = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1"
members, preset, size, qd = sys.argv[4:8]
def cell(s, qd):
    iops, p = [], []
    for r in range(1, rounds + 1):
        j = json.load(open(f"{work}/{s}-qd{qd}-{r}.json"))["jobs"][0]
        iops.append(j["read"]["iops"] + j["write"]["iops"])
        p.append(max(j[d]["clat_ns"]["percentile"]["99.990000"]
                     for d in ("read", "write") if j[d]["total_ios"] > 0))
    return statistics.median(iops), statistics.median(p) / 1000.0, iops
res = {}
print(f"{'server':<12} {'workload':<22} {'IOPS (median)':>14} {'p99.99 us':>10}  rounds")
for s, depth, w in (("nines", 16, "randrw 70/30 QD16"), ("qemu-nbd", 16, "randrw 70/30 QD16"),
                    ("nines", 1, "randread QD1"), ("nbdkit-file", 1, "randread QD1")):
    res[(s, depth)] = cell(s, depth)
    rounds_iops = " ".join(f"{x:.0f}" for x in res[(s, depth)][2])
    print(f"{s:<12} {w:<22} {res[(s, depth)][0]:>14.0f} {res[(s, depth)][1]:>10.1f}  {rounds_iops}")
print("goals (issue 30): QD16 70/30 IOPS >= 1.5x qemu-nbd's; QD1 randread IOPS >= 1.0x nbdkit file's")
def ratio(peer, qd, i):
    return res[("nines", qd)][i] / res[(peer, qd)][i]
line = (f"RESULT qd16_7030_vs_qemu_nbd={ratio('qemu-nbd', 16, 0):.3f}"
        f" qd16_7030_p9999_vs_qemu_nbd={ratio('qemu-nbd', 16, 1):.3f}"
        f" qd1_randread_vs_nbdkit_file={ratio('nbdkit-file', 1, 0):.3f}"
        f" qd1_randread_p9999_vs_nbdkit_file={ratio('nbdkit-file', 1, 1):.3f}"
        f" nines_qd16_7030_iops={res[('nines', 16)][0]:.0f}"
        f" qemu_nbd_qd16_7030_iops={res[('qemu-nbd', 16)][0]:.0f}"
        f" nines_qd1_randread_iops={res[('nines', 1)][0]:.0f}"
        f" nbdkit_file_qd1_randread_iops={res[('nbdkit-file', 1)][0]:.0f}")
if e2e:
    names = {"e2e-dnd": f"raid5 D/ND of {members} x emu:{preset}:{size}",
             "e2e-one": f"passthrough emu:{preset}:{size}",
             "e2e-floor": "nbdkit memory (floor)"}
    print()
    print(f"end to end: fio nbd 4 KiB randrw 70/30 QD{qd}, medians of {rounds} rounds")
    print(f"{'export':<40} {'IOPS':>8} {'read p50 us':>12} {'read p99 us':>12} {'read p99.99 us':>15}")
    e = {}
    for s in ("e2e-dnd", "e2e-one", "e2e-floor"):
        iops, p50, p99, p9999 = [], [], [], []
        for r in range(1, rounds + 1):
            j = json.load(open(f"{work}/{s}-{r}.json"))["jobs"][0]
            iops.append(j["read"]["iops"] + j["write"]["iops"])
            p = j["read"]["clat_ns"]["percentile"]
            p50.append(p["50.000000"]); p99.append(p["99.000000"]); p9999.append(p["99.990000"])
        m = statistics.median
        e[s] = (m(iops), m(p50) / 1e3, m(p99) / 1e3, m(p9999) / 1e3)
        print(f"{names[s]:<40} {e[s][0]:>8.0f} {e[s][1]:>12.1f} {e[s][2]:>12.1f} {e[s][3]:>15.1f}")
    line += (f" e2e_dnd_read_p9999_us={e['e2e-dnd'][3]:.1f} e2e_one_read_p9999_us={e['e2e-one'][3]:.1f}"
             f" e2e_floor_read_p9999_us={e['e2e-floor'][3]:.1f} e2e_dnd_iops={e['e2e-dnd'][0]:.0f}"
             f" e2e_one_iops={e['e2e-one'][0]:.0f} e2e_floor_iops={e['e2e-floor'][0]:.0f}")
print(line)
PY
