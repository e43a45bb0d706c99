#!/bin/sh
# Instructions per small round trip in the transport (both ends, the software provider
# excluded), by callgrind over the bench's profile loop (KRPC_RDMA_BENCH_PROFILE).
#
# Collection is toggled on at the four transport entry points the loop calls and toggled off
# again inside every `Provider` method of the software provider (a toggle flips the state,
# so a provider call nested in a transport call is excluded). Two runs (N1 and N2 round trips)
# cancel the set-up: per round trip = (I(N2) - I(N1)) / (N2 - N1). The whole-loop figure
# (inputs built and dropped, provider included) is printed too.
#
# Usage: krpc-rdma/benches/callgrind.sh [N1 N2]   (from the workspace root)
# KRPC_RDMA_BENCH_PROFILE_KIND=write|read profiles the 1 MiB DDP round trips instead (use
# small N, e.g. 20 40: each round trip moves 1 MiB through the software provider).
set -eu
N1=${1:-10000}
N2=${2:-20000}
# The bench is the `tests` package's (tests/benches/transport.rs); its binary is the one cargo
# names on its `Executable` line (wherever CARGO_TARGET_DIR puts it). BENCH_BIN overrides.
BUILT=$(cargo bench -p tests --bench transport --no-run 2>&1 |
    sed -n 's/^ *Executable .*(\(.*\))$/\1/p' | tail -1)
BIN=${BENCH_BIN:-$BUILT}
[ -n "$BIN" ] || { echo "callgrind.sh: cargo bench -p tests --bench transport --no-run failed" >&2; exit 1; }
OUT=${TMPDIR:-/tmp}/krpc-rdma-callgrind
mkdir -p "$OUT"
# An inherent method defined in a submodule of its type's module demangles as
# `module::<impl Type>::method` (`requester::marshal::<impl ...::Requester>::call`,
# `responder::reply::<impl ...::Responder>::reply`): both spellings are listed.
TOGGLES="--toggle-collect=*Requester::call* --toggle-collect=*Requester>::call*
 --toggle-collect=*Requester::poll_bounded* --toggle-collect=*Requester>::poll_bounded*
 --toggle-collect=*Responder::poll_bounded* --toggle-collect=*Responder>::poll_bounded*
 --toggle-collect=*Responder::reply* --toggle-collect=*Responder>::reply*
 --toggle-collect=*SoftQp?as?krpc_rdma::provider::Provider>::*"
run() {
    KRPC_RDMA_BENCH_PROFILE=$1 valgrind --tool=callgrind --callgrind-out-file="$OUT/$2.$1" \
        $3 "$BIN" >/dev/null 2>"$OUT/$2.$1.log"
    grep -o 'Collected : [0-9]*' "$OUT/$2.$1.log" | grep -o '[0-9]*'
}
T1=$(run "$N1" transport "$TOGGLES")
T2=$(run "$N2" transport "$TOGGLES")
A1=$(run "$N1" all "")
A2=$(run "$N2" all "")
echo "transport only (provider excluded): $(( (T2 - T1) / (N2 - N1) )) instructions per round trip"
echo "whole loop (inputs, drops, provider): $(( (A2 - A1) / (N2 - N1) )) instructions per round trip"
echo "profiles in $OUT (callgrind_annotate --inclusive=yes $OUT/transport.$N2)"
