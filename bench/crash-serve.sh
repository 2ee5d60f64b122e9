#!/usr/bin/env bash
# The real-process kill -9 harness (crates/nines/tests/crash_serve.rs, issue 38) for long runs:
# `nines serve` over serial --persist, raid5 and raid0 killed at random moments (while serving,
# right after a FLUSH reply, during start-up, SIGTERM then SIGKILL during shutdown) with busy
# loops loading the host, every flushed block read back after each restart. ROUNDS per layout
# (default 1,000; QUICK=1: 20), HOGS busy loops (3), NINES the binary served (else a release build).
# Ends with one line: RESULT rounds=N acked_writes=N lost=N wrong=N lockouts=N (all layouts).
set -u
. "$(dirname "$0")/lib.sh"
bench_init crash-serve
bench_nines
if [ "${QUICK:-0}" = 1 ]; then rounds=${ROUNDS:-20}; else rounds=${ROUNDS:-1000}; fi
bench_scratch W
log="$W/crash-serve.log"
(cd "$ROOT" && NINES="$NINES" NINES_CRASH_ROUNDS=$rounds NINES_CRASH_HOGS=${HOGS:-3} \
  cargo test --release -q -p nines --test crash_serve -- --nocapture --test-threads 1) \
  >"$log" 2>&1
rc=$?
# (cargo's progress dots may stand before a line: match inside lines)
grep -oE '(lockout:|[a-z0-9]+ (round|final)[^:]*: block).*' "$log" | head -40
grep -o 'crash-serve [a-z0-9]*: RESULT.*' "$log" >"$W/summary"
cat "$W/summary"
sum() { awk -v k="$1" '{ for (i = 1; i <= NF; i++) { split($i, a, "="); if (a[1] == k) s += a[2] } } END { print s + 0 }' "$W/summary"; }
n=$(wc -l <"$W/summary")
[ "$n" -gt 0 ] || { tail -30 "$log" >&2; die "no layout ran (rc $rc)"; }
bench_result rounds="$(sum rounds)" acked_writes="$(sum acked_writes)" lost="$(sum lost)" \
  wrong="$(sum wrong)" lockouts="$(sum lockouts)"
