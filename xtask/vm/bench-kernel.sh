#!/bin/sh
# SPDX-License-Identifier: BSD-2-Clause
#
# The Linux kernel NFS client (xprtrdma) against three NFSv3/RDMA servers in one VM boot, same
# client, same mount options (vers=3,proto=rdma,nolock; rsize/wsize as negotiated, 1 MiB):
#
#   knfsd   Linux's own server (svcrdma), xtask/vm/knfsd.sh: tmpfs /export, exported `sync`
#           (exports(5)'s default): every WRITE is stable before its reply;
#   kernel  krpc_rdma.ko nfsd=1: our server in the kernel, file data in kernel memory
#           (nfs-pagefs), every WRITE answered FILE_SYNC (memory is its stable storage);
#   user    `userspace-harness nfsd` on a tmpfs export (LocalFs, pwritev/preadv on tmpfs).
#
# Every mount adds OPTS (default rsize=262144,wsize=262144: knfsd offers 256 KiB over RDMA,
# our servers 1 MiB; pinned, the three move the same I/O sizes).
#
# Rows (each a median of RUNS runs, the servers interleaved in every run): dd write and read of
# MB MiB with O_DIRECT (bs=1M; client and server caches dropped before each read), `tar x` of
# FILES small files (700..6,700 bytes), `ls -l` of a directory of ENTRIES entries (client cache
# dropped first); beside each rate the CPU seconds the whole guest spent (/proc/stat,
# user+nice+system+irq+softirq, both vCPUs) during the step. The client's per-op counts
# (WRITE, COMMIT, ...) of each mount at the end go to the log: what "stable" meant.
#
#   cargo xtask bench-kernel             (builds the module and the harness, runs this)
#   sh xtask/vm/bench-kernel.sh --table FILE [--log FILE]   (in the VM)
#
# Then the two clients against knfsd: our kernel Requester (krpc_rdma.ko
# peer=knfsd-bench-{write,read,null}, one insmod each, timed by the module) vs the Linux client
# (DEPTH parallel `dd` O_DIRECT streams of IO_KIB-KiB requests, each MB/DEPTH MiB of one
# file: DEPTH RPCs in flight, as ours), READ and WRITE of MB
# MiB at DEPTHS calls in flight (the I/O size is knfsd's rtmax/wtmax, 256 KiB, for both), the
# guest's CPU seconds per GiB beside the rate; and our Requester's NULL calls per second
# (the Linux client has no way to send NULL over RDMA from user space: no reference).
#
# Env: MB (256), FILES (300), ENTRIES (5000), RUNS (3), DEPTHS ("1 8 32"), NULLS (16384),
# IO_KIB (256: knfsd's rsize/wsize), PART (all; servers: the first table only; requesters:
# the second only), OPTS, KO, HARNESS.
export LC_ALL=C
set -u
MB=${MB:-256}
FILES=${FILES:-300}
ENTRIES=${ENTRIES:-5000}
RUNS=${RUNS:-3}
DEPTHS=${DEPTHS:-1 8 32}
NULLS=${NULLS:-16384}
IO_KIB=${IO_KIB:-256}
PART=${PART:-all}
OPTS=${OPTS:-rsize=262144,wsize=262144}
KO=${KO:-target/kmod/linux/krpc_rdma.ko}
H=${HARNESS:-target/release/userspace-harness}
IP=${RXE_IP:-10.0.2.15}
TABLE=target/bench-kernel/table.md
LOG=target/bench-kernel/bench.log
while [ $# -gt 0 ]; do
	case $1 in
	--table) TABLE=$2; shift 2 ;;
	--log) LOG=$2; shift 2 ;;
	*) echo "bench-kernel: unknown argument $1" >&2; exit 2 ;;
	esac
done
mkdir -p "$(dirname "$TABLE")" "$(dirname "$LOG")"
: >"$LOG"
W=$(mktemp -d)
R=$W/results
: >"$R"
die() { echo "bench-kernel: FAIL: $*" | tee -a "$LOG"; exit 1; }
say() { echo "bench-kernel: $*" | tee -a "$LOG"; }

