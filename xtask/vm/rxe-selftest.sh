#!/bin/sh
# Checks Soft-RoCE in the rxe VM: `cargo xtask vm -- xtask/vm/rxe-selftest.sh`.
# ibv_devices, then ibv_rc_pingpong, ib_send_lat and ib_write_bw in loopback: a server in the
# background and a client to $RXE_IP on the same device (rxe loopback never reaches eth0).
# Uses RXE_DEV, RXE_GID_INDEX, RXE_IP as `cargo xtask vm` exports them. Numbers under TCG are
# slow and noisy: compare only ratios measured in one run.
# Env: ITERS (1000), BW_SIZE (65536), LAT_SIZE (2).
: "${RXE_DEV:?run me with cargo xtask vm}" "${RXE_GID_INDEX:?}" "${RXE_IP:?}"
ITERS=${ITERS:-1000}
out=$(mktemp -d)
passed=0
failed=0

# listening, wait_listening
. "$(dirname "$0")/listen.sh"

# pair NAME CMD...: CMD as the server in the background, then CMD $RXE_IP as the client
# once the server listens on perftest's and pingpong's port, 18515.
pair() {
    name=$1
    shift
    echo "== $name: $*"
    start=$(date +%s.%N)
    "$@" >"$out/server" 2>&1 &
    server=$!
    wait_listening 18515 100
    timeout 120 "$@" "$RXE_IP" >"$out/client" 2>&1
    client_rc=$?
    wait "$server"
    server_rc=$?
    sed 's/^/   [client] /' "$out/client"
    [ "$server_rc" = 0 ] || sed 's/^/   [server] /' "$out/server"
    secs=$(echo "$start $(date +%s.%N)" | awk '{printf "%.1f", $2 - $1}')
    if [ "$client_rc" = 0 ] && [ "$server_rc" = 0 ]; then
        echo "   ok: $name ($secs s)"
        passed=$((passed + 1))
    else
        echo "   FAILED: $name (client $client_rc, server $server_rc, $secs s)"
        failed=$((failed + 1))
    fi
}

echo "== $RXE_DEV, RoCE v2 GID index $RXE_GID_INDEX, $RXE_IP"
if ibv_devices | grep -qw "$RXE_DEV"; then
    passed=$((passed + 1))
else
    echo "   FAILED: ibv_devices does not list $RXE_DEV"
    failed=$((failed + 1))
fi
pair ibv_rc_pingpong ibv_rc_pingpong -d "$RXE_DEV" -g "$RXE_GID_INDEX" -n "$ITERS" -s 4096
pair ib_send_lat ib_send_lat -d "$RXE_DEV" -x "$RXE_GID_INDEX" -F -n "$ITERS" -s "${LAT_SIZE:-2}"
pair ib_write_bw ib_write_bw -d "$RXE_DEV" -x "$RXE_GID_INDEX" -F -n "$ITERS" -s "${BW_SIZE:-65536}"
rm -rf "$out"
echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
