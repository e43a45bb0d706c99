#!/bin/sh
# Linux knfsd with RPC-over-RDMA, set up inside the krpc-rdma VM:
#   cargo xtask vm -- sh xtask/vm/knfsd.sh
# Exports a tmpfs at /export to everyone, as the root of the NFSv4 name space too (fsid=0:
# NFSv3 mounts /export, NFSv4 sees it as "/"; the VM's own / cannot be a pseudo-root export)
#   /export *(rw,no_root_squash,insecure,no_subtree_check,fsid=0)
# with rpcbind, rpc.mountd (MOUNT over TCP/UDP) and 8 nfsd threads listening on TCP 2049 and
# on RDMA port 20049 (`rdma 20049` in /proc/fs/nfsd/portlist). Used by bench.sh (the kernel
# NFS client's reference run) and by userspace-harness's knfsd_rxe test (our requester
# against Linux svcrdma).
# Idempotent: each step is skipped when already done, and when everything is up it says so
# and exits 0. A step that fails is named on stderr, with the command's output; exit 1.
# It refuses to run outside the project's VM (no /run/krpc-vm/cmd.sh): it rewrites
# /etc/exports and starts NFS services, which on a real host is not ours to do. In the VM,
# /etc is the guest's tmpfs overlay and the host's files are untouched.
# Env: EXPORT_SIZE (tmpfs size of /export, default 512m), NFSD_THREADS (8),
#      RDMA_PORT (20049).
export LC_ALL=C
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
EXPORT_SIZE=${EXPORT_SIZE:-512m}
NFSD_THREADS=${NFSD_THREADS:-8}
RDMA_PORT=${RDMA_PORT:-20049}
EXPORT_LINE="/export *(rw,no_root_squash,insecure,no_subtree_check,fsid=0)"

say() { echo "knfsd: $*"; }
die() {
    echo "knfsd: FAILED: $*" >&2
    exit 1
}

if [ ! -e /run/krpc-vm/cmd.sh ]; then
    echo "knfsd: refusing to run outside the krpc-rdma VM (no /run/krpc-vm/cmd.sh):" \
        "it would reconfigure this machine's NFS server" >&2
    exit 2
fi
[ "$(id -u)" = 0 ] || die "must run as root (the VM's command runs as root)"

out=$(mktemp) || die "mktemp"
trap 'rm -f "$out"' EXIT

# run CMD...: CMD, quiet when it succeeds; on failure its output and status go to stderr.
run() {
    "$@" >"$out" 2>&1
    rc=$?
    if [ "$rc" != 0 ]; then
        echo "knfsd: '$*' exited $rc:" >&2
        sed 's/^/knfsd:    /' "$out" >&2
    fi
    return "$rc"
}

# registered PROG VERS: is PROG VERS registered with rpcbind for TCP?
registered() { rpcinfo -T tcp 127.0.0.1 "$1" "$2" >/dev/null 2>&1; }
portlist_has_rdma() { grep -qx "rdma $RDMA_PORT" /proc/fs/nfsd/portlist 2>/dev/null; }

if portlist_has_rdma && registered mountd 3 && registered nfs 3 &&
    mountpoint -q /export && grep -qxF "$EXPORT_LINE" /etc/exports 2>/dev/null; then
    say "already running (RDMA port $RDMA_PORT, mountd, /export)"
    exit 0
fi

t0=$(cut -d' ' -f1 /proc/uptime)
run modprobe -a nfsd rpcrdma || die "modprobe nfsd rpcrdma"
if ! mountpoint -q /proc/fs/nfsd; then
    run mount -t nfsd nfsd /proc/fs/nfsd || die "mount -t nfsd nfsd /proc/fs/nfsd"
fi
mkdir -p /export /var/lib/nfs || die "mkdir /export /var/lib/nfs"
if ! mountpoint -q /export; then
    run mount -t tmpfs -o "size=$EXPORT_SIZE" tmpfs /export ||
        die "mount -t tmpfs -o size=$EXPORT_SIZE tmpfs /export"
fi
if ! grep -qxF "$EXPORT_LINE" /etc/exports 2>/dev/null; then
    echo "$EXPORT_LINE" >/etc/exports || die "writing /etc/exports"
fi
if ! rpcinfo -p 127.0.0.1 >/dev/null 2>&1; then
    run rpcbind -w || die "rpcbind -w"
fi
run exportfs -ra || die "exportfs -ra"
if ! registered mountd 3; then
    run rpc.mountd || die "rpc.mountd"
fi
# Grace periods of 10 s (the least knfsd takes) instead of 90 and 50: NFSv4 delegations and
# opens wait for both (lockd's too); the times can only be set while the servers are down.
if [ "$(cat /proc/fs/nfsd/threads 2>/dev/null)" = 0 ]; then
    echo 10 >/proc/fs/nfsd/nfsv4gracetime 2>/dev/null || say "nfsv4gracetime not set"
    run modprobe lockd && echo 10 >/proc/sys/fs/nfs/nlm_grace_period 2>/dev/null ||
        say "nlm_grace_period not set"
fi
if [ "$(cat /proc/fs/nfsd/threads 2>/dev/null)" != "$NFSD_THREADS" ] || ! registered nfs 3; then
    run rpc.nfsd "$NFSD_THREADS" || die "rpc.nfsd $NFSD_THREADS"
fi
if ! portlist_has_rdma; then
    echo "rdma $RDMA_PORT" >/proc/fs/nfsd/portlist ||
        die "echo 'rdma $RDMA_PORT' >/proc/fs/nfsd/portlist"
    portlist_has_rdma || die "rdma $RDMA_PORT is not in /proc/fs/nfsd/portlist"
fi
registered mountd 3 || die "mountd version 3 is not registered with rpcbind"
t1=$(cut -d' ' -f1 /proc/uptime)
say "up in $(echo "$t0 $t1" | awk '{printf "%.1f", $2 - $1}') s: /export (tmpfs $EXPORT_SIZE)," \
    "$(cat /proc/fs/nfsd/threads) nfsd threads, portlist $(tr '\n' ' ' </proc/fs/nfsd/portlist)"
