#!/usr/bin/env bash
# Installs what building and testing nines needs beyond the Rust toolchain, on Debian/Ubuntu.
# Idempotent: installs only what is missing. Run as root (the tests create zram devices).
set -euo pipefail

need=()
need_norec=()   # installed without Recommends (qemu-system-x86 would bring a desktop's worth)
command -v mkfs.ext4 >/dev/null 2>&1 || need+=(e2fsprogs)      # tests put an ext4 signature on a zram device
command -v losetup >/dev/null 2>&1 || need+=(util-linux)
# libblkid is what the write-safety check asks first (loaded at run time; the -dev package is for
# building against it by hand); mkfs.minix/bfs/cramfs (util-linux) and mksquashfs put the
# signatures the tests check refusals against on zram devices.
dpkg -s libblkid1 >/dev/null 2>&1 || need+=(libblkid1)
dpkg -s libblkid-dev >/dev/null 2>&1 || need+=(libblkid-dev)
command -v mkfs.minix >/dev/null 2>&1 || need+=(util-linux)
command -v mksquashfs >/dev/null 2>&1 || need+=(squashfs-tools)
command -v genisoimage >/dev/null 2>&1 || need+=(genisoimage)  # an iso9660 image, refused without libblkid too
command -v pkg-config >/dev/null 2>&1 || need+=(pkg-config)    # plotters finds fontconfig, openssl-sys OpenSSL with it
dpkg -s libssl-dev >/dev/null 2>&1 || need+=(libssl-dev)        # nines serve's TLS (the openssl crate builds against it)
dpkg -s libfontconfig1-dev >/dev/null 2>&1 || need+=(libfontconfig1-dev)  # text in PNG plots
dpkg -s fonts-dejavu-core >/dev/null 2>&1 || need+=(fonts-dejavu-core)    # the font PNG plots use
command -v fio >/dev/null 2>&1 || need+=(fio)                  # --fio-json is diffed against real fio output
[ -d /usr/share/doc/fio/examples ] || need+=(fio-examples)     # --job is tested on fio's example job files
[ -x /usr/bin/python3 ] && /usr/bin/python3 -c 'import ensurepip' >/dev/null 2>&1 || need+=(python3-venv)
command -v java >/dev/null 2>&1 || need+=(default-jre-headless)  # HdrHistogram's HistogramLogProcessor
[ -f /usr/share/java/hdrhistogram.jar ] || need+=(libhdrhistogram-java)
command -v nbdinfo >/dev/null 2>&1 || need+=(libnbd-bin)         # nines serve: nbdinfo/nbdcopy interop tests
command -v qemu-img >/dev/null 2>&1 || need+=(qemu-utils)        # nines serve: qemu-img/qemu-io interop, qemu-nbd peer
command -v nbdkit >/dev/null 2>&1 || need+=(nbdkit)              # nines serve: the nbdkit memory peer in bench
command -v slurmctld >/dev/null 2>&1 || need+=(slurm-wlm)        # `nines fleet --engine slurm` runs on a test cluster
command -v munged >/dev/null 2>&1 || need+=(munge)               # Slurm's authentication
# The NVMe guest tests (scripts/nvme-guest.sh): QEMU's emulated NVMe controllers under TCG, a
# busybox initramfs, and kmod's depmod/modprobe to list the modules it needs.
# qemu-utils goes with it, at the repository's version: qemu-system-x86 cannot live beside a
# newer qemu-utils (a backport some machines come with), and apt would otherwise refuse the pair.
command -v qemu-system-x86_64 >/dev/null 2>&1 || need_norec+=(qemu-system-x86 qemu-utils)
[ -x /bin/busybox ] && ! readelf -l /bin/busybox 2>/dev/null | grep -q 'program interpreter' || need+=(busybox-static)
command -v cpio >/dev/null 2>&1 || need+=(cpio)
command -v depmod >/dev/null 2>&1 || need+=(kmod)

