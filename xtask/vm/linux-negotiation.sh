#!/bin/sh
# What the Linux kernel NFS client (xprtrdma) negotiates with our server (issue 13 item 4),
# run inside the VM:
#   cargo build --release -p userspace-harness   # on the host
#   cargo xtask vm -- sh xtask/vm/linux-negotiation.sh [OUTDIR]
# Starts `userspace-harness nfsd --trace OUTDIR/server-trace.jsonl` on a tmpfs export (RDMA port
# 20249, MOUNT tcp 20248), enables the client's rpcrdma and sunrpc:rpc_request tracepoints,
# mounts over RDMA and does: ls; dd of 1 MiB + 3 bytes in and out with O_DIRECT (bs=1M); a
# 500-entry directory listed with ls -l after a cache drop (READDIRPLUS); a short symlink and
# one with a 4,000-byte target, read back with readlink; umount; SIGTERM to the server.
# OUTDIR (default target/negotiation) gets server-trace.jsonl (our --trace: every transport
# header sent and received), client-trace.txt (the kernel's tracepoints), nfsd.out (the
# server's connection line and counters), ops.log, and summary.txt (made by jq from the two
# traces: see summarise below; `sh xtask/vm/linux-negotiation.sh --summarise OUTDIR` redoes it).
export LC_ALL=C
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
# The summary needs jq, which neither `cargo xtask test` nor `demo` installs (the guest uses
# the host's binaries): say so in one line before anything runs.
command -v jq >/dev/null 2>&1 || {
    echo "linux-negotiation: needs jq on the host (the guest runs the host's binaries): apt-get install jq" >&2
    exit 2
}

summarise() {
    d=$1
    t=$d/server-trace.jsonl
    {
        echo "== received headers by proc_name (client -> server)"
        jq -r 'select(.dir == "rx") | .proc_name' "$t" | sort | uniq -c
        echo "== credits asked in received calls: value count"
        jq -r 'select(.dir == "rx") | .credit' "$t" | sort -n | uniq -c
        echo "== credits granted in our replies: value count"
        jq -r 'select(.dir == "tx") | .credit' "$t" | sort -n | uniq -c
        echo "== received calls with a read list: position, segments, lengths"
        jq -c 'select(.dir == "rx" and (.read_list | length) > 0) |
            {xid, proc_name, positions: [.read_list[].position] | unique,
             segs: (.read_list | length), lengths: [.read_list[].length], payload_len}' "$t" |
            sort | uniq -c | sort -rn | head -20
        echo "== received calls with a write list: chunks, segments per chunk, lengths (by shape)"
        jq -c 'select(.dir == "rx" and (.write_list | length) > 0) |
            {chunks: (.write_list | length), segs: [.write_list[] | length],
             lengths: [.write_list[][].length]}' "$t" | sort | uniq -c | sort -rn | head -20
        echo "== received calls with a reply chunk: segments, lengths (by shape)"
        jq -c 'select(.dir == "rx" and .reply_chunk != null) |
            {segs: (.reply_chunk | length), lengths: [.reply_chunk[].length]}' "$t" |
            sort | uniq -c | sort -rn | head -20
        echo "== largest inline payloads received / sent (bytes after the header)"
        jq -r 'select(.dir == "rx") | .payload_len' "$t" | sort -n | tail -1
        jq -r 'select(.dir == "tx") | .payload_len' "$t" | sort -n | tail -1
        echo "== RDMA_ERROR either way"
        jq -c 'select(.proc_name == "RDMA_ERROR")' "$t" | head -5
        echo "== the client's RPC-over-RDMA settings (what it puts in its RFC 8797 private data)"
        cat "$d/client-sysctl.txt"
        echo "== client tracepoints: connect / inline thresholds / chunk shapes"
        grep -E 'xprtrdma_(inline_thresh|connect|createmrs|op_connect)' "$d/client-trace.txt" | head -10
        grep -oE 'xprtrdma_marshal: .*' "$d/client-trace.txt" | sed 's/task:[0-9a-f]*@[0-9a-f]* xid=0x[0-9a-f]* //' |
            sort | uniq -c | sort -rn | head -20
    } >"$d/summary.txt" 2>&1
    cat "$d/summary.txt"
}

