#!/bin/sh
# The rxe benchmark, run inside the VM by `cargo xtask bench-rxe`:
#   cargo xtask vm -- sh xtask/vm/bench.sh [--log FILE] [--table FILE] [--harness BIN]
#                                          [--harness-error WHY]
# On rxe0 loopback, in this one boot, measures
#   1. perftest: ib_write_bw and ib_read_bw at 64 KiB and 1 MiB, ib_send_lat 2 B (typical);
#   2. the harness: `BIN bench --workload write|read --size 64k|1m --depth 4` and the null
#      call (`--workload null --depth 1`), `--duration 5 --json`, one JSON line each;
#   3. NFSv3 over RDMA to knfsd in the same VM (a tmpfs export), one file of NFS_MB MiB of
#      random bytes: the harness's `nfs3 put` / `nfs3 get` (to /dev/null) vs the Linux kernel
#      client (dd O_DIRECT write from the same file, read to /dev/null, bs=1M);
#   4. the same Linux kernel client against our server (`BIN nfsd`, a tmpfs export like
#      knfsd's, RDMA port 20249, MOUNT on tcp 20248) vs against knfsd: dd write and read of
#      that file (O_DIRECT, bs=1M, caches dropped before each dd), and `tar x` of one archive
#      of SMALL_FILES small files into the mount (files/s; the result is compared with the
#      archive's tree by diff -r on the backing directory).
# Everything each tool prints goes to the log (--log, default target/bench-rxe/bench.log);
# stdout gets one line per step and then a Markdown table comparing the harness with the
# references, also written to --table (default target/bench-rxe/table.md). A step that fails
# is FAILED in the table and the others still run; the exit status is 1 if any step FAILED.
# MB = 10^6 bytes everywhere (perftest's MiB/s are converted; the harness's and dd's rates are
# recomputed from bytes and seconds).
# Env: DURATION (harness seconds per run, 5), BW64_ITERS (3000), BW1M_ITERS (200),
#      LAT_ITERS (20000), NFS_MB (64), HARNESS_DEPTH (4), NFS_DEPTH (8: nfs3 --depth),
#      SMALL_FILES (2000: files in the tar x archive).
export LC_ALL=C
: "${RXE_DEV:?run me with cargo xtask vm (or cargo xtask bench-rxe)}" "${RXE_GID_INDEX:?}" "${RXE_IP:?}"

