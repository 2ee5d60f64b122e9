#!/usr/bin/env bash
# Issue 33, case (d): serial over zoned members against serial over the same flash as
# conventional members, under paper 004's table (c) workload (the job lines of
# bench/paper004-shaping.sh buffer_table: three sequential streams at 1x/7x/17x, one random
# stream, and 4 KiB random reads at 5000 IOPS), four members, columns of one member.
#
# The members: afa-m2-2018 (the default device, as in paper004-shaping) with fewer blocks, and
# the same flash with a [zoned] section (a zone = one 4 MiB block on each of its 64 dies:
# 256 MiB, 14 open / active zones). Both export 22 segments of 256 MiB per member (5.5 GiB):
# the conventional one 44 blocks per die at 50% over-provisioning (its FTL needs spare blocks;
# serial's trims keep its GC idle anyway), the zoned one 22 blocks per die (a zoned drive
# exports all its flash). Four members: a 17.5 GiB volume for the 16 GiB footprint, so xGC
# runs. The rates are the table's times X (X=4 in paper004-shaping; more here so the short run
# writes past the volume's free space). Serial's first write trims (conventional) or resets
# (zoned) every segment, so both start empty. Segments are 256 MiB (whole block stripes).
#
# Prints per case: device WAF, array WAF (xGC), read p99 / p99.99 / p99.9999 of the reads job,
# write MB/s, write p99.99 (every write job together), device GC moves and front-end GC moves.
# Then the same zoned run on emu: members in real time (a short profile) beside its simulation:
# read p50 emu vs sim.
#
# Usage: bench/placement-zns.sh   (NINES=path/to/nines to skip the build; QUICK=1 under two
#        minutes). Last line:
#        RESULT zns_device_gc_moves=N zns_frontend_gc_moves=N zns_vs_conv_write_p9999=R
#               zns_emu_vs_sim_p50=R
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
bench_init placement-zns
bench_nines
bench_scratch TMP

QUICK="${QUICK:-}"
if [ -n "$QUICK" ]; then RT=${RT:-200s}; X=${X:-32}; EMU_RT=${EMU_RT:-10s}; else
    RT=${RT:-1800s}; X=${X:-16}; EMU_RT=${EMU_RT:-30s}; fi

# afa-m2-2018's own text with BLOCKS blocks per plane, capacity_bytes dropped, NAME.
variant() {
    grep -v '^capacity_bytes' crates/nines-flash/presets/afa-m2-2018.toml |
        sed -e "s/^name = \"afa-m2-2018\"/name = \"$1\"/" \
            -e "s/^blocks_per_plane = [0-9]*/blocks_per_plane = $2/" \
            -e "s/^over_provisioning = [0-9.]*/over_provisioning = 0.5/"
}
variant afa-conv-small 22 >"$TMP/conv.toml"
variant afa-zoned-small 11 >"$TMP/zoned.toml"
cat >>"$TMP/zoned.toml" <<'EOF'

[zoned]
zone_size_bytes = 268_435_456
zone_capacity_bytes = 268_435_456
max_open_zones = 14
max_active_zones = 14
EOF

JOBS=(--job "seq1:rw=write,bs=128k,iodepth=4,rate-iops=$X,offset=0,size=5g"
    --job "seq2:rw=write,bs=128k,iodepth=4,rate-iops=$((7 * X)),offset=5g,size=5g"
    --job "seq3:rw=write,bs=128k,iodepth=4,rate-iops=$((17 * X)),offset=10g,size=5g"
    --job "rand:rw=randwrite,bs=4k,iodepth=16,rate-iops=$((32 * X)),offset=15g,size=1g"
    --job "reads:rw=randread,bs=4k,iodepth=16,rate-iops=5000")
LAYOUT=(--layout serial --segment 256m --stripe 1m --gc-move 1m --gc-depth 16 --gc-start 4
    --gc-stop 6 --rotate-free 2)
SERIAL=(--devices 4 "${LAYOUT[@]}" --scale 1 --precondition none)
PCT=(--percentiles 50,99,99.99,99.9999)

sim() {
    "$NINES" sim --quiet "$@" 2>"$TMP/err" || {
        cat "$TMP/err" >&2
        exit 1
    }
}

fig() {
    python3 - "$1" "$2" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
what = sys.argv[2]
jobs = {j["name"]: j for j in r["jobs"]}
dev = r["devices"][0]
i = dev.get("internals") or {}
st = (dev.get("volume") or {}).get("stats") or {}
def ms(ns): return "%.3f" % (ns / 1e6)
if what == "dwaf":
    print("%.3f" % i["write_amplification"])
elif what == "awaf":
    print("%.3f" % st["array_write_amplification"])
elif what == "resets":
    z = i.get("zoned")
    print("-" if z is None else "%d resets, %d appends, %d zone errors" % (
        z["zone_resets"], z["zone_appends"],
        z["invalid_writes"] + z["zone_full_errors"] + z["too_many_open_errors"]
        + z["too_many_active_errors"]))
elif what.startswith("r"):
    print(ms(jobs["reads"]["read"]["lat_ns"]["percentiles"][what[1:]]))
elif what == "wbw":
    print("%.1f" % (dev["write"]["bw_bytes"] / 1e6))
elif what == "w9999":
    print(ms(dev["write"]["lat_ns"]["percentiles"]["99.99"]))
elif what == "dgc":
    print(i["gc_units_moved"])
elif what == "fgc":
    print(i.get("gc_units_moved_while_gc_free", 0))
elif what == "xgc":
    print("%d victims, %d units moved" % (st["gc_victims"], st["gc_units_moved"]))
elif what == "size":
    print("%.1f" % (dev["size_bytes"] / 2**30))
PY
}