if [ "$1" = --summarise ]; then
    summarise "${2:?--summarise OUTDIR}"
    exit
fi
: "${RXE_IP:?run me with cargo xtask vm}"
[ -e /run/krpc-vm/cmd.sh ] || { echo "linux-negotiation: only in the project's VM" >&2; exit 2; }
OUT=${1:-target/negotiation}
HARNESS=${HARNESS:-target/release/userspace-harness}
mkdir -p "$OUT" || exit 2
OUT=$(cd "$OUT" && pwd)
exp=/export-neg
mnt=/mnt/neg
mkdir -p "$exp" "$mnt"
mountpoint -q "$exp" || mount -t tmpfs -o size=64m tmpfs "$exp" || exit 1
modprobe -a nfsv3 rpcrdma || exit 1
# xprtrdma's inline sizes (cp_send_size / cp_recv_size of its private data) and slot count.
for f in /proc/sys/sunrpc/rdma_*; do echo "$f: $(cat "$f")"; done >"$OUT/client-sysctl.txt"

tr=/sys/kernel/tracing
mountpoint -q "$tr" || mount -t tracefs tracefs "$tr"
echo 8192 >"$tr/buffer_size_kb"
echo >"$tr/trace"
echo 1 >"$tr/events/rpcrdma/enable"
echo 1 >"$tr/events/sunrpc/rpc_request/enable"

"$HARNESS" nfsd --listen "$RXE_IP:20249" --export "$exp" --mount-port 20248 --clients "*(rw,no_root_squash)" \
    --trace "$OUT/server-trace.jsonl" >"$OUT/nfsd.out" 2>&1 &
pid=$!
n=300
until grep -q '^nfsd: serving ' "$OUT/nfsd.out" || [ "$n" -le 0 ]; do
    sleep 0.1
    n=$((n - 1))
done
cat "$OUT/nfsd.out"

ops=$OUT/ops.log
: >"$ops"
# op CMD: run CMD with sh, its output and status in ops.log.
op() {
    echo "+ $*" >>"$ops"
    sh -c "$*" >>"$ops" 2>&1
    echo "  (exit $?)" >>"$ops"
}
head -c $((1048576 + 3)) /dev/urandom >/tmp/neg-src
mkdir -p "$exp/dir500"
i=0
while [ "$i" -lt 500 ]; do
    : >"$exp/dir500/entry-$i"
    i=$((i + 1))
done
op mount -t nfs -o vers=3,proto=rdma,port=20249,mountport=20248,mountproto=tcp,nolock \
    "$RXE_IP:$exp" "$mnt"
op ls -la "$mnt"
op grep " $mnt " /proc/mounts
op dd if=/tmp/neg-src of="$mnt/big" bs=1M oflag=direct
op cmp /tmp/neg-src "$exp/big"
op dd if="$mnt/big" of=/tmp/neg-back bs=1M iflag=direct
op cmp /tmp/neg-src /tmp/neg-back
op "sync; echo 3 > /proc/sys/vm/drop_caches"
op "ls -l $mnt/dir500 | wc -l"
op ln -s target-of-a-short-link "$mnt/short-link"
long=$(head -c 4000 /dev/zero | tr '\0' 'x')
op ln -s "$long" "$mnt/long-link"
op "sync; echo 3 > /proc/sys/vm/drop_caches"
op "readlink $mnt/short-link"
op "readlink $mnt/long-link | wc -c"
op umount "$mnt"
kill -TERM "$pid"
wait "$pid"
echo "nfsd exit $?" >>"$OUT/nfsd.out"
echo 0 >"$tr/events/rpcrdma/enable"
echo 0 >"$tr/events/sunrpc/rpc_request/enable"
cat "$tr/trace" >"$OUT/client-trace.txt"
cat "$ops"
tail -5 "$OUT/nfsd.out"
summarise "$OUT"