LOG=target/bench-rxe/bench.log
TABLE=target/bench-rxe/table.md
HARNESS=target/release/userspace-harness
HARNESS_ERROR=
while [ $# -gt 0 ]; do
    case $1 in
    --log) LOG=$2 ;;
    --table) TABLE=$2 ;;
    --harness) HARNESS=$2 ;;
    --harness-error) HARNESS_ERROR=$2 ;; # the harness could not be built: its rows FAILED
    *)
        echo "bench.sh: unknown argument $1 (--log FILE, --table FILE, --harness BIN," \
            "--harness-error WHY)" >&2
        exit 2
        ;;
    esac
    [ $# -ge 2 ] || { echo "bench.sh: $1 needs a value" >&2; exit 2; }
    shift 2
done
DURATION=${DURATION:-5}
BW64_ITERS=${BW64_ITERS:-3000}
BW1M_ITERS=${BW1M_ITERS:-200}
LAT_ITERS=${LAT_ITERS:-20000}
NFS_MB=${NFS_MB:-64}
DEPTH=${HARNESS_DEPTH:-4}
NFS_DEPTH=${NFS_DEPTH:-8}
SMALL_FILES=${SMALL_FILES:-2000}

mkdir -p "$(dirname "$LOG")" "$(dirname "$TABLE")" || exit 2
: >"$LOG" || exit 2
tmp=$(mktemp -d) || exit 2
failed=0
started=$(date +%s.%N)

# Every result is a variable V_<key>: a number (MB/s or µs), or a word for the table:
# FAILED (the step failed; why is in the log and on stdout) or n/a (could not run here).

now() { date +%s.%N; }
since() { echo "$1 $(now)" | awk '{printf "%.1f", $2 - $1}'; }
log() { printf '%s\n' "$*" >>"$LOG"; }
# logfile TAG FILE: FILE's lines into the log, each prefixed with [TAG].
logfile() { sed "s/^/   [$1] /" "$2" >>"$LOG"; }
# say MSG: a progress line on stdout and in the log.
say() {
    echo "bench: $*"
    log "== $*"
}
is_num() { printf '%s' "$1" | grep -Eq '^[0-9]+(\.[0-9]+)?([eE][-+]?[0-9]+)?$'; }
set_result() { eval "V_$1=\$2"; }
result() { eval "printf '%s' \"\${V_$1:-n/a}\""; }
fail() {
    set_result "$1" FAILED
    failed=$((failed + 1))
    say "FAILED: $2"
}

# listening, wait_listening
. "$(dirname "$0")/listen.sh"

# ---- 1. perftest ---------------------------------------------------------------------------

# perftest KEY WHAT COLUMN SCALE TOOL ARGS...: TOOL ARGS as the server in the background, then
# as the client to $RXE_IP once the server listens (perftest's port 18515); the client's
# result line (the one starting with the message size) gives COLUMN, times SCALE.
perftest() {
    key=$1 what=$2 column=$3 scale=$4
    shift 4
    size=$(printf '%s\n' "$@" | grep -A1 -x -- -s | tail -1)
    log ""
    log "== $what: $*"
    t=$(now)
    timeout 180 "$@" >"$tmp/server" 2>&1 &
    server=$!
    wait_listening 18515 150
    timeout 150 "$@" "$RXE_IP" >"$tmp/client" 2>&1
    client_rc=$?
    [ "$client_rc" = 0 ] || kill "$server" 2>/dev/null
    wait "$server"
    server_rc=$?
    logfile client "$tmp/client"
    logfile server "$tmp/server"
    value=$(awk -v s="$size" -v c="$column" -v k="$scale" \
        '$1 == s && NF >= c { printf "%.2f", $c * k; exit }' "$tmp/client")
    if [ "$client_rc" != 0 ] || [ "$server_rc" != 0 ]; then
        fail "$key" "$what (client exit $client_rc, server exit $server_rc; see $LOG)"
    elif ! is_num "$value"; then
        fail "$key" "$what: no result line in its output (see $LOG)"
    else
        set_result "$key" "$value"
        case $what in
        *lat*) say "$what: typical $value us ($(since "$t") s)" ;;
        *) say "$what: $value MB/s ($(since "$t") s)" ;;
        esac
    fi
}

# perftest reports MB/sec = 2^20 B/s: 1.048576 makes it 10^6 B/s.
pt_args="-d $RXE_DEV -x $RXE_GID_INDEX -F"
say "rxe loopback on $RXE_DEV (RoCE v2 GID $RXE_GID_INDEX, $RXE_IP), kernel $(uname -r)"
# shellcheck disable=SC2086 # pt_args is a list of words
{
    perftest pw64 "ib_write_bw 64 KiB" 4 1.048576 ib_write_bw $pt_args -s 65536 -n "$BW64_ITERS"
    perftest pw1m "ib_write_bw 1 MiB" 4 1.048576 ib_write_bw $pt_args -s 1048576 -n "$BW1M_ITERS"
    perftest pr64 "ib_read_bw 64 KiB" 4 1.048576 ib_read_bw $pt_args -s 65536 -n "$BW64_ITERS"
    perftest pr1m "ib_read_bw 1 MiB" 4 1.048576 ib_read_bw $pt_args -s 1048576 -n "$BW1M_ITERS"
    # t_typical[usec] is the 5th column.
    perftest plat "ib_send_lat 2 B" 5 1 ib_send_lat $pt_args -s 2 -n "$LAT_ITERS"
}

# ---- 2. the harness ------------------------------------------------------------------------

