#!/usr/bin/env bash
# NVMe passthrough (--engine io_uring-cmd, and -poll, on /dev/ng0n1) against io_uring on the same namespace's
# block device (/dev/nvme0n1), the same workload, in one QEMU guest with an emulated NVMe
# controller (scripts/nvme-guest.sh, issue 41): the I/O counts of each, and the CPU time nines's
# worker spent per I/O (user + system, from the report's workers), A B A B, medians.
# Timings inside a TCG guest are not a device's; the CPU per I/O compares the two kernel paths
# under the same emulation, which is what this is for.
# QUICK=1: 3 rounds of 20,000 I/Os (under two minutes); else 7 of 200,000.
# Ends with one line:
#   RESULT ios_io_uring=N ios_io_uring_cmd=N ios_io_uring_cmd_poll=N cpu_ns_per_io_io_uring=X
#          cpu_ns_per_io_io_uring_cmd=Y cpu_ns_per_io_io_uring_cmd_poll=Z cmd_vs_uring=Y/X
set -u
. "$(dirname "$0")/lib.sh"
bench_init passthrough
bench_nines
if [ "${QUICK:-0}" = 1 ]; then rounds=3 ios=20000; else rounds=7 ios=200000; fi
# Under target/: the guest sees the host's files read-only, but has a /tmp of its own.
mkdir -p "$ROOT/target"
bench_scratch W "$ROOT/target"
out="$W/out"
mkdir -p "$out"
cat >"$W/inguest.sh" <<INNER
set -e
for r in \$(seq 1 $rounds); do
  for e in io_uring io_uring-cmd io_uring-cmd-poll; do
    dev=/dev/ng0n1; [ \$e = io_uring ] && dev=/dev/nvme0n1
    "$NINES" profile \$dev --engine \$e --rw randread --bs 4k --iodepth 16 --ios $ios --cpus 1 \
      --json "\$NINES_GUEST_OUT/\$e-\$r.json" >/dev/null
  done
done
INNER
"$ROOT/scripts/nvme-guest.sh" --ctrl conv:1G --timeout 1200 --out "$out" -- sh "$W/inguest.sh" \
  || die "the guest run failed"
python3 - "$out" "$rounds" <<'PY'
import json, sys, statistics as st
out, rounds = sys.argv[1], int(sys.argv[2])
res = {}
for e in ("io_uring", "io_uring-cmd", "io_uring-cmd-poll"):
    ios, cpu = [], []
    for r in range(1, rounds + 1):
        j = json.load(open(f"{out}/{e}-{r}.json"))
        n = sum(d["read"]["ios"] + d["write"]["ios"] for d in j["devices"])
        s = sum(w["usr_cpu_s"] + w["sys_cpu_s"] for w in j["workers"])
        ios.append(n)
        cpu.append(s * 1e9 / n)
        print(f"{e:13s} round {r}: {n} I/Os, {s * 1e9 / n:.0f} ns CPU per I/O")
    res[e] = (st.median(ios), st.median(cpu))
u, c, p = res["io_uring"], res["io_uring-cmd"], res["io_uring-cmd-poll"]
print(f"RESULT ios_io_uring={u[0]:.0f} ios_io_uring_cmd={c[0]:.0f} ios_io_uring_cmd_poll={p[0]:.0f} "
      f"cpu_ns_per_io_io_uring={u[1]:.0f} cpu_ns_per_io_io_uring_cmd={c[1]:.0f} "
      f"cpu_ns_per_io_io_uring_cmd_poll={p[1]:.0f} cmd_vs_uring={c[1] / u[1]:.3f}",
      file=open(f"{out}/result", "w"))
PY
[ -s "$out/result" ] || die "no result"
read -r line <"$out/result"
bench_result ${line#RESULT }
