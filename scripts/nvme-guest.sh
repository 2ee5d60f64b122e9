#!/usr/bin/env bash
# Boots a QEMU guest with emulated NVMe controllers and runs one command inside it.
#
#   scripts/nvme-guest.sh [options] -- COMMAND [ARGS...]
#
# The guest is Debian's kernel (scripts/setup.sh downloads it into .guest/ in the checkout, nothing
# is installed on the host) with a busybox initramfs. Its /init loads the nvme, 9p and zram
# modules, mounts this host's root read-only over 9p, puts the guest's /dev, /proc and /sys and a
# tmpfs /tmp over it, and runs COMMAND there in a chroot, in the directory this script was run
# from. So COMMAND sees the host's files (binaries, the checkout) at their host paths and the
# guest's devices. The command's stdout and stderr come back on this script's, and its exit status
# is this script's. Inside, $NINES_GUEST_OUT is a writable directory (a second 9p share) whose
# files are copied to --out DIR afterwards; NINES_IN_GUEST=1 is set.
#
# Options:
#   --ctrl NS[,NS...]  one NVMe controller with these namespaces (repeat for more controllers).
#                      NS is conv:SIZE or zns:SIZE:ZONE_SIZE[:ZONE_CAP[:MAX_OPEN[:MAX_ACTIVE]]]
#                      (sizes like 256M, 1G; 0 for open/active means no limit).
#                      Default: one controller with conv:256M.
#   --ctrls N          N controllers like the last --ctrl (up to 64 in all).
#   --lba BYTES        logical block size of every namespace (512 or 4096; default 512).
#   --smp N            vCPUs (default 2).   --mem MIB   guest memory (default 1024).
#   --append ARGS      more kernel arguments (default has nvme.poll_queues=1).
#   --env NAME=VALUE   set in the command's environment (repeatable).
#   --timeout S        the whole guest's wall-clock bound (default 300); exit 124 past it.
#   --out DIR          where the guest's $NINES_GUEST_OUT files go (default: discarded).
#   --keep             keep the work directory (images, console log) and print its path.
#
# Boot is under TCG (software emulation): on these machines KVM guests did not get past the
# kernel's decompressor. Timings inside a TCG guest mean nothing; behaviour is what is tested.
# Debian 12's QEMU is 7.2: conventional and zoned (ZNS) namespaces, several namespaces and
# controllers, poll queues; no Flexible Data Placement (QEMU 8.0 added it).
set -euo pipefail

me=nvme-guest
root="$(cd "$(dirname "$0")/.." && pwd)"
guest_dir="${NINES_GUEST_DIR:-$root/.guest}"

die() { echo "$me: $*" >&2; exit 2; }

ctrls=() smp=2 mem=1024 append="" timeout_s=300 out="" keep=0 lba=512 envs=()
while [ $# -gt 0 ]; do
  case "$1" in
    --ctrl) ctrls+=("${2:?--ctrl needs namespaces}"); shift 2 ;;
    --ctrls)
      n="${2:?--ctrls needs a count}"; [[ "$n" =~ ^[0-9]+$ ]] || die "--ctrls takes a count, not '$n'"
      last="${ctrls[-1]:-conv:64M}"; [ ${#ctrls[@]} -gt 0 ] && unset 'ctrls[-1]'
      for _ in $(seq 1 "$n"); do ctrls+=("$last"); done; shift 2 ;;
    --lba) lba="${2:?}"; shift 2 ;;
    --smp) smp="${2:?}"; shift 2 ;;
    --mem) mem="${2:?}"; shift 2 ;;
    --append) append="${2?}"; shift 2 ;;
    --env) [[ "${2:-}" == *=* ]] || die "--env takes NAME=VALUE"; envs+=("$2"); shift 2 ;;
    --timeout) timeout_s="${2:?}"; shift 2 ;;
    --out) out="${2:?}"; shift 2 ;;
    --keep) keep=1; shift ;;
    --) shift; break ;;
    -h|--help) sed -n '2,31p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown option '$1' (see --help)" ;;
  esac
