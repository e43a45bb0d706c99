#!/bin/sh
# Stage 2 of the krpc-rdma rxe VM: PID 1 on the guest's root (the host's / under a tmpfs
# overlay, built by stage 1), run by the host's /bin/sh. `cargo xtask vm` writes it into the
# run's control directory, /run/krpc-vm, with:
#   config   KRPCVM_IP, KRPCVM_PREFIX, KRPCVM_MTU (empty: default), KRPCVM_TTY (1: the host's
#            stdout is a terminal)
#   mounts   "TAG DIR" lines: 9p shares to mount read-write at DIR (parents first)
#   cmd.sh   the host's environment, `cd` to its cwd, `exec CMD`
# Mounts the kernel filesystems and the shares, brings up eth0 and rxe0, runs cmd.sh with its
# output on /dev/hvc0 (the host's stdout), writes its status to /run/krpc-vm/rc (or what went
# wrong to /run/krpc-vm/setup-error) and powers off. Progress goes to the console (ttyS0).

export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
CTL=/run/krpc-vm

log() { echo "krpc-vm [$(cut -d' ' -f1 /proc/uptime) s]: $*"; }
halt() {
    sync
    echo o >/proc/sysrq-trigger
    sleep 60
}
die() {
    log "FATAL: $*"
    echo "$*" >"$CTL/setup-error"
    halt
}
# wait_for TENTHS CMD...: runs CMD every 0.1 s until it succeeds, at most TENTHS times.
wait_for() {
    n=$1
    shift
    until "$@"; do
        n=$((n - 1))
        [ "$n" -gt 0 ] || return 1
        sleep 0.1
    done
}

mount -t proc proc /proc
mount -t sysfs sysfs /sys
mkdir -p /dev/pts /dev/shm /run/lock
mount -t devpts -o gid=5,mode=620,ptmxmode=666 devpts /dev/pts
mount -t tmpfs -o mode=1777 tmpfs /dev/shm
# /tmp stays the host's /tmp seen through the overlay: host-built binaries there must run.
log "stage 2"

. "$CTL/config"
modprobe -a virtio_console virtio_net virtio_rng || die "modprobe virtio_console virtio_net"
wait_for 50 test -c /dev/hvc0 || die "no /dev/hvc0"
exec 3<>/dev/hvc0
stty -onlcr -echo <&3 2>/dev/null

while read -r tag dir; do
    [ -n "$tag" ] || continue
    mkdir -p "$dir"
    mount -t 9p -o trans=virtio,version=9p2000.L,msize=512000,cache=none "$tag" "$dir" ||
        die "cannot mount the share $dir"
done <"$CTL/mounts"

echo krpc-vm >/proc/sys/kernel/hostname
echo "127.0.1.1 krpc-vm" >>/etc/hosts
ip link set lo up
wait_for 50 test -e /sys/class/net/eth0 || die "no eth0"
# No IPv6: no autoconf chatter, and only the IPv4 GIDs besides the link-local ones.
echo 1 >/proc/sys/net/ipv6/conf/all/disable_ipv6
echo 1 >/proc/sys/net/ipv6/conf/default/disable_ipv6
ip addr add "$KRPCVM_IP/$KRPCVM_PREFIX" dev eth0 || die "ip addr add $KRPCVM_IP"
if [ -n "$KRPCVM_MTU" ]; then
    ip link set eth0 mtu "$KRPCVM_MTU" || die "mtu $KRPCVM_MTU"
fi
ip link set eth0 up || die "eth0 up"

# rdma_rxe + the userspace verbs and CM interfaces; nfsd and rpcrdma stay loadable by CMD.
modprobe -a rdma_rxe ib_uverbs rdma_ucm || die "modprobe rdma_rxe ib_uverbs rdma_ucm"
rdma link add rxe0 type rxe netdev eth0 || die "rdma link add rxe0"
port=/sys/class/infiniband/rxe0/ports/1
rxe_active() { grep -q ACTIVE "$port/state" 2>/dev/null && [ -c /dev/infiniband/uverbs0 ]; }
wait_for 100 rxe_active || die "rxe0 did not become ACTIVE"
# The GID table has 1024 entries: one grep picks the IPv4-mapped ones (::ffff:a.b.c.d), and
# only those few have their type read.
roce_v2_gid() {
    for gid in $(grep -l '^0000:0000:0000:0000:0000:ffff:' "$port"/gids/* 2>/dev/null); do
        i=${gid##*/}
        if [ "$(cat "$port/gid_attrs/types/$i" 2>/dev/null)" = "RoCE v2" ]; then
            RXE_GID_INDEX=$i
            return 0
        fi
    done
    return 1
}
wait_for 50 roce_v2_gid || die "rxe0 has no RoCE v2 GID for $KRPCVM_IP"
export RXE_DEV=rxe0 RXE_GID_INDEX RXE_IP="$KRPCVM_IP"
log "rxe0 ACTIVE, RoCE v2 GID index $RXE_GID_INDEX ($RXE_IP)"

ulimit -l unlimited || die "ulimit -l unlimited"
ulimit -n 65536 2>/dev/null
if [ "$KRPCVM_TTY" = 1 ]; then
    sh "$CTL/cmd.sh" </dev/null >&3 2>&3
    rc=$?
else
    # The host's stdout is not a terminal: CMD gets a pipe, as it would there (hvc0 is a tty).
    { sh "$CTL/cmd.sh" </dev/null 2>&1; echo $? >/run/cmd.rc; } | cat >&3
    rc=$(cat /run/cmd.rc)
fi
log "command exited with status $rc"
echo "$rc" >"$CTL/rc"
exec 3>&-
halt
