#!/bin/sh
# SPDX-License-Identifier: BSD-2-Clause
#
# Where the guest's CPU goes during a dd O_DIRECT write and read through the Linux client to
# knfsd and to krpc_rdma.ko's NFSv3 server: `perf record -a -g` around each, then the top
# symbols (`perf report --no-children --sort sym`), into target/profile-kernel-nfsd/. The
# profile behind the dd rows of `cargo xtask bench-kernel` (docs/PERFORMANCE.md).
#
#   cargo xtask kmod && cargo build --release -p userspace-harness
#   cargo xtask vm -- sh xtask/vm/profile-kernel-nfsd.sh
#
# Env: MB (64), KO, HARNESS, TOP (30 lines per report).
export LC_ALL=C
set -u
MB=${MB:-64}
KO=${KO:-target/kmod/linux/krpc_rdma.ko}
H=${HARNESS:-target/release/userspace-harness}
IP=${RXE_IP:-10.0.2.15}
OUT=target/profile-kernel-nfsd
TOP=${TOP:-30}
die() { echo "profile-kernel-nfsd: FAIL: $*"; exit 1; }
command -v perf >/dev/null || die "no perf in the guest"
mkdir -p "$OUT" /mnt/p-knfsd /mnt/p-kernel
modprobe -a rdma_cm rpcrdma nfsv3 || die modprobe
EXPORT_SIZE=256m sh xtask/vm/knfsd.sh >/dev/null 2>&1 || die "knfsd set-up"
insmod "$KO" nfsd=1 rdma_addr="$IP" nfsd_no_root_squash=1 || die "insmod nfsd=1"
"$H" mountd --listen "$IP:20148" --export /kernel \
	--fh-file /sys/module/krpc_rdma/parameters/nfsd_root_fh >/dev/null 2>&1 &
mpid=$!
sleep 2
O=vers=3,proto=rdma,nolock,rsize=262144,wsize=262144
mount -t nfs -o "$O,port=20049" "$IP:/export" /mnt/p-knfsd || die "mount knfsd"
mount -t nfs -o "$O,port=20050,mountport=20148,mountproto=tcp" "$IP:/kernel" /mnt/p-kernel ||
	die "mount kernel"
head -c $((MB * 1048576)) /dev/urandom >/tmp/p-src
for s in knfsd kernel; do
	for op in write read; do
		sync; echo 3 >/proc/sys/vm/drop_caches
		perf record -a -g -o /tmp/perf.data >/dev/null 2>&1 &
		ppid=$!
		sleep 1
		t0=$(date +%s.%N)
		if [ "$op" = write ]; then
			dd if=/tmp/p-src of=/mnt/p-$s/p bs=1M oflag=direct status=none
		else
			dd if=/mnt/p-$s/p of=/dev/null bs=1M iflag=direct status=none
		fi
		t1=$(date +%s.%N)
		kill -INT "$ppid"; wait "$ppid"
		f="$OUT/$s-$op.txt"
		echo "$s $op $MB MiB: $(echo "$t0 $t1" | awk -v mb="$MB" '{printf "%.1f MiB/s", mb/($2-$1)}')" >"$f"
		perf report -i /tmp/perf.data --no-children --sort comm,sym --stdio -g none 2>/dev/null |
			grep -v '^#' | grep -v '^$' | head -n "$TOP" >>"$f"
		head -n 12 "$f"
	done
	rm -f "/mnt/p-$s/p"
done
umount /mnt/p-knfsd /mnt/p-kernel
kill "$mpid"; wait "$mpid" 2>/dev/null
i=0
until rmmod krpc_rdma 2>/dev/null; do
	i=$((i + 1)); [ "$i" -le 60 ] || die "rmmod"
	sleep 0.5
done
echo "profile-kernel-nfsd: reports in $OUT/"