done
[ $# -gt 0 ] || die "no command given: scripts/nvme-guest.sh [options] -- COMMAND"
[ ${#ctrls[@]} -gt 0 ] || ctrls=("conv:256M")
[ ${#ctrls[@]} -le 64 ] || die "at most 64 controllers (asked for ${#ctrls[@]})"
case "$lba" in 512|4096) ;; *) die "--lba must be 512 or 4096, not '$lba'" ;; esac
for v in smp mem timeout_s; do [[ "${!v}" =~ ^[0-9]+$ ]] || die "--${v%_s} takes a number"; done

# What it needs, one line each.
command -v qemu-system-x86_64 >/dev/null || die "qemu-system-x86_64 is missing: run scripts/setup.sh (Debian package qemu-system-x86)"
busybox="$(command -v busybox || true)"
[ -n "$busybox" ] || die "busybox is missing: run scripts/setup.sh (Debian package busybox-static)"
# The initramfs has no libc: a dynamically linked busybox (Debian's busybox) cannot run there.
if readelf -l "$busybox" 2>/dev/null | grep -q 'program interpreter'; then
  die "$busybox is dynamically linked: run scripts/setup.sh (Debian package busybox-static)"
fi
command -v cpio >/dev/null || die "cpio is missing: run scripts/setup.sh (Debian package cpio)"
kver="$(cat "$guest_dir/kernel-version" 2>/dev/null || true)"
[ -n "$kver" ] && [ -f "$guest_dir/kernel/boot/vmlinuz-$kver" ] \
  || die "no guest kernel in $guest_dir: run scripts/setup.sh (it downloads Debian's linux-image into it)"
[ -f "$guest_dir/modules.list" ] || die "no module list in $guest_dir: run scripts/setup.sh"

work="$(mktemp -d "${TMPDIR:-/tmp}/nines-guest.XXXXXX")"
qpid=""
cleanup() {
  [ -n "$qpid" ] && kill -9 "$qpid" 2>/dev/null || true
  if [ "$keep" = 1 ]; then echo "$me: kept $work" >&2; else rm -rf "$work"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP

# The initramfs: busybox, the modules in load order, /init. Built once per kernel and script.
initrd="$guest_dir/initrd-$kver.gz"
if [ ! -f "$initrd" ] || [ "$initrd" -ot "$0" ] || [ "$initrd" -ot "$guest_dir/modules.list" ]; then
  ir="$work/initramfs"
  mkdir -p "$ir/bin" "$ir/lib/modules" "$ir/dev" "$ir/proc" "$ir/sys" "$ir/host" "$ir/out"
  cp "$busybox" "$ir/bin/busybox"
  while read -r ko; do
    [ -n "$ko" ] || continue
    src="$guest_dir/kernel/lib/modules/$kver/$ko"
    case "$src" in
      *.xz) xz -dc "$src" > "$ir/lib/modules/$(basename "${ko%.xz}")" ;;
      *) cp "$src" "$ir/lib/modules/" ;;
    esac
    basename "${ko%.xz}" >> "$ir/modules.order"
  done < "$guest_dir/modules.list"
  cat > "$ir/init" <<'INIT'
#!/bin/busybox sh
/bin/busybox --install -s /bin
export PATH=/bin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
# Module options from the kernel command line (nvme.poll_queues=1 ...), as modprobe would pass them.
for ko in $(cat /modules.order); do
  name=$(echo "${ko%.ko}" | tr - _)
  opts=""
  for a in $(cat /proc/cmdline); do
    case "$a" in "$name".*) opts="$opts ${a#"$name".}" ;; esac
  done
  insmod "/lib/modules/$ko" $opts || echo "guest: insmod $ko failed" >&2
done
mount -t 9p -o trans=virtio,version=9p2000.L,ro,msize=262144,cache=loose host /host \
  || { echo "guest: cannot mount the host's root" >&2; poweroff -f; }
mount -t 9p -o trans=virtio,version=9p2000.L,msize=262144 out /out \
  || { echo "guest: cannot mount the output share" >&2; poweroff -f; }
mount --rbind /dev /host/dev
mount -t proc proc /host/proc
mount -t sysfs sys /host/sys
mount -t tmpfs -o mode=1777 tmp /host/tmp
mount -t tmpfs tmp /host/run 2>/dev/null || true
mkdir -p /host/tmp/nines-guest-out /host/dev/shm
mount -t tmpfs shm /host/dev/shm
mount --bind /out /host/tmp/nines-guest-out
# Wait (bounded: 300 s, for a loaded host) for the NVMe namespaces the host asked for.
want=$(cat /out/.namespaces)
i=0
while [ "$(ls /sys/class/block | grep -c '^nvme[0-9]*n[0-9]*$')" -lt "$want" ] && [ $i -lt 3000 ]; do
  sleep 0.1; i=$((i + 1))
done
: > /out/.started   # its time on the host is when the command started
chroot /host /bin/sh /tmp/nines-guest-out/.cmd.sh > /out/.stdout 2> /out/.stderr
echo $? > /out/.rc
sync
umount /host/tmp/nines-guest-out /out 2>/dev/null
poweroff -f
INIT
  chmod +x "$ir/init"
  (cd "$ir" && find . | cpio -o -H newc --quiet | gzip -1) > "$work/initrd.gz"
  mkdir -p "$guest_dir" && mv "$work/initrd.gz" "$initrd"
  rm -rf "$ir"
fi

# Controllers and namespaces.
size_ok() { [[ "$1" =~ ^[0-9]+[KMG]?$ ]] || die "bad size '$1' in --ctrl (like 64M or 1G)"; }
mkdir -p "$work/img" "$work/out"
dev=() nns=0 bridges=0
for k in "${!ctrls[@]}"; do
  # Past 24 controllers, they go behind PCI bridges (32 slots each).
  bus=""
  if [ ${#ctrls[@]} -gt 24 ]; then
    b=$((k / 30 + 1))
    if [ "$b" -gt "$bridges" ]; then dev+=(-device "pci-bridge,id=br$b,chassis_nr=$b"); bridges=$b; fi
    bus=",bus=br$b,addr=$(printf 0x%x $((k % 30 + 1)))"
  fi
  dev+=(-device "nvme,id=nvme$k,serial=nines$k$bus")
  IFS=, read -r -a nss <<< "${ctrls[$k]}"
  for j in "${!nss[@]}"; do
    IFS=: read -r kind size zsize zcap zopen zactive extra <<< "${nss[$j]}"
    [ -z "${extra:-}" ] || die "too many fields in namespace '${nss[$j]}'"
    size_ok "${size:-}"
    img="$work/img/c$k-n$j.raw"
    truncate -s "$size" "$img"
    props="drive=d${k}n$j,bus=nvme$k,nsid=$((j + 1)),logical_block_size=$lba,physical_block_size=$lba"
    case "$kind" in
      conv) [ -z "${zsize:-}" ] || die "conv namespaces take only a size: '${nss[$j]}'" ;;
      zns)
        size_ok "${zsize:-}"
        props="$props,zoned=true,zoned.zone_size=$zsize"
        [ -z "${zcap:-}" ] || { size_ok "$zcap"; props="$props,zoned.zone_capacity=$zcap"; }
        [ -z "${zopen:-}" ] || props="$props,zoned.max_open=$zopen"
        [ -z "${zactive:-}" ] || props="$props,zoned.max_active=$zactive" ;;
      *) die "namespace kind must be conv or zns, not '$kind'" ;;
    esac
    dev+=(-drive "file=$img,if=none,id=d${k}n$j,format=raw,cache=unsafe" -device "nvme-ns,$props")
    nns=$((nns + 1))
  done