# jnum KEY JSON: the number after "KEY": in JSON (the last one, if KEY is there twice).
jnum() {
    printf '%s' "$2" | sed -n "s/.*\"$1\"[[:space:]]*:[[:space:]]*\([-0-9.eE+]*\).*/\1/p"
}

# harness KEY WORKLOAD SIZE BYTES DEPTH: one `bench` run; its MB/s (from ops x BYTES / secs)
# or, for the null call, its p50 latency in µs. V_<KEY>_errors gets its error count.
harness() {
    key=$1 workload=$2 size=$3 bytes=$4 depth=$5
    what="harness $workload $size depth $depth"
    [ "$workload" = null ] && what="harness null depth $depth"
    log ""
    log "== $what: $HARNESS bench --workload $workload$([ "$workload" = null ] || echo " --size $size") --depth $depth --duration $DURATION --json"
    if [ -n "$HARNESS_ERROR" ]; then
        fail "$key" "$what: $HARNESS_ERROR"
        return
    elif [ -z "$harness_ok" ]; then
        set_result "$key" n/a
        say "$what: not available ($harness_why)"
        return
    fi
    t=$(now)
    # A NULL call has no size (the harness takes 1 byte to 2m): the null run goes without one.
    if [ "$workload" = null ]; then set --; else set -- --size "$size"; fi
    timeout $((DURATION + 120)) "$HARNESS" bench --workload "$workload" "$@" \
        --depth "$depth" --duration "$DURATION" --json >"$tmp/out" 2>"$tmp/err"
    rc=$?
    logfile stdout "$tmp/out"
    logfile stderr "$tmp/err"
    json=$(grep '^[[:space:]]*{' "$tmp/out" | tail -1)
    # The top-level fields: the JSON without its "counters" and "lat_us" objects (both flat).
    top=$(printf '%s' "$json" | sed 's/"\(counters\|lat_us\)"[[:space:]]*:[[:space:]]*{[^}]*}//g')
    lat=$(printf '%s' "$json" | sed -n 's/.*"lat_us"[[:space:]]*:[[:space:]]*{\([^}]*\)}.*/\1/p')
    ops=$(jnum ops "$top")
    secs=$(jnum secs "$top")
    errors=$(jnum errors "$top")
    p50=$(jnum p50 "$lat")
    set_result "${key}_errors" "${errors:-?}"
    if [ "$rc" != 0 ]; then
        fail "$key" "$what: exit $rc$(tail -1 "$tmp/err" | sed 's/^/: /')"
    elif [ -z "$json" ] || ! is_num "$ops" || ! is_num "$secs" || ! is_num "$p50"; then
        fail "$key" "$what: no JSON result with ops, secs and lat_us.p50 (see $LOG)"
    elif [ "$workload" = null ]; then
        set_result "$key" "$p50"
        say "$what: p50 $p50 us, $ops calls in $secs s, errors $errors ($(since "$t") s)"
    else
        mbs=$(awk -v o="$ops" -v b="$bytes" -v s="$secs" 'BEGIN { printf "%.2f", o * b / s / 1e6 }')
        set_result "$key" "$mbs"
        say "$what: $mbs MB/s, $ops ops in $secs s, p50 $p50 us, errors $errors ($(since "$t") s)"
    fi
}

harness_ok=
if [ ! -x "$HARNESS" ]; then
    harness_why="$HARNESS is missing"
elif ! "$HARNESS" bench --help >"$tmp/help" 2>&1; then
    harness_why="$HARNESS has no bench subcommand yet"
    logfile "bench --help" "$tmp/help"
else
    harness_ok=1
fi
harness hw64 write 64k 65536 "$DEPTH"
harness hw1m write 1m 1048576 "$DEPTH"
harness hr64 read 64k 65536 "$DEPTH"
harness hr1m read 1m 1048576 "$DEPTH"
harness hnull null - 0 1

# ---- 3. the kernel NFS client over RDMA to knfsd -------------------------------------------
# After the harness: knfsd's RDMA listener takes port 20049, the harness's default too.

