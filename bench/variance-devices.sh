#!/usr/bin/env bash
# Writes device TOMLs of afa-m2-2018's clean model (afa-m2-2018-ideal) with issue 17's variance
# sources turned on, one file per source and one with all of them, into DIR (sourced by bench/sim-speed.sh and
# bench/sim-identical.sh; usable alone: `bench/variance-devices.sh [DIR]`, DIR by default target/variance-devices).
#   cmt.toml      a 64 MiB mapping cache (DFTL; 8 bytes per entry: 8 M of the 234 M units)
#   jitter.toml   firmware jitter, 64-point quantile functions for reads and writes (dense tail)
#   retry.toml    read retry: 1% of page reads, 2 extra steps of tR + 5 us
#   pagetype.toml LSB/MSB page reads 12/16 us and programs 0.9/1.9 ms
#   power.toml    APST: states after 2 ms idle (exit 50 us) and 100 ms idle (exit 8 ms)
#   flush.toml    a volatile write cache, flush_ns = 20 us (FUA writes and flushes only)
#   all.toml      every one of the above
set -euo pipefail
variance_devices() {
    local dir="$1" src
    src="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/crates/nines-flash/presets/afa-m2-2018.toml"
    mkdir -p "$dir"
    # The preset without its [timing] section's closing keys changed: page types go in [timing].
    local jitter_r jitter_w
    # Body: 0..2 us over the first 90%; tail: 48 points from q0.9 to q1 rising to 60 us.
    jitter_r="$(awk 'BEGIN { printf "read = [[0.0, 0]"; for (k = 1; k <= 14; k++) printf ", [%.4f, %d]", k * 0.9 / 15, k * 130;
        for (k = 0; k < 48; k++) { q = 1 - 0.1 * exp(-k / 5.0); printf ", [%.9f, %d]", q, 2000 + k * k * 25 }
        printf ", [1.0, 60000]]" }')"
    jitter_w="${jitter_r/read = /write = }"
    local page_types='read_ns_by_page_type = [12_000, 16_000]
program_ns_by_page_type = [900_000, 1_900_000]'
    local cmt='[mapping]
cache_bytes = 67_108_864'
    local retry='[read_retry]
probability = 0.01
steps = 2
step_overhead_ns = 5_000'
    local power='[[power.states]]
idle_ns = 2_000_000
exit_ns = 50_000

[[power.states]]
idle_ns = 100_000_000
exit_ns = 8_000_000'
    local flush='[durability]
volatile_write_cache = true
flush_ns = 20_000'
    local jitter="[firmware_jitter]
$jitter_r
$jitter_w"
    # name, extra [timing] keys, extra sections
    write_dev() {
        local name="$1" timing="$2" rest="$3"
        # The preset's clean part only (what --ideal keeps): up to its variance-source marker,
        # without its page-type times; each file then adds its own source.
        awk -v t="$timing" -v n="$name" '
            /^# --- variance sources/ { exit }
            /^(read|program)_ns_by_page_type/ { next }
            /^name = / { print "name = \"afa-m2-2018-" n "\""; next }
            { print }
            /^channel_bytes_per_s/ && t != "" { print t }' "$src" >"$dir/$name.toml"
        [ -n "$rest" ] && printf '\n%s\n' "$rest" >>"$dir/$name.toml"
        return 0
    }
    write_dev cmt "" "$cmt"
    write_dev jitter "" "$jitter"
    write_dev retry "" "$retry"
    write_dev pagetype "$page_types" ""
    write_dev power "" "$power"
    write_dev flush "" "$flush"
    write_dev all "$page_types" "$cmt

$retry

$power

$flush

$jitter"
}
if [ "${BASH_SOURCE[0]}" = "$0" ]; then
    # DIR defaults to target/variance-devices in the checkout (ignored by git).
    [ $# -le 1 ] || { echo "usage: $0 [DIR]" >&2; exit 2; }
    out="${1:-$(cd "$(dirname "$0")/.." && pwd)/target/variance-devices}"
    variance_devices "$out"
    . "$(dirname "$0")/lib.sh"
    bench_result "devices=$(find "$out" -maxdepth 1 -name '*.toml' | wc -l)" "dir=$out"
fi