done
echo "$nns" > "$work/out/.namespaces"

# The command, run by /bin/sh in the chroot, in this directory, with the given environment.
{
  printf 'export NINES_IN_GUEST=1 NINES_GUEST_OUT=/tmp/nines-guest-out PATH=%q HOME=/tmp\n' "$PATH"
  for e in "${envs[@]}"; do printf 'export %q\n' "$e"; done
  printf 'cd %q || exit 125\n' "$PWD"
  printf 'exec'; printf ' %q' "$@"; printf '\n'
} > "$work/out/.cmd.sh"

t0=$(date +%s.%N)
timeout --kill-after=5 "$timeout_s" qemu-system-x86_64 \
  -accel tcg -cpu max -smp "$smp" -m "$mem" -nographic -no-reboot -nodefaults \
  -kernel "$guest_dir/kernel/boot/vmlinuz-$kver" -initrd "$initrd" \
  -append "console=ttyS0 quiet panic=-1 nvme.poll_queues=1 $append" \
  -serial "file:$work/console.log" -monitor none \
  -virtfs "local,path=/,mount_tag=host,security_model=none,readonly=on,multidevs=remap" \
  -virtfs "local,path=$work/out,mount_tag=out,security_model=none" \
  "${dev[@]}" </dev/null >"$work/qemu.log" 2>&1 &
qpid=$!
set +e
wait "$qpid"
qrc=$?
set -e
qpid=""

[ -f "$work/out/.stdout" ] && cat "$work/out/.stdout"
[ -f "$work/out/.stderr" ] && cat "$work/out/.stderr" >&2
if [ ! -f "$work/out/.rc" ]; then
  if [ "$qrc" = 124 ] || [ "$qrc" = 137 ]; then
    echo "$me: the guest ran past --timeout $timeout_s s; its console's last lines:" >&2
  else
    echo "$me: the guest ended (qemu exit $qrc) before the command finished; console and qemu said:" >&2
  fi
  tail -n 20 "$work/console.log" "$work/qemu.log" >&2 2>/dev/null || true
  exit 124
fi
rc="$(cat "$work/out/.rc")"
started="$(stat -c %.3Y "$work/out/.started" 2>/dev/null || echo "$t0")"
printf '%s: %d controller(s), %d namespace(s); the command started %.1f s after qemu, ran to exit %s\n' \
  "$me" "${#ctrls[@]}" "$nns" "$(awk -v a="$started" -v b="$t0" 'BEGIN { print a - b }')" "$rc" >&2
if [ -n "$out" ]; then
  mkdir -p "$out"
  (cd "$work/out" && find . -mindepth 1 -maxdepth 1 ! -name '.*' -exec cp -a {} "$out/" \;)
fi
exit "$rc"