# run CMD...: CMD with its output in the log; its status.
run() {
    log "+ $*"
    "$@" >"$tmp/run" 2>&1
    rc=$?
    logfile out "$tmp/run"
    [ "$rc" = 0 ] || log "   (exit $rc)"
    return "$rc"
}

# nfs_server: knfsd with RDMA on 20049 exporting a tmpfs /export (knfsd.sh), and the NFS client.
# The tmpfs holds 3 x NFS_MB + 64 MiB: knfsd's file cache may keep the harness's deleted file
# open (its space in use) while the kernel client writes its own copy.
nfs_server() {
    run modprobe -a nfsv3 || return 1
    mkdir -p /mnt/bench-nfs || return 1
    run env EXPORT_SIZE=$((NFS_MB * 3 + 64))m sh "$(dirname "$0")/knfsd.sh" || return 1
    logfile portlist /proc/fs/nfsd/portlist
}

# dd_rate KEY WHAT DD-ARGS...: dd's bytes and seconds from its last line; MB/s.
dd_rate() {
    key=$1 what=$2
    shift 2
    sync
    echo 3 >/proc/sys/vm/drop_caches 2>/dev/null || log "   (cannot drop caches)"
    log "+ dd $*"
    timeout 300 dd "$@" >"$tmp/dd" 2>&1
    rc=$?
    logfile dd "$tmp/dd"
    value=$(awk '/copied/ { for (i = 1; i < NF; i++) if ($i == "copied,") { printf "%.2f", $1 / $(i + 1) / 1e6; exit } }' "$tmp/dd")
    if [ "$rc" != 0 ] || ! is_num "$value"; then
        fail "$key" "$what: dd exit $rc$(tail -1 "$tmp/dd" | sed 's/^/: /')"
    else
        set_result "$key" "$value"
        say "$what: $value MB/s"
    fi
}

# nfs3_op KEY WHAT ARGS...: one `nfs3` run of the harness; MB/s from its summary line.
nfs3_op() {
    key=$1 what=$2
    shift 2
    log "+ $HARNESS nfs3 -q --server $RXE_IP --depth $NFS_DEPTH $*"
    if [ -z "$harness_ok" ]; then
        set_result "$key" n/a
        say "$what: not available ($harness_why)"
        return 1
    fi
    timeout 300 "$HARNESS" nfs3 -q --server "$RXE_IP" --depth "$NFS_DEPTH" "$@" \
        >"$tmp/nfs3" 2>&1
    rc=$?
    logfile nfs3 "$tmp/nfs3"
    value=$(sed -n 's/.*, \([0-9.]*\) MB\/s;.*/\1/p' "$tmp/nfs3" | tail -1)
    if [ "$rc" != 0 ] || ! is_num "$value"; then
        fail "$key" "$what: exit $rc$(tail -1 "$tmp/nfs3" | sed 's/^/: /')"
        return 1
    fi
    set_result "$key" "$value"
    say "$what: $value MB/s"
}

# nfs3_runs: the harness's NFS client: put the source file, check it on the server, get it.
nfs3_runs() {
    nfs3_op hput "harness nfs3 put ${NFS_MB} MiB" put "$src" /bench-harness || {
        set_result hget FAILED
        return 1
    }
    if ! cmp -s "$src" /export/bench-harness; then
        fail hput "harness nfs3 put: the file on the server differs from the source"
        set_result hget FAILED
        return 1
    fi
    nfs3_op hget "harness nfs3 get ${NFS_MB} MiB" get /bench-harness /dev/null
    rc=$?
    rm -f /export/bench-harness
    return $rc
}

# mountstats DEVICE: the client's xprt: line for DEVICE (counts of calls, bad XIDs) into the log.
mountstats() {
    awk -v d="device $1 " 'index($0, d) { f = 1 } f && /xprt:/ { print; exit }' \
        /proc/self/mountstats >>"$LOG"
}

