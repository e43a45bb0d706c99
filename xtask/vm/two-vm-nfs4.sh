#!/bin/sh
# The NFSv4.1 back channel over RDMA, on the wire: two VMs and tshark. Run on the HOST:
#   cargo build --release -p userspace-harness      # (into target/: the VMs run it from there)
#   sh xtask/vm/two-vm-nfs4.sh [OUTDIR]              # OUTDIR: target/two-vm-nfs4
# Starts two `cargo xtask vm` in parallel, wired back to back (KRPC_RDMA_VM_PEER: a qemu UDP
# socket netdev on 127.0.0.1, nothing leaves this host), so rxe's RoCE v2 frames cross eth0:
#   server VM 10.0.3.1: knfsd (xtask/vm/knfsd.sh, RDMA port 20049), grace ended
#             (v4_end_grace), /export/deleg.txt written by the server's shell
#   client VM 10.0.3.2: userspace-harness nfs4 put and get of a small file, then
#             `nfs4 hold /deleg.txt` until it holds a read delegation; then the server VM
#             appends to /export/deleg.txt with its own shell (a local writer breaks the
#             delegation's lease: knfsd sends CB_COMPOUND { CB_SEQUENCE, CB_RECALL } on the
#             session's back channel, the client's RDMA connection), the client answers and
#             sends DELEGRETURN, and the append completes
# qemu's filter-dump records the client VM's eth0 into OUTDIR/nfs4.pcap (KRPC_RDMA_VM_PCAP).
# Then tshark (here, on the host; apt-get installs it when missing and we are root) decodes
# it: RoCE v2 (UDP 4791) -> InfiniBand -> RPC-over-RDMA (rpcordma) -> RPC -> NFS, and this
# prints the RPC-over-RDMA messages, and the reverse-direction ones (RPC program 0x40000000,
# the callback program our client names in CREATE_SESSION) with their fields.
# The VMs coordinate through files in OUTDIR (shared with both): server-ready, recall,
# appended, client-done; their output goes to OUTDIR/server.log and client.log (also shown).
# Exit status: 0 when the pcap holds a decoded CB_COMPOUND call with CB_RECALL from the
# server and its reply from the client; 1 otherwise (what was missing is named); 2 for a
# missing harness binary or tshark.
# Env: NFS4_VM_PORT (12049: UDP ports PORT and PORT+1 on 127.0.0.1), NFS4_VM_CPUS (1 per VM),
#      NFS4_VM_TIMEOUT (840 s per VM), and the `cargo xtask vm` knobs (KRPC_RDMA_VM_MEM, ...).
# In the VMs the same script runs as `two-vm-nfs4.sh --guest server|client OUTDIR [SERVER_IP]`.
export LC_ALL=C
SERVER_IP=10.0.3.1
CLIENT_IP=10.0.3.2
CB_PROGRAM=1073741824 # 0x40000000
FILE=deleg.txt
H=target/release/userspace-harness

say() { echo "two-vm-nfs4: $*"; }
now() { cut -d' ' -f1 /proc/uptime; }
# wait_file SECS FILE [FAIL_FILE]: until FILE exists (0), FAIL_FILE exists or SECS pass (1).
wait_file() {
    n=$1
    while [ ! -e "$2" ]; do
        [ -n "${3:-}" ] && [ -e "$3" ] && return 1
        n=$((n - 1))
        [ "$n" -ge 0 ] || return 1
        sleep 1
    done
}

