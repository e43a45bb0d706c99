#!/bin/sh
# Cargo runner: runs each test or bench binary inside the rxe VM (`cargo xtask vm -- BIN ARGS`).
#
#   CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_RUNNER=$PWD/xtask/vm/runner.sh cargo test -p CRATE
#
# The runner variable is dropped first: otherwise the inner `cargo run` would start xtask
# through this runner again, recursively (so a plain RUNNER="cargo xtask vm --" does not work).
# xtask is built in its own target directory (target/xtask): the outer build's profile, flags
# and artifacts are never touched.
set -e
root=$(cd "$(dirname "$0")/../.." && pwd)
unset CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_RUNNER
exec "${CARGO:-cargo}" run --quiet --manifest-path "$root/xtask/Cargo.toml" \
    --target-dir "$root/target/xtask" -- vm -- "$@"
