#!/bin/sh
# SPDX-License-Identifier: BSD-2-Clause
#
# Where the time of krpc_rdma.ko's NFSv3 server goes during a dd O_DIRECT write and read
# through the Linux client (the dd rows of `cargo xtask bench-kernel`, docs/PERFORMANCE.md),
# from the module's own stage profile (`provider::profile`: every verbs call of the
# connection's thread and its sleeps timed with the kernel's monotonic clock; debugfs
# krpc_rdma/nfsd). knfsd's rate for the same dd beside it. One mount per dd, so that the
# connection ends (and its profile is complete) before the second reading.
#
#   cargo xtask kmod && cargo build --release -p userspace-harness
#   cargo xtask vm -- sh xtask/vm/profile-kernel-nfsd.sh
#
# Prints, per dd: the rate, then each stage's time as a share of the dd's elapsed time, its
# calls and mean; `other` is the thread's time outside verbs calls and sleeps (the core, the
# NFS service, the file system); read_wait is an RDMA Read's post → completion latency.
# Env: MB (256), RUNS (3), KO, HARNESS.
export LC_ALL=C
set -u
MB=${MB:-256}
RUNS=${RUNS:-3}
KO=${KO:-target/kmod/linux/krpc_rdma.ko}
H=${HARNESS:-target/release/userspace-harness}
IP=${RXE_IP:-10.0.2.15}
DBG=/sys/kernel/debug/krpc_rdma/nfsd
die() { echo "profile-kernel-nfsd: FAIL: $*"; exit 1; }
mkdir -p /mnt/p-knfsd /mnt/p-kernel
mountpoint -q /sys/kernel/debug || mount -t debugfs none /sys/kernel/debug
modprobe -a rdma_cm rpcrdma nfsv3 || die modprobe
EXPORT_SIZE=768m sh xtask/vm/knfsd.sh >/dev/null 2>&1 || die "knfsd set-up"
insmod "$KO" nfsd=1 rdma_addr="$IP" nfsd_mib=768 nfsd_no_root_squash=1 || die "insmod nfsd=1"
"$H" mountd --listen "$IP:20148" --export /kernel \
	--fh-file /sys/module/krpc_rdma/parameters/nfsd_root_fh >/dev/null 2>&1 &
mpid=$!
sleep 2
O=vers=3,proto=rdma,nolock,rsize=262144,wsize=262144
head -c $((MB * 1048576)) /dev/urandom >/tmp/p-src
mnt() {
	case $1 in
	knfsd) mount -t nfs -o "$O,port=20049" "$IP:/export" /mnt/p-knfsd ;;
	kernel) mount -t nfs -o "$O,port=20050,mountport=20148,mountproto=tcp" "$IP:/kernel" \
		/mnt/p-kernel ;;
	esac || die "mount $1"
}
# The `name value` pairs of the stage profile in the debugfs line.
prof() { sed -n 's/.*stage profile: \([^(]*\) (.*/\1/p' "$DBG"; }
# delta BEFORE AFTER SECONDS: each stage's share of SECONDS, calls and mean.
delta() {
	printf '%s\n%s\n' "$1" "$2" | awk -v secs="$3" '
	NR == 1 { for (i = 1; i < NF; i += 2) a[$i] = $(i + 1); next }
	{ for (i = 1; i < NF; i += 2) { k = $i; d[k] = $(i + 1) - a[k]; if (k ~ /_ns$/) o[++n] = k } }
	END {
		line = "  wall " sprintf("%.2f", d["wall_ns"] / 1e9) " s of the connection;"
		for (j = 1; j <= n; j++) {
			k = o[j]; s = substr(k, 1, length(k) - 3)
			if (k == "wall_ns" || k ~ /wait_ns$/) continue
			c = (k == "other_ns") ? 0 : d[s "_n"]
			if (k != "other_ns" && c == 0) continue
			line = line sprintf(" %s %.1f%%", s, 100 * d[k] / 1e9 / secs)
			if (c > 0) line = line sprintf(" (%d x %.0f us)", c, d[k] / c / 1e3)
			line = line ","
		}
		if (d["read_wait_n"] > 0)
			line = line sprintf(" read_wait %d x %.0f us,", d["read_wait_n"], d["read_wait_ns"] / d["read_wait_n"] / 1e3)
		if (d["send_wait_n"] > 0)
			line = line sprintf(" send_wait %d x %.0f us,", d["send_wait_n"], d["send_wait_ns"] / d["send_wait_n"] / 1e3)
		line = line sprintf(" RDMA Read %.1f MB", d["read_bytes"] / 1e6)
		print line
	}'
}
r=1
while [ "$r" -le "$RUNS" ]; do
	for op in write read; do
		for s in knfsd kernel; do
			mnt "$s"
			[ "$op" = write ] || { sync; echo 3 >/proc/sys/vm/drop_caches; }
			before=$(prof)
			t0=$(date +%s.%N)
			if [ "$op" = write ]; then
				dd if=/tmp/p-src of="/mnt/p-$s/p" bs=1M oflag=direct status=none || die "dd $s"
			else
				dd if="/mnt/p-$s/p" of=/dev/null bs=1M iflag=direct status=none || die "dd $s"
			fi
			t1=$(date +%s.%N)
			umount "/mnt/p-$s" || die "umount $s"
			secs=$(echo "$t0 $t1" | awk '{printf "%.3f", $2 - $1}')
			echo "run $r: $s dd $op $MB MiB: $(echo "$secs" | awk -v mb="$MB" '{printf "%.1f MiB/s", mb / $1}') ($secs s)"
			if [ "$s" = kernel ]; then
				i=0
				# The connection's thread publishes its last figures when it ends.
				while [ "$(sed -n 's/.* \([0-9]*\) open;.*/\1/p' "$DBG")" != 0 ]; do
					i=$((i + 1)); [ "$i" -le 100 ] || die "the connection did not end"
					sleep 0.1
				done
				delta "$before" "$(prof)" "$secs"
			fi
		done
	done
	r=$((r + 1))
done
for s in knfsd kernel; do mnt "$s"; rm -f "/mnt/p-$s/p"; umount "/mnt/p-$s"; done
kill "$mpid"; wait "$mpid" 2>/dev/null
i=0
until rmmod krpc_rdma 2>/dev/null; do
	i=$((i + 1)); [ "$i" -le 60 ] || die "rmmod"
	sleep 0.5
done
echo "profile-kernel-nfsd: ok"