# ---- in the server VM ------------------------------------------------------------------
guest_server() {
    out=$1
    sh xtask/vm/knfsd.sh || {
        touch "$out/server-failed"
        exit 1
    }
    # No 10 s grace period: delegations are not granted during it.
    echo Y >/proc/fs/nfsd/v4_end_grace || say "could not end the grace period"
    printf 'a file for a read delegation, written by the server VM\n' >"/export/$FILE"
    say "server $RXE_IP ready: knfsd on RDMA port 20049, grace ended, /export/$FILE"
    touch "$out/server-ready"
    if wait_file 600 "$out/recall" "$out/client-done"; then
        say "the client holds a read delegation of /$FILE: appending to /export/$FILE here" \
            "(a local writer; knfsd recalls the delegation first)"
        t0=$(now)
        echo "appended by the server VM" >>"/export/$FILE"
        t1=$(now)
        msg="append on the server returned after $(echo "$t0 $t1" |
            awk '{printf "%.3f", $2 - $1}') s"
        say "$msg"
        echo "$msg" >"$out/appended"
    fi
    wait_file 600 "$out/client-done" || say "no client-done after 600 s"
    say "server done"
}

# ---- in the client VM ------------------------------------------------------------------
guest_client() {
    out=$1
    srv=$2
    rc=0
    finish() {
        touch "$out/client-done"
        exit "$rc"
    }
    if ! wait_file 600 "$out/server-ready" "$out/server-failed"; then
        say "the server VM did not become ready"
        rc=1
        finish
    fi
    tmp=$(mktemp -d) || finish
    printf 'two-vm-nfs4: put by the client VM %s\n' "$RXE_IP" >"$tmp/small"
    echo "\$ userspace-harness nfs4 --server $srv put $tmp/small /small.txt"
    "$H" nfs4 --server "$srv" put "$tmp/small" /small.txt || rc=1
    echo "\$ userspace-harness nfs4 --server $srv get /small.txt $tmp/back"
    "$H" nfs4 --server "$srv" get /small.txt "$tmp/back" || rc=1
    if cmp -s "$tmp/small" "$tmp/back"; then
        say "get returned what put wrote"
    else
        say "get did not return what put wrote"
        rc=1
    fi
    # hold until a read delegation is granted: knfsd grants none while any grace period of
    # the server lasts (locks_in_grace()); v4_end_grace ended NFSv4's, lockd's (10 s,
    # knfsd.sh) ends by itself.
    hold=$out/hold.out
    got=
    for try in 1 2 3 4 5; do
        echo "\$ userspace-harness nfs4 --server $srv hold /$FILE --secs 60   # try $try"
        "$H" nfs4 --server "$srv" hold "/$FILE" --secs 60 >"$hold" 2>"$out/hold.err" &
        pid=$!
        n=600
        until grep -q "^open /$FILE: delegation " "$hold" 2>/dev/null; do
            kill -0 "$pid" 2>/dev/null || break
            n=$((n - 1))
            [ "$n" -gt 0 ] || break
            sleep 0.1
        done
        if grep -q "^open /$FILE: delegation read" "$hold"; then
            got=1
            break
        fi
        wait "$pid"
        cat "$hold" "$out/hold.err"
        sleep 3
    done
    if [ -z "$got" ]; then
        say "no read delegation in 5 tries"
        rc=1
        finish
    fi
    sed -n 1p "$hold"
    say "holding a read delegation: asking the server VM to write to /export/$FILE"
    touch "$out/recall"
    wait "$pid" || rc=1
    sed 1d "$hold"
    cat "$out/hold.err"
    grep -q "^delegation recalled (CB_RECALL) after .* s; returned (DELEGRETURN) in .* s" \
        "$hold" || rc=1
    grep -q "^back channel: " "$hold" || rc=1
    wait_file 60 "$out/appended" && cat "$out/appended"
    finish
}

if [ "${1:-}" = --guest ]; then
    : "${RXE_IP:?--guest runs in the VM: cargo xtask vm -- sh $0 --guest ...}"
    cd "$(dirname "$0")/../.." || exit 1
    case "${2:-}" in
    server) guest_server "$3" ;;
    client) guest_client "$3" "$4" ;;
    *)
        echo "usage: $0 --guest server|client OUTDIR [SERVER_IP]" >&2
        exit 2
        ;;
    esac
    exit 0
fi

# ---- on the host -----------------------------------------------------------------------
root=$(cd "$(dirname "$0")/../.." && pwd) || exit 1
cd "$root" || exit 1
if [ ! -x "$H" ]; then
    echo "two-vm-nfs4: no $root/$H: the VMs run it from the repository;" \
        "build it first with: cargo build --release -p userspace-harness" \
        "(CARGO_TARGET_DIR unset, or pointing to $root/target)" >&2
    exit 2