if [ $((${#need[@]} + ${#need_norec[@]})) -gt 0 ]; then
  echo "setup: installing ${need[*]} ${need_norec[*]}"
  apt-get update -qq
  [ ${#need[@]} -eq 0 ] || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}"
  for i in "${!need_norec[@]}"; do
    if [ "${need_norec[$i]}" = qemu-utils ]; then
      v=$(apt-cache madison qemu-system-x86 | awk 'NR == 1 {print $3}')
      [ -n "$v" ] && need_norec[$i]="qemu-utils=$v"
    fi
  done
  [ ${#need_norec[@]} -eq 0 ] \
    || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
         --allow-downgrades "${need_norec[@]}"
fi

# fio-plot, the Python HdrHistogram reader and six (for fio_jsonplus_clat2csv), pinned, in a venv
# inside the checkout (ignored by git) so nothing is installed system-wide.
root="$(cd "$(dirname "$0")/.." && pwd)"
venv="$root/.venv"
if ! cmp -s "$root/scripts/python-tools.txt" "$venv/python-tools.txt" 2>/dev/null; then
  echo "setup: installing the Python tools into $venv (from PyPI)"
  rm -rf "$venv"
  /usr/bin/python3 -m venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check -r "$root/scripts/python-tools.txt" \
    || { echo "setup: pip could not install scripts/python-tools.txt (is PyPI reachable?)" >&2; exit 1; }
  cp "$root/scripts/python-tools.txt" "$venv/python-tools.txt"
fi

# The guest kernel for scripts/nvme-guest.sh: Debian's linux-image, downloaded and unpacked into
# .guest/ in the checkout (ignored by git; nothing is installed on the host), and the modules the
# guest's initramfs loads, in dependency order.
guest="$root/.guest"
if [ ! -s "$guest/modules.list" ]; then
  pkg=$(apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-[0-9]/{print $2; exit}')
  [ -n "$pkg" ] || { echo "setup: apt knows no linux-image-amd64 (run apt-get update?)" >&2; exit 1; }
  kver=${pkg#linux-image-}
  echo "setup: downloading $pkg for the NVMe guest into $guest"
  rm -rf "$guest" && mkdir -p "$guest/deb"
  (cd "$guest/deb" && apt-get download -q "$pkg" >/dev/null 2>&1) \
    || { echo "setup: apt-get download $pkg failed" >&2; exit 1; }
  dpkg-deb -x "$guest"/deb/*.deb "$guest/kernel"
  rm -rf "$guest/deb"
  depmod -b "$guest/kernel" "$kver"
  for m in nvme 9pnet_virtio 9p zram virtio_pci; do
    modprobe -d "$guest/kernel" -S "$kver" --show-depends "$m"
  done | awk '$1 == "insmod" && !seen[$2]++ {print $2}' \
    | sed "s|^$guest/kernel/lib/modules/$kver/||" > "$guest/modules.list.new"
  echo "$kver" > "$guest/kernel-version"
  mv "$guest/modules.list.new" "$guest/modules.list"
fi

# The tests run many libaio profiles at once (cargo runs test threads in parallel) and other
# processes on the host (fio, databases) hold AIO contexts too: fs.aio-max-nr is a host-wide
# budget, and at the default 65536 the tests failed "io_setup(1) exceeds the system's AIO limit" on
# a busy host. Raise it (never lower it) so the suite does not depend on what others consume.
aio_max=$(cat /proc/sys/fs/aio-max-nr 2>/dev/null || echo 0)
if [ "$aio_max" -lt 1048576 ]; then
  echo "setup: raising fs.aio-max-nr from $aio_max to 1048576 (host-wide AIO budget for the tests)"
  echo 1048576 > /proc/sys/fs/aio-max-nr || echo "setup: could not raise fs.aio-max-nr; libaio tests may fail on a busy host" >&2
fi

# zram backs the block-device tests; load the module where it is not built in.
if [ ! -e /sys/class/zram-control ]; then
  modprobe zram num_devices=0 2>/dev/null || echo "setup: zram is unavailable; block-device tests will be skipped"
fi
echo "setup: ready"
