#!/usr/bin/env bash
# The crash simulator (nines_array::crashsim, issue 38) over many seeds: every layout and fault
# it covers, crash points explored and invariant violations (flushed data lost or wrong, a volume
# that cannot be served again, requests that hang). QUICK=1: 50 seeds x 100 crashes per
# configuration of nines-array's tests/crash_sim.rs and 20 x 100 of nines-io's
# tests/crash_sim_meta.rs (raid0/raid5 through nines serve's start-up: superblocks, bitmap
# resync, D/ND, rebuild, degraded), in under two minutes; else 2,000 x 500 (1e6 per
# configuration, hours on two CPUs). Runs the release test binary (no nines binary: the policies are library code).
# Ends with one line: RESULT crash_points=N violations=M
set -u
. "$(dirname "$0")/lib.sh"
bench_init crash-sim
if [ "${QUICK:-0}" = 1 ]; then seeds=50 points=100 io_seeds=20; else seeds=2000 points=500 io_seeds=2000; fi
bench_scratch W
log="$W/crash-sim.log"
(cd "$ROOT" && NINES_CRASH_SIM_SEEDS=$seeds NINES_CRASH_SIM_POINTS=$points \
  cargo test --release -q -p nines-array --test crash_sim -- --nocapture --test-threads 2) \
  >"$log" 2>&1
rc=$?
# raid0 and raid5 as nines serve starts them (superblocks, bitmap resync, D/ND, rebuild,
# degraded): nines-io's test, whose recovery is the server's start-up.
(cd "$ROOT" && NINES_CRASH_SIM_SEEDS=$io_seeds NINES_CRASH_SIM_POINTS=$points \
  cargo test --release -q -p nines-io --test crash_sim_meta -- --nocapture --test-threads 2) \
  >>"$log" 2>&1
rc2=$?
[ "$rc" = 0 ] && rc=$rc2
# (cargo's progress dots may stand before a line: match inside lines)
grep -o 'crash-sim [^:]*: [0-9]* crash points.*' "$log" >"$W/summary"
grep -o 'crash-sim [^:]*: seed .*' "$log" | head -20
cat "$W/summary"
points_total=$(awk '{s += $3} END {print s + 0}' "$W/summary")
violations=$(awk '{s += $(NF - 1)} END {print s + 0}' "$W/summary")
[ "$points_total" -gt 0 ] || { tail -20 "$log" >&2; die "no crash point was explored (rc $rc)"; }
[ "$rc" = 0 ] || [ "$violations" -gt 0 ] || { tail -20 "$log" >&2; die "the simulator failed (rc $rc)"; }
bench_result crash_points="$points_total" violations="$violations"