[ -f "$KO" ] || die "$KO not found (cargo xtask kmod)"
[ -x "$H" ] || die "$H not found (cargo build --release -p userspace-harness)"
modprobe -a rdma_cm rpcrdma nfsv3 || die "modprobe"
EXPORT_SIZE=768m sh xtask/vm/knfsd.sh >>"$LOG" 2>&1 || die "knfsd set-up (log: $LOG)"
mkdir -p /export-user /mnt/b-knfsd /mnt/b-kernel /mnt/b-user
O=vers=3,proto=rdma,nolock,$OPTS
head -c $((MB * 1048576)) /dev/urandom >"$W/src"

now() { date +%s.%N; }
busy() { awk '/^cpu /{print $2+$3+$4+$7+$8}' /proc/stat; }
drop() { sync; echo 3 >/proc/sys/vm/drop_caches; }
# timed SERVER ROW UNITS CMD...: run CMD, record "SERVER ROW value cpu" (value = UNITS/s).
timed() {
	srv=$1; row=$2; units=$3; shift 3
	c0=$(busy); t0=$(now)
	"$@" >>"$LOG" 2>&1 || die "$srv $row: $*"
	t1=$(now); c1=$(busy)
	echo "$srv $row $t0 $t1 $c0 $c1 $units" |
		awk '{s=$4-$3; printf "%s %s %.3f %.2f\n", $1, $2, $7/s, ($6-$5)/100}' >>"$R"
	tail -n 1 "$R" | awk '{printf "bench-kernel: %-6s %-10s %10.2f/s  cpu %.2f s\n", $1, $2, $3, $4}' | tee -a "$LOG"
}

# Part 1: the three servers, the same client.
servers() {
mountpoint -q /export-user || mount -t tmpfs -o size=768m tmpfs /export-user
"$H" nfsd --listen "$IP:20249" --export /export-user --mount-port 20248 \
	--clients '*(rw,no_root_squash)' --no-lock >>"$LOG" 2>&1 &
upid=$!
insmod "$KO" nfsd=1 rdma_addr="$IP" nfsd_mib=768 nfsd_no_root_squash=1 || die "insmod nfsd=1"
"$H" mountd --listen "$IP:20148" --export /kernel \
	--fh-file /sys/module/krpc_rdma/parameters/nfsd_root_fh >>"$LOG" 2>&1 &
mpid=$!
sleep 3
mount -t nfs -o "$O,port=20049" "$IP:/export" /mnt/b-knfsd || die "mount knfsd"
mount -t nfs -o "$O,port=20050,mountport=20148,mountproto=tcp" "$IP:/kernel" /mnt/b-kernel ||
	die "mount kernel"
mount -t nfs -o "$O,port=20249,mountport=20248,mountproto=tcp" "$IP:/export-user" /mnt/b-user ||
	die "mount user"
grep " /mnt/b-" /proc/mounts >>"$LOG"

say "preparing: $MB MiB of random data, $FILES small files, directories of $ENTRIES entries"
mkdir -p "$W/small"
i=0
while [ "$i" -lt "$FILES" ]; do
	head -c $((700 + i * 13 % 6000)) /dev/urandom >"$W/small/f$i"
	i=$((i + 1))
done
tar cf "$W/small.tar" -C "$W" small
for s in knfsd kernel user; do
	mkdir "/mnt/b-$s/big" || die "mkdir /mnt/b-$s/big"
	(cd "/mnt/b-$s/big" && i=0 && while [ "$i" -lt "$ENTRIES" ]; do : >"e$i"; i=$((i + 1)); done) ||
		die "making $ENTRIES entries on $s"
done

run=1
while [ "$run" -le "$RUNS" ]; do
	say "run $run of $RUNS"
	for s in knfsd kernel user; do
		m=/mnt/b-$s
		drop
		timed "$s" dd-write "$MB" dd if="$W/src" of="$m/bench" bs=1M oflag=direct
		drop
		timed "$s" dd-read "$MB" dd if="$m/bench" of=/dev/null bs=1M iflag=direct
		rm -f "$m/bench"
		drop
		timed "$s" tar-x "$FILES" tar xf "$W/small.tar" -C "$m"
		rm -rf "$m/small"
		drop
		timed "$s" ls-l "$ENTRIES" sh -c "ls -l $m/big >/dev/null"
	done
	run=$((run + 1))
done
for s in knfsd kernel user; do
	echo "--- per-op counts of /mnt/b-$s (ops, transmissions, ...)" >>"$LOG"
	awk -v m="/mnt/b-$s" '$1=="device"{on=($5==m)} on&&/per-op statistics/{p=1;next} on&&p&&NF>=9&&$2>0{print}' /proc/self/mountstats >>"$LOG"
	rm -rf "/mnt/b-$s/big"
done
umount /mnt/b-knfsd /mnt/b-kernel /mnt/b-user
kill "$mpid" "$upid" 2>/dev/null
wait "$mpid" "$upid" 2>/dev/null
cat /sys/kernel/debug/krpc_rdma/nfsd >>"$LOG" 2>/dev/null
i=0
until rmmod krpc_rdma 2>/dev/null; do
	i=$((i + 1))
	[ "$i" -le 60 ] || die "rmmod: still in use after 30 s"
	sleep 0.5
done
dmesg | grep "krpc_rdma nfsd: connections" | tail -n 1 >>"$LOG"
}

