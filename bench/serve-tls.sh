#!/usr/bin/env bash
# TLS-PSK round trip (issue 30): nbdcopy of a SIZE_MIB export of random data into `nines serve
# --tls-psk` and back out over a Unix socket (libnbd/GnuTLS as the client), md5 of source, copy
# and member compared; the same copies in plain text (what TLS costs) and through nbdkit's file
# plugin with the same PSK file (the peer), servers alternating within each round, medians of
# ROUNDS. Wall-clock figures: run on a quiet machine.
#
# Usage: bench/serve-tls.sh   (QUICK=1: 3 rounds of 64 MiB, well under two minutes)
# Environment: NINES (a prebuilt binary; default cargo build --release), ROUNDS (5),
# SIZE_MIB (64).
# Last line: RESULT tls_psk_roundtrip_s=<nines TLS-PSK, write + read back> plain_roundtrip_s=...
# nbdkit_tls_psk_roundtrip_s=... tls_vs_nbdkit=<nines / nbdkit time> md5_equal=<1 when every
# copy of every round matched>
set -euo pipefail

ROUNDS=${ROUNDS:-5}
SIZE_MIB=${SIZE_MIB:-64}
if [ "${QUICK:-0}" = 1 ]; then ROUNDS=3; fi

die() { echo "serve-tls: $*" >&2; exit 1; }
for t in nbdcopy nbdkit md5sum python3; do
  command -v "$t" >/dev/null || die "$t is missing; run scripts/setup.sh"
done
root="$(cd "$(dirname "$0")/.." && pwd)"
if [ -z "${NINES:-}" ]; then
  cargo build --release -q -p nines --manifest-path "$root/Cargo.toml" || die "build failed"
  NINES="$root/target/release/nines"
fi

work="$(mktemp -d /var/tmp/nines-serve-tls.XXXXXX)"
pid=
cleanup() { [ -n "$pid" ] && kill "$pid" 2>/dev/null; wait 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT
sock="$work/nbd.sock"
src="$work/src.img"
vol="$work/vol.img"
head -c "$((SIZE_MIB << 20))" /dev/urandom >"$src"
want=$(md5sum <"$src" | cut -d' ' -f1)
# psktool's format: username:hexkey (32 bytes of key).
echo "alice:$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')" >"$work/keys.psk"

start() {
  rm -f "$sock" "$vol"
  truncate -s "${SIZE_MIB}M" "$vol"
  case "$1" in
    nines) "$NINES" serve --socket "$sock" --tls-psk "$work/keys.psk" "$vol" 2>"$work/$1.err" & ;;
    plain) "$NINES" serve --socket "$sock" "$vol" 2>"$work/$1.err" & ;;
    nbdkit) nbdkit -f -U "$sock" --tls=require --tls-psk="$work/keys.psk" file "$vol" 2>"$work/$1.err" & ;;
  esac
  pid=$!
  for _ in $(seq 400); do
    [ -S "$sock" ] && return
    kill -0 "$pid" 2>/dev/null || die "$1 exited: $(cat "$work/$1.err")"
    sleep 0.05
  done
  die "$1 did not listen"
}
stop() { kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; pid=; }

md5_equal=1
for r in $(seq "$ROUNDS"); do
  for s in nines plain nbdkit; do
    start "$s"
    if [ "$s" = plain ]; then
      uri="nbd+unix:///?socket=$sock"
    else
      uri="nbds+unix://alice@/?socket=$sock&tls-psk-file=$work/keys.psk"
    fi
    rm -f "$work/back.img"
    t0=$(date +%s.%N)
    nbdcopy "$src" "$uri"
    nbdcopy "$uri" "$work/back.img"
    t1=$(date +%s.%N)
    stop
    got=$(md5sum <"$work/back.img" | cut -d' ' -f1)
    on=$(md5sum <"$vol" | cut -d' ' -f1)
    if [ "$got" != "$want" ] || [ "$on" != "$want" ]; then md5_equal=0; fi
    echo "round $r $s $(python3 -c "print(f'{$t1 - $t0:.3f}')") s md5 copy=$got member=$on source=$want"
    echo "$s $t0 $t1" >>"$work/times"
  done
done

python3 - "$work/times" "$md5_equal" <<'EOF'
import statistics, sys
t = {}
for line in open(sys.argv[1]):
    s, a, b = line.split()
    t.setdefault(s, []).append(float(b) - float(a))
m = {s: statistics.median(v) for s, v in t.items()}
print(f"medians: nines TLS-PSK {m['nines']:.3f} s, nines plain {m['plain']:.3f} s, "
      f"nbdkit TLS-PSK {m['nbdkit']:.3f} s")
print(f"RESULT tls_psk_roundtrip_s={m['nines']:.3f} plain_roundtrip_s={m['plain']:.3f} "
      f"nbdkit_tls_psk_roundtrip_s={m['nbdkit']:.3f} tls_vs_nbdkit={m['nines'] / m['nbdkit']:.3f} "
      f"md5_equal={sys.argv[2]}")
EOF