# small_archive: $tmp/small.tar, SMALL_FILES files of 700 to 7,000 random bytes in 10
# directories (the tree stays in $tmp/small to compare with); made once.
small_archive() {
    [ -s "$tmp/small.tar" ] && return 0
    per=$((SMALL_FILES / 10))
    k=0
    while [ "$k" -lt 10 ]; do
        nf=$per
        [ "$k" = 9 ] && nf=$((SMALL_FILES - 9 * per))
        fsize=$((700 * (k + 1)))
        mkdir -p "$tmp/small/d$k" || return 1
        head -c $((nf * fsize)) /dev/urandom | split -b "$fsize" -a 5 -d - "$tmp/small/d$k/f" ||
            return 1
        k=$((k + 1))
    done
    got=$(find "$tmp/small" -type f | wc -l)
    [ "$got" = "$SMALL_FILES" ] || { log "small archive: $got files, not $SMALL_FILES"; return 1; }
    tar cf "$tmp/small.tar" -C "$tmp/small" . || return 1
}

# tar_rate KEY WHAT MNT BACKING: `tar x` of the archive into MNT/small (caches dropped first);
# files/s; the tree in BACKING/small must equal the archive's, then it is removed there.
# (sh has no locals: small_archive must not use these names.)
tar_rate() {
    key=$1 what=$2 m=$3 b=$4
    if ! small_archive; then
        fail "$key" "$what: cannot make the archive (see $LOG)"
        return
    fi
    mkdir -p "$m/small" || { fail "$key" "$what: mkdir $m/small"; return; }
    sync
    echo 3 >/proc/sys/vm/drop_caches 2>/dev/null
    log "+ tar xf $tmp/small.tar -C $m/small"
    t0=$(now)
    timeout 900 tar xf "$tmp/small.tar" -C "$m/small" >"$tmp/tar" 2>&1
    rc=$?
    t1=$(now)
    logfile tar "$tmp/tar"
    secs=$(echo "$t0 $t1" | awk '{printf "%.3f", $2 - $1}')
    if [ "$rc" != 0 ]; then
        fail "$key" "$what: tar exit $rc$(tail -1 "$tmp/tar" | sed 's/^/: /')"
    elif ! diff -r "$tmp/small" "$b/small" >"$tmp/diff" 2>&1; then
        logfile diff "$tmp/diff"
        fail "$key" "$what: $b/small differs from the archive's tree (see $LOG)"
    else
        value=$(awk -v n="$SMALL_FILES" -v s="$secs" 'BEGIN { printf "%.1f", n / s }')
        set_result "$key" "$value"
        say "$what: $value files/s ($secs s)"
    fi
    rm -rf "${b:?}/small"
}

# client_rows W R T WHO MNT BACKING: the kernel client's rows against one server (WHO), mounted
# on MNT and serving BACKING: dd write of $src (compared with BACKING/bench), dd read of it,
# tar x of the archive; results in W, R and T.
client_rows() {
    cw=$1 cr=$2 ct=$3 who=$4 cm=$5 cb=$6
    dd_rate "$cw" "kernel NFS/RDMA to $who: dd write ${NFS_MB} MiB" \
        if="$src" of="$cm/bench" bs=1M count="$NFS_MB" oflag=direct
    if [ "$(result "$cw")" != FAILED ] && ! cmp -s "$src" "$cb/bench"; then
        fail "$cw" "kernel NFS/RDMA to $who: dd write: $cb/bench differs from the source"
    fi
    if [ "$(result "$cw")" = FAILED ]; then
        set_result "$cr" FAILED
        say "FAILED: kernel NFS/RDMA to $who: dd read: nothing to read"
    else
        dd_rate "$cr" "kernel NFS/RDMA to $who: dd read ${NFS_MB} MiB" \
            if="$cm/bench" of=/dev/null bs=1M iflag=direct
    fi
    rm -f "$cm/bench"
    tar_rate "$ct" "kernel NFS/RDMA to $who: tar x of $SMALL_FILES files" "$cm" "$cb"
}