# Part 2: our kernel Requester vs the Linux client, both against knfsd.
requesters() {
mount -t nfs -o "$O,port=20049" "$IP:/export" /mnt/b-knfsd || die "mount knfsd again"
head -c $((MB * 1048576)) /dev/urandom >/export/krpc_bench
fh=$("$H" mount-fh --server "$IP" --export /export) || die "MOUNT /export (mount-fh)"
# kreq ROW DEPTH KIND: one insmod of the module's benchmark run; its rate from its report.
kreq() {
	row=$1; d=$2; kind=$3
	drop
	c0=$(busy)
	# NULL: peer_mib thousands (1,024) of calls.
	mib=$MB
	[ "$kind" = null ] && mib=$((NULLS / 1024))
	insmod "$KO" peer="knfsd-bench-$kind" rdma_addr="$IP" peer_port=20049 peer_conns="$d" \
		peer_mib="$mib" nfs_fh="$fh" >>"$LOG" 2>&1 || die "insmod peer=knfsd-bench-$kind"
	c1=$(busy)
	rmmod krpc_rdma || die "rmmod after knfsd-bench-$kind"
	line=$(dmesg | grep "krpc_rdma peer knfsd-bench" | tail -n 1)
	echo "$line" >>"$LOG"
	rate=$(echo "$line" | sed -n 's/.*: \([0-9.]*\) \(MiB\|calls\)\/s.*/\1/p')
	[ -n "$rate" ] || die "no rate in: $line"
	echo "kernel $row $rate $(echo "$c0 $c1" | awk '{printf "%.2f", ($2-$1)/100}')" >>"$R"
	tail -n 1 "$R" | awk '{printf "bench-kernel: %-6s %-12s %10s/s  cpu %s s\n", $1, $2, $3, $4}' | tee -a "$LOG"
}
# lclient ROW DEPTH write|read: DEPTH dd streams over one file, each O_DIRECT in IO-KiB
# requests (knfsd's rsize / wsize: one RPC each, so DEPTH streams are DEPTH RPCs in flight).
lclient() {
	row=$1; d=$2; dir=$3
	per=$((MB * 1024 / IO_KIB / d))
	drop
	c0=$(busy); t0=$(now)
	i=0
	while [ "$i" -lt "$d" ]; do
		if [ "$dir" = write ]; then
			dd if="$W/src" of=/mnt/b-knfsd/krpc_bench bs="${IO_KIB}k" count="$per" \
				skip=$((i * per)) seek=$((i * per)) oflag=direct conv=notrunc status=none &
		else
			dd if=/mnt/b-knfsd/krpc_bench of=/dev/null bs="${IO_KIB}k" count="$per" \
				skip=$((i * per)) iflag=direct status=none &
		fi
		i=$((i + 1))
	done
	wait
	t1=$(now); c1=$(busy)
	echo "linux $row $t0 $t1 $c0 $c1 $((per * d * IO_KIB / 1024))" |
		awk '{s=$4-$3; printf "%s %s %.3f %.2f\n", $1, $2, $7/s, ($6-$5)/100}' >>"$R"
	tail -n 1 "$R" | awk '{printf "bench-kernel: %-6s %-12s %10.2f/s  cpu %.2f s\n", $1, $2, $3, $4}' | tee -a "$LOG"
}
run=1
while [ "$run" -le "$RUNS" ]; do
	say "requesters, run $run of $RUNS"
	for d in $DEPTHS; do
		kreq "write-$d" "$d" write
		lclient "write-$d" "$d" write
		kreq "read-$d" "$d" read
		lclient "read-$d" "$d" read
	done
	kreq null-1 1 null
	kreq null-32 32 null
	run=$((run + 1))
done
umount /mnt/b-knfsd
}

