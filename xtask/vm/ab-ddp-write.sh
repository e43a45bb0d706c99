#!/bin/sh
# A/B of two userspace-harness binaries on the 1 MiB DDP WRITE row of bench-rxe, in one VM
# boot, interleaved so that both see the same machine: ROUNDS rounds (default 6) of
# ib_read_bw 1 MiB (the row's reference), then `A bench --workload write --size 1m --depth 4
# --duration DURATION --json`, then the same with B. One line per run; the ratio to compare
# is each run's MB/s over its round's ib_read_bw. Each run's server stage profile (where the
# in-process server's time went: RDMA Reads posted and in flight, Sends, polls, sleeps, the
# rest) follows its line. A == B gives the profile of one binary over ROUNDS runs.
#
#   cargo xtask vm -- sh xtask/vm/ab-ddp-write.sh OLD_HARNESS NEW_HARNESS
#
# env: ROUNDS (6), DURATION (10 seconds per bench run)
A=${1:?usage: ab-ddp-write.sh HARNESS_A HARNESS_B}
B=${2:?usage: ab-ddp-write.sh HARNESS_A HARNESS_B}
ROUNDS=${ROUNDS:-6}
DURATION=${DURATION:-10}
cd "$(dirname "$0")/../.." || exit 2
. xtask/vm/listen.sh
tmp=$(mktemp -d) || exit 2
pt="-d $RXE_DEV -x $RXE_GID_INDEX -F"
rdbw() {
    # shellcheck disable=SC2086 # pt is a list of words
    timeout 180 ib_read_bw $pt -s 1048576 -n 200 >"$tmp/s" 2>&1 &
    s=$!
    wait_listening 18515 150
    # shellcheck disable=SC2086
    timeout 150 ib_read_bw $pt -s 1048576 -n 200 "$RXE_IP" >"$tmp/c" 2>&1
    wait "$s"
    rb=$(awk '$1 == 1048576 { printf "%.2f", $4 * 1.048576; exit }' "$tmp/c")
    echo "round $1: ib_read_bw 1 MiB ${rb:-FAILED} MB/s"
}
# top-level JSON number KEY of the bench line in $tmp/out
jtop() {
    grep '^[[:space:]]*{' "$tmp/out" | tail -1 |
        sed 's/"\(counters\|lat_us\)"[[:space:]]*:[[:space:]]*{[^}]*}//g' |
        sed -n "s/.*\"$1\"[[:space:]]*:[[:space:]]*\([0-9.eE+-]*\).*/\1/p"
}
hb() {
    timeout $((DURATION + 150)) "$1" bench --workload write --size 1m --depth 4 \
        --duration "$DURATION" --json >"$tmp/out" 2>/dev/null
    ops=$(jtop ops) secs=$(jtop secs)
    mbs=$(echo "$ops $secs" | awk '$2 > 0 { printf "%.2f", $1 * 1048576 / $2 / 1e6 }')
    ratio=$(echo "$mbs $rb" | awk '$2 > 0 { printf "%.3f", $1 / $2 }')
    echo "round $2: $3 DDP WRITE 1 MiB ${mbs:-FAILED} MB/s, ratio ${ratio:-?}"
    # The in-process server's stage profile (binaries that have one).
    prof=$(grep '^[[:space:]]*{' "$tmp/out" | tail -1 | sed -n 's/.*"line":"\([^"]*\)".*/\1/p')
    [ -z "$prof" ] || echo "  $3 server stage profile: $prof"
}
r=1
while [ "$r" -le "$ROUNDS" ]; do
    rdbw "$r"
    hb "$A" "$r" A
    hb "$B" "$r" B
    r=$((r + 1))
done
rm -rf "$tmp"
