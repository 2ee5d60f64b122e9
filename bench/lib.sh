# shellcheck shell=bash
# What every bench script shares (issue 32): the nines binary, scratch directories, cleanup and
# the RESULT line. Sourced, not run:
#
#   . "$(dirname "$0")/lib.sh"
#   bench_init NAME            ROOT (the repository), die() prefixed with NAME, cleanup on exit
#   bench_nines [debug]        NINES: the binary given as NINES=PATH (made absolute), else
#                              `cargo build --release -p nines` (debug: a dev build) under
#                              $CARGO_TARGET_DIR or ROOT/target; dies when it is not executable
#   bench_scratch VAR [PARENT] a new directory in VAR (under PARENT, default $TMPDIR or /tmp),
#                              removed on exit, also on SIGINT/SIGTERM
#   bench_on_exit FUNC         FUNC runs on exit, before the scratch directories are removed
#                              (last registered first); use it instead of `trap ... EXIT`
#   bench_result K=V ...       prints the one `RESULT K=V ...` line a bench ends with
#
# Environment every bench honours: NINES (a prebuilt binary), QUICK=1 (a run under two minutes).

_bench_name=bench
_bench_scratch=()
_bench_hooks=()

die() {
    echo "$_bench_name: $*" >&2
    exit 1
}

_bench_exit() {
    local rc=$? i
    trap - EXIT INT TERM
    for ((i = ${#_bench_hooks[@]} - 1; i >= 0; i--)); do
        "${_bench_hooks[$i]}" || true
    done
    for d in "${_bench_scratch[@]}"; do
        [ -n "$d" ] && rm -rf "$d"
    done
    exit "$rc"
}

bench_init() {
    _bench_name=$1
    ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
    trap _bench_exit EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM
}

bench_nines() {
    local profile=${1:-release}
    if [ -n "${NINES:-}" ]; then
        [ -x "$NINES" ] && [ -f "$NINES" ] || die "NINES=$NINES is not an executable nines binary"
        NINES=$(realpath "$NINES")
        return
    fi
    local target=${CARGO_TARGET_DIR:-$ROOT/target} flag=--release dir=release
    [ "$profile" = debug ] && flag= && dir=debug
    # shellcheck disable=SC2086 # flag is empty for a dev build
    (cd "$ROOT" && cargo build $flag -q -p nines >&2) || die "cargo build $flag -p nines failed"
    NINES=$target/$dir/nines
    [ -x "$NINES" ] || die "no nines binary at $NINES after the build"
}

bench_scratch() {
    local var=$1 parent=${2:-${TMPDIR:-/tmp}} dir
    dir=$(mktemp -d "$parent/nines-$_bench_name.XXXXXX") || die "cannot make a scratch directory in $parent"
    _bench_scratch+=("$dir")
    printf -v "$var" '%s' "$dir"
}

bench_on_exit() {
    _bench_hooks+=("$1")
}

bench_result() {
    [ $# -gt 0 ] || die "bench_result needs at least one NAME=VALUE"
    echo "RESULT $*"
}
