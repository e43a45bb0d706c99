#!/bin/sh
# The Linux client against knfsd and against our nfsd, interleaved in one VM boot, for each
# mount-option variant: dd O_DIRECT read and write (bs=1M, MB MiB, twice each) and `tar x` of
# an archive of FILES small files (700 to 6,700 random bytes). A quicker, narrower companion of
# bench.sh's last rows (no perftest/harness steps before it), for comparing rsize/wsize:
#   cargo build --release -p userspace-harness
#   MB=32 FILES=500 cargo xtask vm -- sh xtask/vm/nfsd-vs-knfsd.sh
# Env: MB (32), FILES (500), VARIANTS (extra mount options after the default mount,
# default ",rsize=262144,wsize=262144"), DD (1; 0 skips the dd steps), TARS (1: tar x steps
# per server and variant, interleaved), PERF (0; 1: `perf record -a -g` during each tar x,
# reports into target/nfsd-vs-knfsd/). Prints one line per step and, after each tar x, the
# client's per-op view of it from /proc/self/mountstats (calls, mean RTT and mean execute
# time per call, in ms; the deltas over the tar x alone); SPIN_US (unset: a second server
# of ours whose completion wait spins that long, see below); at the end the server's totals with
# its per-procedure service times. No table, no verdict.
export LC_ALL=C
H=target/release/userspace-harness
MB=${MB:-32}
modprobe -a nfsv3 rpcrdma
EXPORT_SIZE=256m sh xtask/vm/knfsd.sh >/dev/null 2>&1 || echo knfsd setup failed
mkdir -p /export-ours /mnt/k /mnt/o
mount -t tmpfs -o size=256m tmpfs /export-ours
$H nfsd --listen $RXE_IP:20249 --export /export-ours --mount-port 20248 --clients '*(rw,no_root_squash)' >/tmp/nfsd.out 2>&1 &
pid=$!
# SPIN_US: a second server of ours ("ours-spin", RDMA 20349, MOUNT 20348, its own tmpfs)
# whose wait spins SPIN_US microseconds before sleeping, interleaved with the other two.
if [ -n "$SPIN_US" ]; then
  mkdir -p /export-spin /mnt/s; mount -t tmpfs -o size=256m tmpfs /export-spin
  KRPC_RDMA_WAIT_SPIN_US=$SPIN_US $H nfsd --listen $RXE_IP:20349 --export /export-spin --mount-port 20348 --clients '*(rw,no_root_squash)' >/tmp/nfsd-spin.out 2>&1 &
  spid=$!
fi
sleep 3
head -c $((MB*1048576)) /dev/urandom >/tmp/src
cp /tmp/src /export/bench; cp /tmp/src /export-ours/bench
mkdir -p /tmp/small; i=0; while [ $i -lt ${FILES:-500} ]; do head -c $((700 + i * 13 % 6000)) /dev/urandom > /tmp/small/f$i; i=$((i+1)); done
tar cf /tmp/small.tar -C /tmp small
rd() { sync; echo 3 >/proc/sys/vm/drop_caches; echo "$1: $(dd if=$2/bench of=/dev/null bs=1M iflag=direct 2>&1 | tail -1)"; }
wr() { sync; echo 3 >/proc/sys/vm/drop_caches; echo "$1: $(dd if=/tmp/src of=$2/bench2 bs=1M oflag=direct 2>&1 | tail -1)"; rm -f $2/bench2; }
# ops MNT: the per-op lines (name ops trans timeouts sent recv queue rtt execute ...) of MNT.
ops() { awk -v m="$1" '$1=="device"{on=($5==m)} on&&/per-op statistics/{p=1;next} on&&p&&NF>=9{print}' /proc/self/mountstats; }
# opdelta BEFORE AFTER: ops with calls in between, their mean RTT and execute time in ms.
opdelta() { awk 'NR==FNR{o[$1]=$2;r[$1]=$8;x[$1]=$9;next} {n=$2-o[$1]} n>0{printf "  %s %d calls, rtt %.2f ms, exec %.2f ms\n",$1,n,($8-r[$1])/n,($9-x[$1])/n}' "$1" "$2"; }
tx() {
  sync; echo 3 >/proc/sys/vm/drop_caches; ops $2 >/tmp/ops0
  [ "${PERF:-0}" = 1 ] && { perf record -a -g -o /tmp/perf.data >/dev/null 2>&1 & ppid=$!; sleep 1; }
  s=$(date +%s.%N); tar xf /tmp/small.tar -C $2; e=$(date +%s.%N)
  echo "$1: tar x $(echo "$s $e" | awk '{print $2-$1}') s"
  if [ "${PERF:-0}" = 1 ]; then
    kill -INT $ppid; wait $ppid; mkdir -p target/nfsd-vs-knfsd
    perf report -i /tmp/perf.data --no-children --sort comm,dso,sym --stdio 2>/dev/null | head -150 >"target/nfsd-vs-knfsd/perf-$(echo "$1" | tr -c 'a-z0-9\n' _).txt"
  fi
  ops $2 >/tmp/ops1; opdelta /tmp/ops0 /tmp/ops1; rm -rf $2/small
}
K=vers=3,proto=rdma,port=20049,nolock
O=vers=3,proto=rdma,port=20249,mountport=20248,mountproto=tcp,nolock
for variant in "" ${VARIANTS:-,rsize=262144,wsize=262144}; do
  mount -t nfs -o $K$variant $RXE_IP:/export /mnt/k
  mount -t nfs -o $O$variant $RXE_IP:/export-ours /mnt/o
  [ -n "$SPIN_US" ] && mount -t nfs -o vers=3,proto=rdma,port=20349,mountport=20348,mountproto=tcp,nolock$variant $RXE_IP:/export-spin /mnt/s
  grep -E "/mnt/(k|o) " /proc/mounts | sed 's/.*\(rsize=[0-9]*,wsize=[0-9]*\).*/\1/'
  if [ "${DD:-1}" = 1 ]; then
    for r in 1 2; do rd "knfsd$variant read" /mnt/k; rd "ours$variant read" /mnt/o; done
    for r in 1 2; do wr "knfsd$variant write" /mnt/k; wr "ours$variant write" /mnt/o; done
  fi
  t=0; while [ $t -lt ${TARS:-1} ]; do tx "knfsd$variant" /mnt/k; tx "ours$variant" /mnt/o; [ -n "$SPIN_US" ] && tx "ours-spin$variant" /mnt/s; t=$((t+1)); done
  umount /mnt/k; umount /mnt/o; [ -n "$SPIN_US" ] && umount /mnt/s
done
kill -TERM $pid; wait $pid
tail -5 /tmp/nfsd.out
if [ -n "$SPIN_US" ]; then kill -TERM $spid; wait $spid; echo "ours-spin ($SPIN_US us):"; tail -5 /tmp/nfsd-spin.out; fi
uptime
