#!/bin/sh
# The demo, run inside the VM by `cargo xtask demo`:
#   cargo xtask vm -- sh xtask/vm/demo.sh [HARNESS]
# 1. `userspace-harness demo`: our server and client over rxe0 (DDP WRITE/READ at several
#    sizes, verified; NULL; Long Call / Long Reply; throughput; chunk counters).
# 2. NFSv3 over RDMA to the Linux kernel's NFS server: knfsd.sh, then `userspace-harness nfs3`
#    puts a 5 MiB + 3 byte random file (read chunks), checks it by sha256 on the server's
#    filesystem, gets it back (write chunks), makes a directory and a symbolic link, reads the
#    link, lists the export and shows an NFS error. Skipped outside the project VM (a host
#    with its own RDMA device: knfsd.sh will not reconfigure it).
# Exit status 0 when everything did what it should.
export LC_ALL=C
H=${1:-target/release/userspace-harness}
: "${RXE_IP:?run me with cargo xtask vm (or cargo xtask demo)}"

"$H" demo || exit 1

echo
echo "==> NFSv3 over RDMA: userspace-harness nfs3 against the Linux kernel's knfsd (port 20049)"
if [ ! -e /run/krpc-vm/cmd.sh ]; then
    echo "skipped: not in the krpc-rdma VM (knfsd is only set up there)"
    exit 0
fi
sh "$(dirname "$0")/knfsd.sh" || exit 1
tmp=$(mktemp -d) || exit 1
nfs() {
    echo "\$ userspace-harness nfs3 --server $RXE_IP $*"
    "$H" nfs3 -q --server "$RXE_IP" "$@"
}
head -c $((5 * 1048576 + 3)) /dev/urandom >"$tmp/file" || exit 1
rm -rf /export/demo
nfs mkdir /demo || exit 1
nfs put "$tmp/file" /demo/file || exit 1
a=$(sha256sum <"$tmp/file" | cut -d' ' -f1)
b=$(sha256sum </export/demo/file | cut -d' ' -f1)
echo "sha256 here $a, on the server's filesystem $b"
[ "$a" = "$b" ] || { echo "demo: the file differs on the server" >&2; exit 1; }
nfs get /demo/file "$tmp/back" || exit 1
cmp "$tmp/file" "$tmp/back" || exit 1
echo "got back byte for byte"
nfs ln -s ../some/target /demo/link || exit 1
nfs readlink /demo/link || exit 1
echo "(the server's filesystem says: $(readlink /export/demo/link))"
nfs ls /demo || exit 1
nfs stat /demo/file || exit 1
nfs stat /demo/missing
rc=$?
if [ "$rc" = 0 ]; then
    echo "demo: stat of a missing file succeeded" >&2
    exit 1
fi
echo "(exit status $rc: the NFS error, as expected)"
rm -rf "$tmp" /export/demo
echo "==> NFS demo: ok"