[ "$PART" = requesters ] || servers
[ "$PART" = servers ] || requesters

# median SERVER ROW FIELD(3 rate, 4 cpu)
median() {
	awk -v s="$1" -v r="$2" -v f="$3" '$1==s && $2==r {print $f}' "$R" | sort -g |
		awk '{v[NR]=$1} END {if (NR==0) print "n/a"; else if (NR%2) print v[(NR+1)/2]; else print (v[NR/2]+v[NR/2+1])/2}'
}
{
	[ "$PART" = requesters ] || {
	echo "| row ($RUNS runs, medians) | knfsd | kernel (ours) | user (ours) | kernel / knfsd | user / knfsd | kernel / user |"
	echo "|---|---|---|---|---|---|---|"
	for row in dd-write dd-read tar-x ls-l; do
		case $row in
		dd-write) label="dd write $MB MiB O_DIRECT (MiB/s; CPU s)" ;;
		dd-read) label="dd read $MB MiB O_DIRECT (MiB/s; CPU s)" ;;
		tar-x) label="tar x $FILES files (files/s; CPU s)" ;;
		ls-l) label="ls -l $ENTRIES entries (entries/s; CPU s)" ;;
		esac
		k=$(median knfsd $row 3); m=$(median kernel $row 3); u=$(median user $row 3)
		kc=$(median knfsd $row 4); mc=$(median kernel $row 4); uc=$(median user $row 4)
		echo "$label $k $m $u $kc $mc $uc" | awk '{
			n=NF; k=$(n-5); m=$(n-4); u=$(n-3); kc=$(n-2); mc=$(n-1); uc=$n; l="";
			for (i=1;i<=n-6;i++) l=l (i>1?" ":"") $i;
			printf "| %s | %.1f; %.2f | %.1f; %.2f | %.1f; %.2f | %.2f | %.2f | %.2f |\n", l, k, kc, m, mc, u, uc, m/k, u/k, m/u }'
	done
	echo
	}
	[ "$PART" = servers ] || {
	echo "| against knfsd ($RUNS runs, medians; $IO_KIB KiB per RPC, knfsd's rsize/wsize) | our kernel Requester | Linux client | ours / Linux | CPU s per GiB, ours | CPU s per GiB, Linux |"
	echo "|---|---|---|---|---|---|"
	for d in $DEPTHS; do
		for op in write read; do
			k=$(median kernel "$op-$d" 3); l=$(median linux "$op-$d" 3)
			kc=$(median kernel "$op-$d" 4); lc=$(median linux "$op-$d" 4)
			echo "$op $d $MB $k $l $kc $lc" | awk '{
				gib=$3/1024; printf "| %s %d MiB, %d in flight (MiB/s) | %.1f | %.1f | %.2f | %.2f | %.2f |\n",
				toupper(substr($1,1,1)) substr($1,2), $3, $2, $4, $5, $4/$5, $6/gib, $7/gib }'
		done
	done
	for d in 1 32; do
		k=$(median kernel "null-$d" 3)
		echo "| NULL, $d in flight (calls/s) | $k | n/a (no user-space NULL over RDMA) | | | |"
	done
	}
} >"$TABLE"
cat "$TABLE"
rm -rf "$W"