log ""
log "== NFSv3 over RDMA to knfsd (tmpfs export), ${NFS_MB} MiB: harness nfs3 put/get, kernel dd bs=1M O_DIRECT"
mnt=/mnt/bench-nfs
opts=vers=3,proto=rdma,port=20049,nolock,soft,timeo=150,retrans=2
if [ ! -e /run/krpc-vm/cmd.sh ]; then
    # Not the krpc-rdma VM (the host has an RDMA device): no NFS server set up on a real host.
    set_result nw n/a
    set_result nr n/a
    say "kernel NFS/RDMA: skipped (not in the VM: it would reconfigure this machine's NFS server)"
else
    t=$(now)
    src=/tmp/bench-nfs-src
    if ! nfs_server || ! head -c $((NFS_MB * 1048576)) /dev/urandom >"$src"; then
        fail nw "knfsd setup (see $LOG)"
        set_result nr FAILED
        set_result hput FAILED
        set_result hget FAILED
    elif ! nfs3_runs; then
        : # nfs3_runs recorded its results; the kernel client still runs
    fi
    if [ "$(result nw)" = FAILED ]; then
        :
    elif ! run mount -t nfs -o "$opts" "$RXE_IP:/export" "$mnt"; then
        fail nw "mount -t nfs -o $opts $RXE_IP:/export $mnt (see $LOG)"
        set_result nr FAILED
    else
        say "kernel NFS/RDMA: knfsd up, mounted over RDMA ($(since "$t") s)"
        grep " $mnt " /proc/mounts >>"$LOG"
        client_rows nw nr kt knfsd "$mnt" /export
        mountstats "$RXE_IP:/export"
        run umount "$mnt"
    fi
fi

# ---- 4. the same kernel client against our server ------------------------------------------
# `$HARNESS nfsd` (krpc-rdma-nfsd) serving its own tmpfs, /export-ours, sized like knfsd's; RDMA
# port 20249 (knfsd holds 20049), MOUNT v3 on tcp 20248. Same mount options as for knfsd plus
# the MOUNT port; the same source file and archive.

log ""
log "== NFSv3 over RDMA to our nfsd (tmpfs export), ${NFS_MB} MiB dd O_DIRECT and tar x of $SMALL_FILES files"
ours=/export-ours
omnt=/mnt/bench-ours
oport=20249
omport=20248
oopts=vers=3,proto=rdma,port=$oport,mountport=$omport,mountproto=tcp,nolock,soft,timeo=150,retrans=2
opid=
# start_ours: the tmpfs and the server, up when it printed "nfsd: serving".
start_ours() {
    mkdir -p "$ours" "$omnt" || return 1
    if ! mountpoint -q "$ours"; then
        run mount -t tmpfs -o "size=$((NFS_MB * 3 + 64))m" tmpfs "$ours" || return 1
    fi
    log "+ $HARNESS nfsd --listen $RXE_IP:$oport --export $ours --mount-port $omport --clients *(rw,no_root_squash)"
    "$HARNESS" nfsd --listen "$RXE_IP:$oport" --export "$ours" --mount-port "$omport" --clients "*(rw,no_root_squash)" \
        >"$tmp/nfsd" 2>&1 &
    opid=$!
    n=300
    until grep -q '^nfsd: serving ' "$tmp/nfsd" || [ "$n" -le 0 ]; do
        kill -0 "$opid" 2>/dev/null || break
        sleep 0.1
        n=$((n - 1))
    done
    grep -q '^nfsd: serving ' "$tmp/nfsd"
}
# stop_ours: SIGTERM; its lines (per connection, totals, transport counters) into the log.
stop_ours() {
    [ -n "$opid" ] || return 0
    kill -TERM "$opid" 2>/dev/null
    wait "$opid"
    rc=$?
    logfile nfsd "$tmp/nfsd"
    [ "$rc" = 0 ] || log "   (nfsd exit $rc)"
    say "our nfsd: $(grep '^nfsd: [0-9]' "$tmp/nfsd" | tail -1 | sed 's/^nfsd: //')"
    say "our nfsd transport: $(sed -n 's/^nfsd transport: //p' "$tmp/nfsd" | tail -1)"
}

