#!/bin/sh
# SPDX-License-Identifier: BSD-2-Clause
#
# The NFSv3 server inside krpc_rdma.ko (issue 26), mounted by the Linux kernel NFS client
# over RDMA in the project's VM:
#
#   1. insmod krpc_rdma.ko nfsd=1 rdma_addr=$RXE_IP (port 20050, NFSD_MIB MiB of kernel
#      memory, root not squashed: the workloads chown);
#   2. `userspace-harness mountd` answers MOUNT with the module's root handle
#      (/sys/module/krpc_rdma/parameters/nfsd_root_fh);
#   3. mount -t nfs -o vers=3,proto=rdma,port=20050,mountport=20048,mountproto=tcp,nolock;
#   4. xtask/vm/nfs-workload.sh on the mount, RUNS times (WORKLOAD=short: CI's list), every
#      result read back through the mount and compared with a local copy;
#   5. rmmod while mounted must fail ("in use"), never oops; then umount, rmmod (retried
#      while the connection winds down), the module's unload report: no LEAK line; `rdma
#      resource show` as before the insmod; no WARNING/BUG/Oops/"Call Trace" in the log;
#      the module's report at unload: no transport payload copy (ddp_payload_copied_bytes
#      absent).
#
# Run as root in the VM from the repository's root, after `cargo xtask kmod` and `cargo
# build --release -p userspace-harness`:
#
#   cargo xtask vm -- sh ofed-shim/linux/nfsd-vm.sh [RUNS] [short]
set -u
RUNS=${1:-1}
WORKLOAD=${2:-}
KO=${KO:-target/kmod/linux/krpc_rdma.ko}
BIN=${HARNESS:-${CARGO_TARGET_DIR:-target}/release/userspace-harness}
ADDR=${RXE_IP:-10.0.2.15}
PORT=${NFSD_PORT:-20050}
MPORT=${NFSD_MOUNT_PORT:-20048}
MIB=${NFSD_MIB:-768}
MNT=/mnt/krpc-nfsd
TMP=$(mktemp -d)
SCRATCH=$TMP/scratch
mountd=
fail() {
	dmesg | grep -E "krpc_rdma|WARNING|BUG|Oops|Call Trace|rpcrdma" | tail -n 30
	[ -f "$TMP/mountd.log" ] && { echo "--- mountd"; tail -n 20 "$TMP/mountd.log"; }
	[ -r /sys/kernel/debug/krpc_rdma/nfsd ] && cat /sys/kernel/debug/krpc_rdma/nfsd
	echo "nfsd-vm: FAIL: $*"
	umount -f "$MNT" 2>/dev/null
	[ -n "$mountd" ] && kill "$mountd" 2>/dev/null
	exit 1
}

[ -f "$KO" ] || fail "$KO not found (cargo xtask kmod)"
[ -x "$BIN" ] || fail "$BIN not found (cargo build --release -p userspace-harness)"
modprobe rdma_cm || fail "modprobe rdma_cm"
modprobe rpcrdma || fail "modprobe rpcrdma"
mountpoint -q /sys/kernel/debug || mount -t debugfs none /sys/kernel/debug
dmesg -C
before=$(rdma resource show) || fail "rdma resource show"
t0=$(date +%s)

insmod "$KO" nfsd=1 rdma_addr="$ADDR" nfsd_port="$PORT" nfsd_mib="$MIB" nfsd_no_root_squash=1 ||
	fail "insmod nfsd=1"
dmesg | grep "krpc_rdma nfsd: serving" || fail "no 'serving' line"
fhf=/sys/module/krpc_rdma/parameters/nfsd_root_fh
"$BIN" mountd --listen "$ADDR:$MPORT" --export /kernel --fh-file "$fhf" >"$TMP/mountd.log" 2>&1 &
mountd=$!
i=0
until grep -q "mountd: serving" "$TMP/mountd.log"; do
	i=$((i + 1))
	[ "$i" -le 100 ] || fail "mountd did not start: $(cat "$TMP/mountd.log")"
	sleep 0.2
done
mkdir -p "$MNT" "$SCRATCH"
opts="vers=3,proto=rdma,port=$PORT,mountport=$MPORT,mountproto=tcp,nolock"
mount -t nfs -o "$opts" "$ADDR:/kernel" "$MNT" || fail "mount -o $opts $ADDR:/kernel"
grep " $MNT " /proc/mounts

run=1
while [ "$run" -le "$RUNS" ]; do
	echo "nfsd-vm: workload run $run of $RUNS"
	sh xtask/vm/nfs-workload.sh "$MNT" "$SCRATCH" $WORKLOAD || fail "workload run $run"
	run=$((run + 1))
done
report=$(cat /sys/kernel/debug/krpc_rdma/nfsd)
echo "$report"

# Unload under a mounted client: refused while the connection is up, never an oops.
if rmmod krpc_rdma 2>"$TMP/rmmod.err"; then
	fail "rmmod succeeded with the file system mounted and its connection up"
fi
echo "rmmod while mounted: refused ($(cat "$TMP/rmmod.err"))"
umount "$MNT" || fail "umount"
kill "$mountd" && wait "$mountd"
mountd=
i=0
until rmmod krpc_rdma 2>/dev/null; do
	i=$((i + 1))
	[ "$i" -le 60 ] || fail "rmmod after umount: still in use after 30 s"
	sleep 0.5
done
sleep 1
after=$(rdma resource show) || fail "rdma resource show"
[ "$after" = "$before" ] || fail "rdma resource show after: $after (before: $before)"
log=$(dmesg)
echo "$log" | grep -E "krpc_rdma: unload" || fail "no unload report"
echo "$log" | grep -qE "LEAK|WARNING|BUG|Oops|Call Trace|kmemleak" && fail "kernel log: $(echo "$log" | grep -E "LEAK|WARNING|BUG|Oops|Call Trace|kmemleak" | head -n 5)"
# The module's report at unload: every connection has ended, so its transport counters are
# in (zero counters are left out of the line).
final=$(echo "$log" | grep "krpc_rdma nfsd: connections" | tail -n 1)
echo "at unload: $final"
case $final in
*"transport (ended connections): "*) ;;
*) fail "no transport counters in the unload report: $final" ;;
esac
case $final in
*ddp_payload_copied_bytes*) fail "the transport copied payload bytes: $final" ;;
esac
echo "nfsd-vm: ok: $RUNS workload run(s) against the in-kernel server in $(($(date +%s) - t0)) s; rmmod refused while mounted; clean unload; rdma resource show unchanged; no WARNING/BUG/Oops/LEAK in the kernel log"
rm -rf "$TMP"