sim --device "$TMP/conv.toml" "${SERIAL[@]}" "${JOBS[@]}" "${PCT[@]}" --runtime "$RT" --ramp 0s \
    --json "$TMP/conv.json"
sim --device "$TMP/zoned.toml" "${SERIAL[@]}" "${JOBS[@]}" "${PCT[@]}" --runtime "$RT" --ramp 0s \
    --json "$TMP/zns.json"

echo "(d) serial over 4 members, paper 004 table (c) workload (X=$X), $RT simulated"
printf '%-30s %14s %14s\n' "" "conventional" "zoned"
row() { printf '%-30s %14s %14s\n' "$1" "$(fig "$TMP/conv.json" "$2")" "$(fig "$TMP/zns.json" "$2")"; }
row "volume GiB" size
row "device WAF" dwaf
row "array WAF (xGC)" awaf
row "read p99 ms" r99
row "read p99.99 ms" r99.99
row "read p99.9999 ms" r99.9999
row "write MB/s" wbw
row "write p99.99 ms" w9999
row "device GC units moved" dgc
row "front-end GC units moved" fgc
echo "xGC: conventional $(fig "$TMP/conv.json" xgc); zoned $(fig "$TMP/zns.json" xgc), $(fig "$TMP/zns.json" resets)"

dgc=$(fig "$TMP/zns.json" dgc)
fgc=$(fig "$TMP/zns.json" fgc)
ratio=$(python3 -c "print('%.3f' % ($(fig "$TMP/zns.json" w9999) / max($(fig "$TMP/conv.json" w9999), 1e-9)))")
echo "goals: zoned device GC moves 0 (measured $dgc), front-end GC moves 0 ($fgc), write p99.99 zoned / conventional <= 1.0 ($ratio)"

# emu: zoned members in real time (nines profile over emu: targets) against the same run
# simulated; short (real time). An emulated device keeps real data for every byte of its
# members the run may write, so these members are smaller (12 zones of 128 MiB, half of each
# zone's blocks unused: 1.5 GiB) and the table's streams are put in the 4.75 GiB volume
# (offsets and sizes / 4).
variant afa-zoned-emu 6 >"$TMP/zemu.toml"
cat >>"$TMP/zemu.toml" <<'EOF'

[zoned]
zone_size_bytes = 134_217_728
zone_capacity_bytes = 134_217_728
max_open_zones = 14
max_active_zones = 14
EOF
ELAYOUT=(--layout serial --segment 128m --stripe 1m --gc-move 1m --gc-depth 16 --gc-start 1
    --gc-stop 2 --rotate-free 1)
EJOBS=(--job "seq1:rw=write,bs=128k,iodepth=4,rate-iops=$X,offset=0,size=1280m"
    --job "seq2:rw=write,bs=128k,iodepth=4,rate-iops=$((7 * X)),offset=1280m,size=1280m"
    --job "seq3:rw=write,bs=128k,iodepth=4,rate-iops=$((17 * X)),offset=2560m,size=1280m"
    --job "rand:rw=randwrite,bs=4k,iodepth=16,rate-iops=$((32 * X)),offset=3840m,size=256m"
    --job "reads:rw=randread,bs=4k,iodepth=16,rate-iops=5000,offset=0,size=4864m")
EMU=()
for _ in 0 1 2 3; do EMU+=("emu:$TMP/zemu.toml"); done
emu_ratio=NA
if "$NINES" profile --quiet "${EMU[@]}" "${ELAYOUT[@]}" "${EJOBS[@]}" "${PCT[@]}" \
    --runtime "$EMU_RT" --ramp 0s --json "$TMP/emu.json" 2>"$TMP/emu.err"; then
    sim --device "$TMP/zemu.toml" --devices 4 --scale 1 "${ELAYOUT[@]}" "${EJOBS[@]}" "${PCT[@]}" \
        --runtime "$EMU_RT" --ramp 0s --json "$TMP/zns-short.json"
    e=$(fig "$TMP/emu.json" r50)
    s=$(fig "$TMP/zns-short.json" r50)
    emu_ratio=$(python3 -c "print('%.3f' % ($e / max($s, 1e-9)))")
    echo "emu vs sim ($EMU_RT, 1.5 GiB zoned members): read p50 $e ms emu, $s ms sim: ratio" \
        "$emu_ratio (goal within 5%); write p99.99 $(fig "$TMP/emu.json" w9999) ms emu," \
        "$(fig "$TMP/zns-short.json" w9999) ms sim"
else
    echo "emu: not run: $(head -c 400 "$TMP/emu.err")"
fi
bench_result "zns_device_gc_moves=$dgc zns_frontend_gc_moves=$fgc zns_vs_conv_write_p9999=$ratio zns_emu_vs_sim_p50=$emu_ratio"