if [ ! -e /run/krpc-vm/cmd.sh ]; then
    for k in lw lr lt; do set_result $k n/a; done
    say "kernel NFS/RDMA to our nfsd: skipped (not in the VM)"
elif [ -z "$harness_ok" ]; then
    for k in lw lr lt; do set_result $k n/a; done
    say "kernel NFS/RDMA to our nfsd: not available ($harness_why)"
else
    t=$(now)
    if ! { [ -s "$src" ] || head -c $((NFS_MB * 1048576)) /dev/urandom >"$src"; }; then
        fail lw "source file $src"
    elif ! start_ours; then
        fail lw "our nfsd did not start (see $LOG)"
        logfile nfsd "$tmp/nfsd"
    elif ! run modprobe -a nfsv3 rpcrdma ||
        ! run mount -t nfs -o "$oopts" "$RXE_IP:$ours" "$omnt"; then
        fail lw "mount -t nfs -o $oopts $RXE_IP:$ours $omnt (see $LOG)"
    else
        say "kernel NFS/RDMA: our nfsd up, mounted over RDMA ($(since "$t") s)"
        grep " $omnt " /proc/mounts >>"$LOG"
        client_rows lw lr lt "our nfsd" "$omnt" "$ours"
        mountstats "$RXE_IP:$ours"
        run umount "$omnt"
    fi
    [ "$(result lw)" = FAILED ] && [ "$(result lr)" = n/a ] && set_result lr FAILED
    [ "$(result lw)" = FAILED ] && [ "$(result lt)" = n/a ] && set_result lt FAILED
    stop_ours
    if grep -q 'err_chunk_sent\|err_vers_sent' "$tmp/nfsd"; then
        fail lw "our nfsd sent RDMA_ERROR (see $LOG)"
    fi
fi

# ---- the table -----------------------------------------------------------------------------

# cell KEY: the value as the table shows it, with the harness's errors if any.
cell() {
    v=$(result "$1")
    e=$(result "${1}_errors")
    if is_num "$e" && [ "$e" != 0 ]; then
        printf '%s (%s errors)' "$v" "$e"
    else
        printf '%s' "$v"
    fi
}
# row TEST HKEY RKEY TARGET: TARGET is ">=0.8", "<=2", "-" (no target: info) or "ref" (a
# reference row: what counts is the reference's own figure, the harness's is beside it).
row() {
    h=$(result "$2") r=$(result "$3") e=$(result "${2}_errors")
    if is_num "$h" && is_num "$r" && awk -v r="$r" 'BEGIN { exit !(r > 0) }'; then
        ratio=$(awk -v h="$h" -v r="$r" 'BEGIN { printf "%.2f", h / r }')
        case $4 in
        ">=0.8") verdict=$(awk -v x="$ratio" 'BEGIN { print (x >= 0.8) ? "PASS" : "MISS" }') ;;
        "<=2") verdict=$(awk -v x="$ratio" 'BEGIN { print (x <= 2) ? "PASS" : "MISS" }') ;;
        ">=1") verdict=$(awk -v x="$ratio" 'BEGIN { print (x >= 1) ? "PASS" : "MISS" }') ;;
        ref) verdict=ref ;;
        *) verdict=info ;;
        esac
        if is_num "$e" && [ "$e" != 0 ] && [ "$verdict" = PASS ]; then
            verdict="MISS (errors)"
        fi
    else
        ratio=-
        case "$4 $h $r" in
        ref*FAILED) verdict=FAILED ;;
        ref*) is_num "$r" && verdict=ref || verdict=n/a ;;
        *FAILED*) verdict=FAILED ;;
        *) verdict=n/a ;;
        esac
    fi
    target=$4
    [ "$target" = ref ] && target=-
    printf '| %s | %s | %s | %s | %s | %s |\n' "$1" "$(cell "$2")" "$(cell "$3")" "$ratio" "$target" "$verdict"
}

