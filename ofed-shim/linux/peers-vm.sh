#!/bin/sh
# SPDX-License-Identifier: BSD-2-Clause
#
# krpc_rdma.ko against real peers in the VM (issue 12, item 4), each run one insmod whose
# load fails when the run fails:
#
#   1. peer=harness-server: the kernel Requester against `userspace-harness server` (NULL;
#      WRITE and READ at 4 KiB, 4097 B, 64 KiB+3, 1 MiB with DDP; Long Call; Long Reply;
#      32 calls in flight; the server checks WRITE data, the module READ data);
#   2. peer=harness-client: the kernel Responder serving the harness program to two
#      `userspace-harness client` runs (WRITE, then READ, CLIENT_SIZE (1m) each, 8 in
#      flight, 64 calls, DDP both ways; the client verifies READ data, the module WRITE
#      data);
#   3. peer=knfsd: the kernel Requester speaking NFSv3 to knfsd (xtask/vm/knfsd.sh; the root
#      handle from `userspace-harness mount-fh`): NULL, GETATTR, LOOKUP, READ of a 1 MiB+3
#      random file, WRITE of it to another (read chunk), READ back (write chunk), compared in
#      the module; then `cmp` of the two files here.
#
# Then `rdma resource show` must equal its output before the first insmod (around the knfsd
# run's insmod/rmmod for that one), and the kernel
# log must have no WARNING/BUG/Oops/kmemleak/"Call Trace"/LEAK/FAIL line. Run as root in the
# project's VM from the repository's root, after `cargo xtask kmod` and `cargo build
# --release -p userspace-harness`:
#
#   cargo xtask vm -- sh ofed-shim/linux/peers-vm.sh
#
# PEERS="harness-server harness-client knfsd" (the default) picks the runs; CLIENT_SIZE
# (1m), CLIENT_DEPTH (8) and CLIENT_COUNT (64) shape the client runs of harness-client.
set -u
PEERS=${PEERS:-harness-server harness-client knfsd}
DEPTH=${CLIENT_DEPTH:-8}
SIZE=${CLIENT_SIZE:-1m}
COUNT=${CLIENT_COUNT:-64}
KO=${KO:-target/kmod/linux/krpc_rdma.ko}
BIN=${HARNESS:-${CARGO_TARGET_DIR:-target}/release/userspace-harness}
ADDR=${RXE_IP:-10.0.2.15}
TMP=$(mktemp -d)
fail() {
	dmesg | grep -E "krpc_rdma|WARNING|BUG|Oops|Call Trace" | tail -n 20
	for f in "$TMP"/*.log; do [ -f "$f" ] && { echo "--- $f"; tail -n 20 "$f"; }; done
	echo "peers-vm: FAIL: $*"
	exit 1
}

[ -f "$KO" ] || fail "$KO not found (cargo xtask kmod)"
[ -x "$BIN" ] || fail "$BIN not found (cargo build --release -p userspace-harness)"
modprobe rdma_cm || fail "modprobe rdma_cm"
dmesg -C
before=$(rdma resource show) || fail "rdma resource show"
echo "rdma resource show before: $before"
t0=$(date +%s)

runs=0
has() { case " $PEERS " in *" $1 "*) return 0 ;; esac; return 1; }

# 1. The kernel Requester against the userspace server.
if has harness-server; then
runs=$((runs + 1))
"$BIN" server --listen "$ADDR:20249" --count 1 --duration 120 >"$TMP/server.log" 2>&1 &
server=$!
i=0
until grep -q "listening on" "$TMP/server.log"; do
	i=$((i + 1))
	[ "$i" -le 100 ] || fail "the harness server did not start"
	sleep 0.2
done
insmod "$KO" peer=harness-server rdma_addr="$ADDR" peer_port=20249 || fail "peer=harness-server: insmod failed"
rmmod krpc_rdma || fail "rmmod after peer=harness-server"
i=0
while kill -0 "$server" 2>/dev/null; do
	i=$((i + 1))
	[ "$i" -le 100 ] || { kill "$server"; fail "the harness server did not exit after its connection"; }
	sleep 0.2
done
wait "$server" || fail "the harness server failed"
grep -q " 0 mismatched bytes, 0 errors" "$TMP/server.log" || fail "harness server: $(cat "$TMP/server.log")"
echo "harness server: $(grep "^server:" "$TMP/server.log")"
fi

# 2. The kernel Responder serving two userspace clients.
if has harness-client; then
runs=$((runs + 1))
insmod "$KO" peer=harness-client rdma_addr="$ADDR" peer_port=20250 peer_conns=2 &
insmod=$!
client() {
	# The module listens within moments of the insmod: try to connect for up to 20 s.
	n=0
	while :; do
		"$BIN" client --server "$ADDR:20250" --quiet "$@" >"$TMP/client.log" 2>&1 && return 0
		n=$((n + 1))
		grep -q "cannot connect" "$TMP/client.log" && [ "$n" -le 40 ] || return 1
		sleep 0.5
	done
}
client --workload write --size "$SIZE" --depth "$DEPTH" --count "$COUNT" || { kill "$insmod"; fail "client write: $(cat "$TMP/client.log")"; }
echo "client write $SIZE: $(grep -i "ops" "$TMP/client.log" | head -n 1)"
client --workload read --size "$SIZE" --depth "$DEPTH" --count "$COUNT" || { kill "$insmod"; fail "client read: $(cat "$TMP/client.log")"; }
echo "client read $SIZE: $(grep -i "ops" "$TMP/client.log" | head -n 1)"
wait "$insmod" || fail "peer=harness-client: insmod failed"
rmmod krpc_rdma || fail "rmmod after peer=harness-client"
fi
after=$(rdma resource show) || fail "rdma resource show"
[ "$after" = "$before" ] || fail "rdma resource show after: $after (before: $before)"

# 3. The kernel Requester speaking NFSv3 to knfsd (its listeners hold cm ids of their own:
# the comparison is around the module's load and unload).
if has knfsd; then
runs=$((runs + 1))
sh xtask/vm/knfsd.sh >"$TMP/knfsd.log" 2>&1 || fail "knfsd set-up: $(cat "$TMP/knfsd.log")"
head -c 1048579 /dev/urandom >/export/krpc_src || fail "writing /export/krpc_src"
: >/export/krpc_dst
fh=$("$BIN" mount-fh --server "$ADDR" --export /export) || fail "MOUNT /export"
echo "knfsd root handle: $fh"
kbefore=$(rdma resource show) || fail "rdma resource show"
insmod "$KO" peer=knfsd rdma_addr="$ADDR" peer_port=20049 nfs_fh="$fh" || fail "peer=knfsd: insmod failed"
rmmod krpc_rdma || fail "rmmod after peer=knfsd"
kafter=$(rdma resource show) || fail "rdma resource show"
[ "$kafter" = "$kbefore" ] || fail "rdma resource show after peer=knfsd: $kafter (before: $kbefore)"
cmp /export/krpc_src /export/krpc_dst || fail "cmp /export/krpc_src /export/krpc_dst"
echo "cmp /export/krpc_src /export/krpc_dst: equal ($(stat -c %s /export/krpc_dst) bytes)"
rm -f /export/krpc_src /export/krpc_dst
fi
t1=$(date +%s)
log=$(dmesg)
echo "$log" | grep "krpc_rdma peer"
bad=$(echo "$log" | grep -E "WARNING|BUG|Oops|kmemleak|Call Trace|LEAK|FAIL")
[ -z "$bad" ] || fail "kernel log: $bad"
pass=$(echo "$log" | grep -c "krpc_rdma peer .*: PASS: ")
[ "$pass" -eq "$runs" ] || fail "$pass PASS lines for $runs peer runs"
clean=$(echo "$log" | grep -c "krpc_rdma: unload: 0 allocations and 0 page references outstanding, 0 cm ids, pds, cqs, qps, mrs and dma maps live")
[ "$clean" -eq "$runs" ] || fail "$clean clean unloads of $runs"
rm -rf "$TMP"
echo "peers-vm: ok: $runs peer runs passed in $((t1 - t0)) s ($PEERS), $runs clean unloads, rdma resource show unchanged, no WARNING/BUG/Oops/kmemleak in the kernel log"
