#!/usr/bin/env bash
# Hostile runs against a nines binary (issue 15): cases per class, and how many failed. A case
# fails when nines panics (exit 101), aborts or dies on a signal (exit >= 128, SIGPIPE included),
# accepts what it must refuse, replaces a device node, leaves outputs behind a failure, or prints
# Rust debug structures. Compare binaries: before and after a fix.
#   bench/hostile.sh [NINES_BINARY]   (default target/debug/nines; root needed for the zram class)
# Ends with one line: RESULT tried=N failed=M <class>=failed/tried ...
set -u
BIN="$(realpath "${1:-target/debug/nines}")"
PRESET="$(cd "$(dirname "$0")/.." && pwd)/crates/nines-flash/presets/afa-m2-2018.toml"
W="$(mktemp -d /var/tmp/nines-hostile.XXXXXX)"
trap 'rm -rf "$W"' EXIT
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
    rm -f "$f"
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
fi

total=0; bad=0; line=""
for c in "${order[@]}"; do
  printf '%-11s tried %3d  failed %3d\n' "$c" "${tried[$c]}" "${failed[$c]}"
  total=$((total + tried[$c])); bad=$((bad + failed[$c])); line+=" $c=${failed[$c]}/${tried[$c]}"
done
echo "RESULT tried=$total failed=$bad$line"