{
    echo "## krpc-rdma over rxe: harness vs perftest and the kernel NFS client"
    echo
    echo "One boot of the qemu VM, $RXE_DEV loopback (MTU $(cat /sys/class/net/eth0/mtu)), kernel $(uname -r), $(date -u '+%Y-%m-%d %H:%M UTC'); $(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //'), $(nproc) vCPUs."
    echo
    echo "| test | harness | reference | ratio | target | result |"
    echo "|---|---|---|---|---|---|"
    row "DDP WRITE 64 KiB, MB/s (vs ib_read_bw 64 KiB)" hw64 pr64 -
    row "DDP WRITE 1 MiB, MB/s (vs ib_read_bw 1 MiB)" hw1m pr1m ">=0.8"
    row "DDP READ 64 KiB, MB/s (vs ib_write_bw 64 KiB)" hr64 pw64 -
    row "DDP READ 1 MiB, MB/s (vs ib_write_bw 1 MiB)" hr1m pw1m ">=0.8"
    row "small-call round trip p50, us (vs ib_send_lat 2 B typical)" hnull plat "<=2"
    row "NFSv3 put ${NFS_MB} MiB: harness nfs3 vs kernel client dd write O_DIRECT, MB/s" hput nw ">=1"
    row "NFSv3 get ${NFS_MB} MiB: harness nfs3 vs kernel client dd read O_DIRECT, MB/s" hget nr ">=1"
    row "DDP WRITE 1 MiB vs kernel NFSv3/RDMA dd write ${NFS_MB} MiB O_DIRECT, MB/s" hw1m nw ref
    row "DDP READ 1 MiB vs kernel NFSv3/RDMA dd read ${NFS_MB} MiB O_DIRECT, MB/s" hr1m nr ref
    row "Linux client dd write ${NFS_MB} MiB O_DIRECT bs=1M: our nfsd vs knfsd, MB/s" lw nw ">=1"
    row "Linux client dd read ${NFS_MB} MiB O_DIRECT bs=1M: our nfsd vs knfsd, MB/s" lr nr ">=1"
    row "Linux client tar x of $SMALL_FILES files: our nfsd vs knfsd, files/s" lt kt ">=0.8"
    echo
    echo "MB = 10^6 bytes. ratio = harness / reference. Harness: \`bench --depth $DEPTH --duration $DURATION\`"
    echo "(null call: depth 1), MB/s from ops x size / secs. A DDP WRITE has the server RDMA-Read the"
    echo "data (ib_read_bw), a DDP READ has it RDMA-Write (ib_write_bw); perftest: one QP, its default"
    echo "depths, $BW64_ITERS x 64 KiB / $BW1M_ITERS x 1 MiB. ib_send_lat reports half a round trip, so a"
    echo "harness round trip at <= 2x is on par. The NFS rows are references (the whole kernel NFS stack,"
    echo "knfsd exporting a tmpfs, rsize/wsize as negotiated). Targets: >= 0.8 of raw bandwidth at 1 MiB,"
    echo "small round trip <= 2x ib_send_lat; the harness's NFS client (nfs3 --depth $NFS_DEPTH, rsize/wsize"
    echo "from FSINFO, get to /dev/null) at least matches the kernel client on the same file and knfsd."
    echo "The last three rows: the Linux kernel client against our server (userspace-harness nfsd, a"
    echo "tmpfs export) in the harness column, against knfsd (a tmpfs export) as the reference; the"
    echo "knfsd dd figures are the kernel-client rows above. Targets: >= 1.0 for dd, >= 0.8 for tar x."
    echo "Soft-RoCE under qemu (TCG unless KVM was usable) is"
    echo "noisy (+-30%): only ratios within one boot mean anything. Raw output: $LOG."
} >"$tmp/table"

cp "$tmp/table" "$TABLE" || echo "bench: cannot write $TABLE" >&2
echo
cat "$tmp/table"
echo
echo "bench: $failed step(s) FAILED; $(since "$started") s in the guest; raw output in $LOG"
rm -rf "$tmp"
[ "$failed" = 0 ]
