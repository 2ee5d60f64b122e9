#!/usr/bin/env bash
# Installs what building and testing nines needs beyond the Rust toolchain, on Debian/Ubuntu.
# Idempotent: installs only what is missing. Run as root (the tests create zram devices).
set -euo pipefail

need=()
command -v mkfs.ext4 >/dev/null 2>&1 || need+=(e2fsprogs)      # tests put an ext4 signature on a zram device
command -v losetup >/dev/null 2>&1 || need+=(util-linux)
command -v pkg-config >/dev/null 2>&1 || need+=(pkg-config)    # plotters finds fontconfig with it
dpkg -s libfontconfig1-dev >/dev/null 2>&1 || need+=(libfontconfig1-dev)  # text in PNG plots
dpkg -s fonts-dejavu-core >/dev/null 2>&1 || need+=(fonts-dejavu-core)    # the font PNG plots use

if [ ${#need[@]} -gt 0 ]; then
  echo "setup: installing ${need[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}"
fi

# zram backs the block-device tests; load the module where it is not built in.
if [ ! -e /sys/class/zram-control ]; then
  modprobe zram num_devices=0 2>/dev/null || echo "setup: zram is unavailable; block-device tests will be skipped"
fi
echo "setup: ready"