fi
if ! command -v tshark >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ]; then
        say "installing tshark (apt-get install -y tshark)"
        echo "wireshark-common wireshark-common/install-setuid boolean false" |
            debconf-set-selections 2>/dev/null
        DEBIAN_FRONTEND=noninteractive apt-get install -y tshark >/dev/null ||
            { echo "two-vm-nfs4: apt-get install tshark failed" >&2; exit 2; }
    else
        echo "two-vm-nfs4: no tshark: sudo apt-get install tshark" >&2
        exit 2
    fi
fi
out=${1:-target/two-vm-nfs4}
mkdir -p "$out" && out=$(cd "$out" && pwd -P) || exit 1
rm -f "$out/server-ready" "$out/server-failed" "$out/recall" "$out/appended" \
    "$out/client-done" "$out/client.rc" "$out/server.rc" "$out/nfs4.pcap" \
    "$out/hold.out" "$out/hold.err" "$out/server.log" "$out/client.log"
# Both VMs see the repository (their cwd); OUTDIR too, when it is elsewhere.
case "$out/" in
"$(pwd -P)"/*) ;;
*) export KRPC_RDMA_VM_RW="$out${KRPC_RDMA_VM_RW:+:$KRPC_RDMA_VM_RW}" ;;
esac
port=${NFS4_VM_PORT:-12049}
export KRPC_RDMA_VM=force KRPC_RDMA_VM_CPUS="${NFS4_VM_CPUS:-1}" \
    KRPC_RDMA_VM_TIMEOUT="${NFS4_VM_TIMEOUT:-840}"
unset KRPC_RDMA_VM_MAC KRPC_RDMA_VM_PCAP

say "server VM $SERVER_IP (output in $out/server.log), client VM $CLIENT_IP;" \
    "UDP 127.0.0.1:$port <-> 127.0.0.1:$((port + 1)); capture $out/nfs4.pcap"
{
    KRPC_RDMA_VM_IP=$SERVER_IP KRPC_RDMA_VM_PEER="$((port + 1)):$port" \
        cargo xtask vm -- sh xtask/vm/two-vm-nfs4.sh --guest server "$out"
    echo $? >"$out/server.rc"
} >"$out/server.log" 2>&1 &
spid=$!
sleep 2
{
    KRPC_RDMA_VM_IP=$CLIENT_IP KRPC_RDMA_VM_PEER="$port:$((port + 1))" \
        KRPC_RDMA_VM_PCAP="$out/nfs4.pcap" \
        cargo xtask vm -- sh xtask/vm/two-vm-nfs4.sh --guest client "$out" "$SERVER_IP"
    echo $? >"$out/client.rc"
} 2>&1 | tee "$out/client.log"
touch "$out/client-done"
wait "$spid"
crc=$(cat "$out/client.rc" 2>/dev/null)
src=$(cat "$out/server.rc" 2>/dev/null)
echo "== server VM output"
cat "$out/server.log"
echo "== client VM exit status ${crc:-?}, server VM exit status ${src:-?}"

pcap=$out/nfs4.pcap
if [ ! -s "$pcap" ]; then
    say "FAILED: no capture in $pcap"
    exit 1
fi
# tshark -r PCAP ARGS...: without its "running as root" warning.
ts() { tshark -r "$pcap" "$@" 2>"$out/tshark.err"; }
fields="-T fields -E header=y -e frame.number -e ip.src -e ip.dst -e rpcordma.xid
    -e rpcordma.msg_type -e rpc.msgtyp -e rpc.program -e rpc.procedure -e nfs.cb.operation"
frames=$(ts | wc -l)
n=$(ts -Y rpcordma | wc -l)
echo "== $pcap: $frames frames, $n decoded as RPC-over-RDMA"
ts -q -z io,phs | sed -n '/^Protocol Hierarchy/,/^====/p'
echo "== the reverse direction: tshark -r $pcap -Y 'rpcordma && rpc.program == $CB_PROGRAM'"
# shellcheck disable=SC2086 # $fields is words
ts -Y "rpcordma && rpc.program == $CB_PROGRAM" $fields
echo "== the same frames as tshark summarises them"
ts -Y "rpcordma && rpc.program == $CB_PROGRAM"
# The CB_COMPOUND calls carrying CB_RECALL (4), server -> client, and their replies.
calls=$(ts -Y "rpc.msgtyp == 0 && rpc.program == $CB_PROGRAM && rpc.procedure == 1 &&
    nfs.cb.operation == 4 && ip.src == $SERVER_IP && ip.dst == $CLIENT_IP" \
    -T fields -e frame.number -e rpc.xid)
ok=
if [ -z "$calls" ]; then
    say "MISSING: no CB_COMPOUND call with CB_RECALL from $SERVER_IP to $CLIENT_IP decoded"
    [ -s "$out/tshark.err" ] && grep -v "Running as user" "$out/tshark.err"
    echo "== what was decoded instead: RPC-over-RDMA frames not of NFS (program 100003)"
    ts -Y "rpcordma && !(rpc.program == 100003)"
    echo "== InfiniBand frames not decoded as RPC-over-RDMA, but RC Acknowledges (opcode 17)"
    ts -Y "infiniband && !rpcordma && !(infiniband.bth.opcode == 17)"
else
    for xid in $(echo "$calls" | awk '{print $2}'); do
        f=$(echo "$calls" | awk -v x="$xid" '$2 == x {print $1; exit}')
        r=$(ts -Y "rpc.msgtyp == 1 && rpc.xid == $xid && rpc.program == $CB_PROGRAM &&
            ip.src == $CLIENT_IP && ip.dst == $SERVER_IP" -T fields -E separator=' ' \
            -e frame.number -e rpc.replystat -e rpc.state_accept -e nfs.nfsstat4 | head -1)
        if [ -n "$r" ]; then
            set -- $r
            say "CB_COMPOUND with CB_RECALL: call in frame $f (xid $xid, $SERVER_IP ->" \
                "$CLIENT_IP), reply in frame $1 ($CLIENT_IP -> $SERVER_IP; reply_stat $2," \
                "accept_stat $3, nfsstat4 of the compound, CB_SEQUENCE, CB_RECALL: $4)"
            rf=$1
            ok=1
        else
            say "MISSING: no reply decoded to the CB_COMPOUND call in frame $f (xid $xid)"
        fi
    done
fi
if [ -n "$ok" ]; then
    echo "== the read delegation's OPEN reply, the recall and the DELEGRETURN, with the" \
        "InfiniBand opcode and destination QP (which RDMA connection each message took)"
    story="rpcordma && (nfs.open.delegation_type == 1 || rpc.program == $CB_PROGRAM ||
        nfs.opcode == 8)"
    ts -Y "$story"
    ts -Y "$story" -T fields -E header=y -e frame.number -e ip.src -e ip.dst \
        -e infiniband.bth.opcode -e infiniband.bth.destqp -e rpcordma.xid -e rpc.msgtyp \
        -e rpc.program -e nfs.opcode -e nfs.cb.operation
    f=$(echo "$calls" | awk '{print $1; exit}')
    echo "== tshark -V of frame $f (the call), RPC-over-RDMA and up"
    ts -V -Y "frame.number == $f" | sed -n '/^RPC over RDMA/,$p'
    echo "== tshark -V of frame $rf (the reply), NFS CB"
    ts -V -Y "frame.number == $rf" | sed -n '/^Network File System CB/,$p'
fi
[ "$crc" = 0 ] || say "note: the client VM exited ${crc:-?}"
[ "$src" = 0 ] || say "note: the server VM exited ${src:-?}"
[ -n "$ok" ] || exit 1
say "OK: the back channel's CB_RECALL and its reply, decoded as RPC-over-RDMA in $pcap"
