#!/usr/bin/env bash
# Hostile runs against a nines binary (issue 15): cases per class, and how many failed. A case
# fails when nines panics (exit 101), aborts or dies on a signal (exit >= 128, SIGPIPE included),
# accepts what it must refuse, replaces a device node, leaves outputs behind a failure, or prints
# Rust debug structures. Compare binaries: before and after a fix.
#   bench/hostile.sh [NINES_BINARY]   (default $NINES, else a dev build: debug assertions and
#   overflow checks find more; root needed for the zram class)
# Ends with one line: RESULT tried=N failed=M <class>=failed/tried ...
#
# Matrix mode (issue 39): MATRIX=1 bench/hostile.sh [NINES_BINARY] runs the hostile matrix that
# crates/nines/tests/hostile_matrix.rs generates from the clap definitions (every path flag on
# every hostile destination, every number flag on every extreme, every verb signalled at 19
# moments; 10,267 cases, about 12 minutes on 2 CPUs), all of it (QUICK=1: the first 1000 cases of
# its shuffled order, about a minute), against that binary, printing each failure,
# and ends with exactly: RESULT runs=N failures=M
set -u
. "$(dirname "$0")/lib.sh"
bench_init hostile
[ $# -ge 1 ] && NINES=$1
bench_nines debug
if [ "${MATRIX:-0}" = 1 ]; then
  if [ "${QUICK:-0}" = 1 ]; then sel=(NINES_HOSTILE_CASES=1000); else sel=(NINES_HOSTILE_ALL=1); fi
  bench_scratch MLOG /var/tmp
  # The test fails (non-zero) when a case fails: the counts are read from its summary line.
  (cd "$ROOT" && env "${sel[@]}" NINES="$NINES" cargo test -q -p nines --test hostile_matrix \
    -- --nocapture 2>&1) | tee "$MLOG/out" | grep -E '^hostile matrix: ' >&2
  summary=$(grep -E '^hostile matrix: runs=' "$MLOG/out" | tail -1)
  [ -n "$summary" ] || { tail -20 "$MLOG/out" >&2; die "the matrix test printed no summary"; }
  runs=$(sed -E 's/.*runs=([0-9]+).*/\1/' <<<"$summary")
  fails=$(sed -E 's/.*failures=([0-9]+).*/\1/' <<<"$summary")
  bench_result "runs=$runs" "failures=$fails"
  exit 0
fi
BIN=$NINES
PRESET="$ROOT/crates/nines-flash/presets/afa-m2-2018.toml"
bench_scratch W /var/tmp
cd "$W"
export TMPDIR="$W"
declare -A tried failed
order=()
record() { # class ok(0/1) description
  [[ -v tried[$1] ]] || { tried[$1]=0; failed[$1]=0; order+=("$1"); }
  tried[$1]=$((tried[$1] + 1))
  if [ "$2" != 0 ]; then failed[$1]=$((failed[$1] + 1)); echo "  FAIL [$1] $3"; fi
}
"$BIN" sim --quiet --ios 2000 --json s.json --lat-log s.lat --hdr-log s.hlog >/dev/null 2>&1

# 1. Closed pipes: stdout (and stderr) closed; the verb must exit 0 and write its file.
pipe_case() { # file args...
  local f=$1; shift
  for closed_err in 0 1; do
    rm -f "$f"; [ "$(dirname "$f")" = . ] || rm -rf "$(dirname "$f")"
    if [ $closed_err = 1 ]; then
      ( exec 2>&-; "$BIN" "$@" | true; exit "${PIPESTATUS[0]}" ); rc=$?
    else
      "$BIN" "$@" 2>/dev/null | true; rc=${PIPESTATUS[0]}
    fi
    [ "$rc" = 0 ] && { [ "$f" = - ] || [ -e "$f" ]; }; record pipe $? "$* (stderr closed: $closed_err) rc=$rc"
  done
}
pipe_case p.json profile --ios 2000 --json p.json
pipe_case s2.json sim --ios 2000 --json s2.json
pipe_case - log s.lat
pipe_case c.html compare s.json s.json -o c.html
pipe_case d.json doctor --json d.json
pipe_case m.json merge s.json -o m.json
pipe_case sw/sweep.json sweep --sim afa-m2-2018 --qd 1,2 -o sw -- --ios 200 --precondition none
pipe_case rp.html report s.json -o rp.html
pipe_case fl/merged.json fleet --engine local --tasks 1 --out fl -- sim --ios 200
pipe_case tp.json tune --plan -o tp.json loop0
# serve: stdout (and stderr) closed, SIGTERM; exit 0 and its report written.
for closed_err in 0 1; do
  rm -f sv.json nbd.sock
  if [ $closed_err = 1 ]; then
    "$BIN" serve --size 1m --json sv.json --socket nbd.sock member.img > >(true) 2>&- &
  else
    "$BIN" serve --size 1m --json sv.json --socket nbd.sock member.img > >(true) 2>/dev/null &
  fi
  spid=$!
  # SIGTERM as soon as the socket appears, as a supervisor would.
  for _ in $(seq 1000); do [ -S nbd.sock ] && break; sleep 0.01; done
  kill -TERM $spid; wait $spid; rc=$?
  [ $rc = 0 ] && [ -e sv.json ]; record pipe $? "serve (stderr closed: $closed_err) rc=$rc"
done

# 1b. tune --apply/--revert on a fixture root (a copy of the files the live plan would change):
# apply changes them as planned, revert restores them, bad plans and records change nothing.
if "$BIN" tune --plan -o live.json loop0 >/dev/null 2>&1; then
  mapfile -t paths < <(python3 -c 'import json,sys;[print(c["path"]) for c in json.load(open(sys.argv[1]))["changes"]]' live.json)
  for p in "${paths[@]}"; do mkdir -p "fx$(dirname "$p")"; cat "$p" > "fx$p"; done
  cp -r fx fx.orig
  "$BIN" tune --root fx --apply live.json --state st.json >/dev/null 2>&1; rc=$?
  ok=0; for p in "${paths[@]}"; do
    want=$(python3 -c 'import json,sys;print([c["value"] for c in json.load(open(sys.argv[1]))["changes"] if c["path"]==sys.argv[2]][0])' live.json "$p")
    [ "$(cat "fx$p")" = "$want" ] || ok=1
  done
  [ $rc = 0 ] && [ -e st.json ] && [ ${#paths[@]} -gt 0 ] && [ $ok = 0 ]; record tune $? "apply on the fixture rc=$rc"
  "$BIN" tune --root fx --revert st.json >/dev/null 2>&1; rc=$?
  # As the kernel prints it after the write: "none [mq-deadline]" comes back as "mq-deadline".
  norm() { sed -E 's/.*\[([^]]*)\].*/\1/' "$1"; }
  ok=0; for p in "${paths[@]}"; do [ "$(norm "fx$p")" = "$(norm "fx.orig$p")" ] || ok=1; done
  [ $rc = 0 ] && [ $ok = 0 ]; record tune $? "revert on the fixture rc=$rc"
  rm -rf fx; cp -r fx.orig fx
  head -c 100 live.json > cut.json
  sed 's#/sys/block/#/sys/block/nosuch#' live.json > foreign.json
  for bad in cut.json foreign.json missing.json; do
    rm -f st2.json
    out=$("$BIN" tune --root fx --apply $bad --state st2.json 2>&1 >/dev/null); rc=$?
    [ $rc = 1 ] && [ ! -e st2.json ] && diff -r fx fx.orig >/dev/null && [ "$(wc -l <<<"$out")" = 1 ]
    record tune $? "apply $bad rc=$rc: $out"
  done
  out=$("$BIN" tune --root fx --revert none.json 2>&1 >/dev/null); rc=$?
  [ $rc = 1 ] && diff -r fx fx.orig >/dev/null; record tune $? "revert of no record rc=$rc: $out"
fi

# 1c. Fuzzed inputs nines made itself (device TOML, run JSON for report/compare/merge, HDR log,
# placement plan), mutated (byte flip, truncation, line deletion, hostile number; seeded): exit
# 0 or 1 within 60 s, a failure prints no debug structure and creates no output.
N_FUZZ=${HOSTILE_FUZZ:-20}
"$BIN" tune --plan -o fplan.json loop0 >/dev/null 2>&1
mutate() { # seed in out
  python3 - "$@" <<'PY'
import random, re, sys
r = random.Random(int(sys.argv[1])); b = bytearray(open(sys.argv[2], 'rb').read())
k = r.randrange(4)
if k == 0 and b: b[r.randrange(len(b))] ^= r.randrange(1, 256)
elif k == 1: b = b[:r.randrange(max(1, len(b)))]
elif k == 2:
    ls = b.split(b'\n'); del ls[r.randrange(len(ls))]; b = bytearray(b'\n'.join(ls))
else:
    sp = [m.span() for m in re.finditer(rb'[0-9][0-9._]*', bytes(b))]
    if sp:
        s, e = r.choice(sp)
        b[s:e] = r.choice([b'18446744073709551616', b'-1', b'NaN', b'1e308', b'0', b'4294967295'])
open(sys.argv[3], 'wb').write(b)
PY
}
fuzz_case() { # class input output args... (args use IN for the mutated file)
  local cls=$1 in=$2 o=$3; shift 3
  for i in $(seq "$N_FUZZ"); do
    rm -f "$o" fz.in; mutate "$i" "$in" fz.in
    out=$(timeout 60 "$BIN" "$@" 2>&1 >/dev/null); rc=$?
    { [ $rc = 0 ] || { [ $rc = 1 ] && [ ! -e "$o" ] && ! grep -q -e "panicked" -e " { " <<<"$out"; }; }
    record "$cls" $? "seed $i: $* rc=$rc: $out"
  done
}
[ -f "$PRESET" ] && fuzz_case fuzz-toml "$PRESET" fo.json sim --quiet --ios 50 --precondition none --device fz.in --json fo.json
fuzz_case fuzz-json s.json fo.html report fz.in -o fo.html
fuzz_case fuzz-json s.json fo.html compare s.json fz.in -o fo.html
fuzz_case fuzz-json s.json fo.json merge s.json fz.in -o fo.json
fuzz_case fuzz-hdr s.hlog fo.html report s.json --hdr-log fz.in -o fo.html
if [ -s fplan.json ]; then
  rm -rf fxp; mkdir fxp; cp -r fx/. fxp/ 2>/dev/null
  fuzz_case fuzz-plan fplan.json fst.json tune --root fxp --apply fz.in --state fst.json
fi

# 2. Outputs that are not regular files: the node must survive.
mknod full c 1 7
for args in "log s.lat -o full" "report s.json -o full" "compare s.json s.json -o full" \
  "doctor --json full" "doctor --capture full" "sim --quiet --ios 100 --json full" \
  "sim --quiet --ios 100 --lat-log full" "merge s.json -o full" "profile --quiet --ios 100 --json full"; do
  "$BIN" $args >/dev/null 2>&1
  [ -c full ]; r=$?; record nonregular $r "$args replaced the device node"
  [ -c full ] || { rm -f full; mknod full c 1 7; }
done

# 3. Sizes that abort or fill the disk: must be refused with exit 1.
for args in "sim --quiet --ios 10 --host-cpus 4294967295" "sim --quiet --ios 10 --memory-budget 1p" \
  "sim --quiet --ios 10 --memory-budget 1e" "profile --quiet --ios 10 --size 1p" \
  "profile --quiet --ios 10 --size 100t"; do
  timeout 60 "$BIN" $args >/dev/null 2>&1; rc=$?
  [ $rc = 1 ] || [ $rc = 2 ]; record alloc $? "$args rc=$rc"
done

# 3b. Sizes inside files, memory beyond MemAvailable, unbounded simulations: refused with exit 1
# at once (not SIGABRT, not a run of hours), and a simulation stopped by SIGTERM reports (130;
# SIGTERM because a background job of a script ignores SIGINT).
if [ -f "$PRESET" ]; then
  sed 's/^write_buffer_bytes = .*/write_buffer_bytes = 18000000000000000000/' "$PRESET" > wb.toml
  timeout 60 "$BIN" sim --quiet --ios 10 --device wb.toml >/dev/null 2>&1; rc=$?
  [ $rc = 1 ]; record bounds $? "device TOML write_buffer_bytes huge rc=$rc"
fi
for args in "profile --quiet --ios 10 --memory-budget 1p emu:afa-m2-2018:64m" \
  "sim --quiet --ios 1000000000000" "sim --quiet --runtime 1000000s" \
  "sim --quiet --device null:1g --completion none --runtime 10ms"; do
  timeout 20 "$BIN" $args >/dev/null 2>&1; rc=$?
  [ $rc = 1 ]; record bounds $? "$args rc=$rc"
done
out=$("$BIN" sim --quiet --ios 10 --device null:64k --devices 2 --layout raid0 --stripe 1m 2>&1); rc=$?
[ $rc = 1 ] && ! grep -q -- "--offset" <<<"$out"; record bounds $? "--stripe larger than a device: $out"
"$BIN" sim --quiet --precondition none --runtime 1000s --json int.json >/dev/null 2>&1 &
pid=$!; sleep 3; kill -TERM $pid; wait $pid; rc=$?
[ $rc = 130 ] && [ -e int.json ]; record bounds $? "SIGTERM to sim rc=$rc"
kill -9 $pid 2>/dev/null

# 4. Failed runs leave no outputs; the same file twice is refused.
"$BIN" sim --quiet --ios 100 --json same.json --fio-json same.json >/dev/null 2>&1; rc=$?
[ $rc != 0 ] && [ ! -e same.json ]; record outputs $? "sim --json X --fio-json X rc=$rc"
"$BIN" profile --quiet --ios 100 --json same2.json --fio-json same2.json >/dev/null 2>&1; rc=$?
[ $rc != 0 ] && [ ! -e same2.json ]; record outputs $? "profile --json X --fio-json X rc=$rc"
mkdir -p blocker.d; touch pngblock
"$BIN" report s.json -o r.html --png pngblock >/dev/null 2>&1
[ ! -e r.html ]; record outputs $? "report left HTML when --png failed"
"$BIN" compare s.json s.json -o c2.html --png pngblock >/dev/null 2>&1
[ ! -e c2.html ]; record outputs $? "compare left HTML when --png failed"
echo x > .t.json.nines-partial-2147483646
"$BIN" sim --quiet --ios 100 --json t.json >/dev/null 2>&1
[ ! -e .t.json.nines-partial-2147483646 ]; record outputs $? "stale partial of a dead pid kept"
"$BIN" sweep --qd 1 --rws randread -o badsweep -- /nonexistent/dev >/dev/null 2>&1
[ ! -e badsweep/sweep.json ]; record outputs $? "a sweep whose every point failed wrote sweep.json"

# 4b. Nothing written may destroy what the user did not name for writing (issue 29): outputs that
# are symlinks, inputs or targets; members twice; endless inputs; sizes that crashed or wrapped.
echo old > real.json; ln -sf real.json link.json
"$BIN" sim --quiet --ios 100 --json link.json >/dev/null 2>&1; rc=$?
[ $rc = 0 ] && [ -L link.json ] && grep -q '"schema"' real.json; record destroy $? "--json onto a symlink rc=$rc"
"$BIN" sim --quiet --ios 100 --json /dev/stdout > so.txt 2>/dev/null; rc=$?
[ $rc = 0 ] && [ -L /dev/stdout ] && grep -q '"schema"' so.txt; record destroy $? "--json /dev/stdout > file rc=$rc"
# A binary that replaced the system's /dev/stdout link: put it back at once.
[ -L /dev/stdout ] || { ln -s /proc/self/fd/1 /dev/.stdout.hostile && mv -T /dev/.stdout.hostile /dev/stdout; }
truncate -s 16m t29.img; h29=$(sha256sum < t29.img)
# Copies, so that an old binary destroying them does not spoil the other classes.
for args in "profile --quiet --ios 100 --json t29.img t29.img" "profile --quiet --ios 100 --lat-log t29.img t29.img" \
  "report v29.json -o v29.json" "compare v29.json v29.json -o v29.json" "log v29.lat -o v29.lat" "merge v29.json -o v29.json --replace"; do
  cp s.json v29.json; cp s.lat v29.lat; hs=$(sha256sum < v29.json); hl=$(sha256sum < v29.lat)
  "$BIN" $args >/dev/null 2>&1; rc=$?
  [ $rc = 1 ] && [ "$(sha256sum < t29.img)" = "$h29" ] && [ "$(sha256sum < v29.json)" = "$hs" ] && [ "$(sha256sum < v29.lat)" = "$hl" ]
  record destroy $? "$args rc=$rc"
done
truncate -s 8m m29a.img m29b.img; ln -sf m29a.img m29l.img
for args in "profile --quiet --ios 50 --layout raid0 m29a.img ./m29a.img" "serve --socket s29.sock --layout raid5 m29a.img m29l.img m29b.img" \
  "rebuild --member 2 m29a.img m29a.img m29b.img" "profile --quiet --ios 50 --rw randwrite --layout raid0 --buffer m29a.img m29a.img m29b.img"; do
  out=$("$BIN" $args 2>&1 >/dev/null); rc=$?
  [ $rc = 1 ] && grep -q "are the same file" <<<"$out"; record destroy $? "$args rc=$rc: $out"
done
for args in "report /dev/zero" "compare s.json /dev/zero" "merge s.json /dev/zero -o z.json" "sim --quiet --device /dev/zero" \
  "sim --quiet --job /dev/zero" "sim --calibrate /dev/zero --calibrate-out z.toml" "tune --root . --apply /dev/zero --state z.json"; do
  timeout 20 "$BIN" $args >/dev/null 2>&1; rc=$?
  [ $rc = 1 ]; record destroy $? "$args rc=$rc"
done
timeout 60 "$BIN" sim --quiet --ios 10 --layout raid5 --devices 3 --chunk 0 >/dev/null 2>&1; rc=$?
[ $rc = 2 ]; record destroy $? "sim --chunk 0 rc=$rc (bad usage)"
for args in "sim --quiet --ios 10 --layout raid0 --devices 2 --stripe 0" \
  "profile --quiet --ios 10 --iodepth 1024 --bs 64m t29.img" "merge s.json s.json -o d29.json"; do
  timeout 60 "$BIN" $args >/dev/null 2>&1; rc=$?
  [ $rc = 1 ]; record destroy $? "$args rc=$rc"
done
if [ -f "$PRESET" ]; then
  sed 's/^read_ns = .*/read_ns = 18446744073709551615/' "$PRESET" > rns.toml
  "$BIN" sim --quiet --ios 10 --device rns.toml >/dev/null 2>&1; rc=$?
  [ $rc = 1 ]; record destroy $? "device TOML read_ns = u64::MAX rc=$rc"
fi
"$BIN" sweep --sim afa-m2-2018 --qd 1,5000 -o qd29 -- --ios 100 >/dev/null 2>&1; rc=$?
[ $rc = 1 ] && [ ! -e qd29 ]; record destroy $? "sweep --qd 5000 rc=$rc (or left its folder)"
# SIGINT (ignored by background jobs unless handled) during the first point: forwarded, the point
# stops, nothing finished so nothing is left, exit 130; no child keeps running.
# Each in a session of its own (setsid), so that what an old binary leaves running is killed
# with its process group afterwards; the signal itself goes to the verb's pid only.
stop_after() { # pid signal: signal, wait up to 60 s, then kill the group; sets rc
  kill -"$2" "$1"
  for _ in $(seq 600); do kill -0 "$1" 2>/dev/null || break; sleep 0.1; done
  kill -9 "$1" 2>/dev/null; wait "$1"; rc=$?
}
setsid "$BIN" sweep --sim afa-m2-2018 --qd 1,2 -o int29 -- --runtime 1000s --precondition none >/dev/null 2>&1 &
pid=$!; sleep 4; stop_after $pid INT
sleep 0.5; left=$(pgrep -f "int29/points" | wc -l); pkill -9 -g $pid 2>/dev/null
[ $rc = 130 ] && [ ! -e int29 ] && [ "$left" = 0 ]; record destroy $? "SIGINT to sweep rc=$rc, $left children left running"
setsid "$BIN" fleet --engine local --tasks 2 --parallel 2 --out fl29 -- sim --runtime 1000s --precondition none >/dev/null 2>&1 &
pid=$!; sleep 4; stop_after $pid TERM
sleep 0.5; left=$(pgrep -f "fl29/task" | wc -l); pkill -9 -g $pid 2>/dev/null
[ $rc = 130 ] && ! ls fl29/task-*.json >/dev/null 2>&1 && [ ! -e fl29/merged.json ] && [ "$left" = 0 ]
record destroy $? "SIGTERM to fleet rc=$rc, $left children left running"

# 5. Messages: no debug structures, no misleading numbers, no silent reinterpretation.
echo garbage > junk.hlog
msg_case() { # must-not-match must-match args...
  local bad=$1 good=$2; shift 2
  out=$("$BIN" "$@" 2>&1 >/dev/null); rc=$?
  [ $rc != 0 ] && ! grep -q -- "$bad" <<<"$out" && grep -q -- "$good" <<<"$out"
  record messages $? "$* -> $out"
}
msg_case "ParseError {" "interval" report s.json --hdr-log junk.hlog -o /dev/null
msg_case " 0 MiB" "memory-budget" sim --quiet --ios 10 --memory-budget 1k
msg_case "zzz" "leading zero" profile --quiet --ios 10 --cpus 1,000
msg_case "bad magic" "directory" log "$W"
out=$("$BIN" profile --quiet --runtime 300ms 2>&1 >/dev/null)
! grep -q "0.3000000" <<<"$out"; record messages $? "--runtime 300ms printed a float artefact"

# 6. Signatures on zram devices (root): written without --force = failure.
if [ "$(id -u)" = 0 ] && [ -e /sys/class/zram-control/hot_add ]; then
  mkdir src; echo precious > src/f
  for fs in squashfs minix cramfs bfs ext4; do
    case $fs in
      squashfs) mksquashfs src img.$fs -noappend -quiet -no-progress >/dev/null 2>&1 ;;
      cramfs) mkfs.cramfs src img.$fs >/dev/null 2>&1 ;;
      *) truncate -s 8M img.$fs; mkfs.$fs -q img.$fs >/dev/null 2>&1 || mkfs.$fs img.$fs >/dev/null 2>&1 ;;
    esac
    n=$(cat /sys/class/zram-control/hot_add); echo 16M > /sys/block/zram$n/disksize
    dd if=img.$fs of=/dev/zram$n bs=1M conv=fsync status=none
    before=$(sha256sum < /dev/zram$n)
    "$BIN" profile --quiet --rw randwrite --allow-writes --ios 50 /dev/zram$n >/dev/null 2>&1
    after=$(sha256sum < /dev/zram$n)
    [ "$before" = "$after" ]; record signatures $? "$fs overwritten without --force"
    echo $n > /sys/class/zram-control/hot_remove
  done
  # Outputs never write a block device (issue 29), even through a symlink; no DEV.hlog either.
  n=$(cat /sys/class/zram-control/hot_add); echo 16M > /sys/block/zram$n/disksize
  mkfs.ext4 -q -F /dev/zram$n >/dev/null 2>&1; ln -sf /dev/zram$n zl
  before=$(sha256sum < /dev/zram$n)
  for args in "sim --quiet --ios 100 --json /dev/zram$n" "sim --quiet --ios 100 --hdr-log zl" "report s.json -o /dev/zram$n" \
    "doctor --json /dev/zram$n" "merge s.json -o /dev/zram$n --replace" "tune --plan -o /dev/zram$n loop0"; do
    "$BIN" $args >/dev/null 2>&1; rc=$?
    [ $rc = 1 ] && [ "$(sha256sum < /dev/zram$n)" = "$before" ] && [ ! -e /dev/zram$n.hlog ]
    record signatures $? "$args rc=$rc wrote the device"
  done
  echo $n > /sys/class/zram-control/hot_remove
fi

total=0; bad=0; line=""
for c in "${order[@]}"; do
  printf '%-11s tried %3d  failed %3d\n' "$c" "${tried[$c]}" "${failed[$c]}"
  total=$((total + tried[$c])); bad=$((bad + failed[$c])); line+=" $c=${failed[$c]}/${tried[$c]}"
done
# shellcheck disable=SC2086 # one CLASS=F/T per word
bench_result "tried=$total" "failed=$bad" $line
