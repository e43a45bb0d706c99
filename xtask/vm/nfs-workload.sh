#!/bin/sh
# Real workloads on an NFS mount, every result checked: nfs-workload.sh MNT SCRATCH [short]
#
# MNT is the mount (it must be empty: the last step checks that it is empty again). SCRATCH
# is a local directory (not on NFS) for the reference copies; what the script makes there
# is removed at exit. There is no backing directory to compare with (the kernel server's
# file system is in kernel memory), so every check reads back THROUGH THE MOUNT after
# `sync; echo 3 > /proc/sys/vm/drop_caches`, or with `dd iflag=direct`, so that the
# client's cache does not answer. The same list as krpc-rdma-nfsd's linux_client_rxe test
# (both_ways, trees_and_names, directory_of_5000, parallel_writers):
#   data      dd of random data (256 MiB; short: 32 MiB), buffered conv=fsync write, O_DIRECT
#             read; an O_DIRECT write (16 MiB; short: 4 MiB) read back buffered
#   small     files of 0, 1, 4095, 4096, 1 MiB+3 bytes both ways (dd conv=fsync write +
#             O_DIRECT read; cp + sync write + buffered read)
#   cp -a     a tree of 2,000 small files (20 dirs x 100, d7 owned by uid 1000, a symlink):
#             diff -r, and names, types, modes, owners and sizes compared with stat
#   tar       (not in short) tar x of the tree into the mount, tar c of it back out, compared
#   dir       ls -l of a 5,000-entry directory (short: 500): count and sorted names
#   names     rename, hard link (stat -c %h), symlink (readlink), chmod, truncate -s 3
#   parallel  4 writers of 8 MiB at once (short: 2), each compared
#   rm -r     of everything made; `ls -A MNT` empty
# One line per step (`nfs-workload: STEP: ok (S s)`), `nfs-workload: ok: N steps in S s`
# at the end, exit 0. The first failure stops the run with `nfs-workload: FAIL: STEP: WHAT`
# on stderr and exit 1 (what it made on MNT is left there to look at). Not root: the chown
# is skipped (a note says so). POSIX sh (dash), coreutils, diff, cmp, tar; no busybox.
export LC_ALL=C
set -eu

ME=nfs-workload
STEP=setup
REPORTED=
WORK=
T_START=
NSTEPS=0
DROP_NOTE=

usage() {
    echo "usage: $0 MNT SCRATCH [short]" >&2
    exit 2
}

now() { date +%s.%N; }

# Seconds since $1 (a `now`), one decimal.
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

# The first failure: one line, exit 1 (the EXIT trap cleans SCRATCH up).
fail() {
    echo "$ME: FAIL: $STEP: $*" >&2
    REPORTED=1
    exit 1
}

on_exit() {
    rc=$?
    trap - EXIT
    if [ "$rc" -ne 0 ] && [ -z "$REPORTED" ]; then
        echo "$ME: FAIL: $STEP: a command failed (exit $rc)" >&2
    fi
    # Background writers of a failed run: wait so that nothing writes to SCRATCH any more.
    wait 2>/dev/null || true
    if [ -n "$WORK" ]; then
        rm -rf "$WORK"
    fi
    if [ "$rc" -ne 0 ]; then
        [ -n "$T_START" ] && echo "$ME: what it made on $MNT is left there" >&2
        exit 1
    fi
}

# Run "$@" (a function of the step) as step NAME: timed, one line when it succeeded.
step() {
    STEP=$1
    shift
    t0=$(now)
    "$@"
    NSTEPS=$((NSTEPS + 1))
    echo "$ME: $STEP: ok ($(since "$t0") s)"
}

# Run a command; when it fails, the step fails with WHAT and the command's first lines.
run() {
    what=$1
    shift
    if ! "$@" >"$WORK/out" 2>&1; then
        fail "$what: $(head -n 3 "$WORK/out" | tr '\n' ' ')"
    fi
}

# Expect "$2" (actual) to be "$3"; fail saying WHAT ($1) otherwise.
expect() {
    [ "$2" = "$3" ] || fail "$1: got '$2', want '$3'"
}

# Make the next reads come from the server: flush, then drop the client's page cache.
dropcache() {
    sync
    if ! { echo 3 >/proc/sys/vm/drop_caches; } 2>/dev/null; then
        if [ -z "$DROP_NOTE" ]; then
            echo "$ME: note: cannot write /proc/sys/vm/drop_caches: reads may be answered by the cache"
            DROP_NOTE=1
        fi
    fi
}

# A file of $2 random bytes at $1.
random_file() {
    head -c "$2" /dev/urandom >"$1" || fail "making $2 random bytes in $1"
}

# Read $1 through the mount with O_DIRECT and compare it with $2.
direct_cmp() {
    if ! r=$(dd if="$1" iflag=direct bs=1M status=none | cmp - "$2" 2>&1); then
        fail "$1 read back with O_DIRECT differs from $2: $r"
    fi
}

# Read $1 through the mount after dropping the cache and compare it with $2.
cached_cmp() {
    dropcache
    if ! r=$(cmp "$1" "$2" 2>&1); then
        fail "$1 read back differs from $2: $r"
    fi
}

# ---- the steps ---------------------------------------------------------------------------

st_data() {
    random_file "$WORK/data" $((DATA_MIB * 1048576))
    run "dd write $MNT/data" dd if="$WORK/data" of="$MNT/data" bs=1M conv=fsync status=none
    dropcache
    direct_cmp "$MNT/data" "$WORK/data"
    # The server keeps its files in memory: the big one goes as soon as it is checked.
    run "rm $MNT/data" rm "$MNT/data"
    rm -f "$WORK/data"
    random_file "$WORK/direct" $((DIRECT_MIB * 1048576))
    run "O_DIRECT write $MNT/direct" \
        dd if="$WORK/direct" of="$MNT/direct" bs=1M oflag=direct status=none
    cached_cmp "$MNT/direct" "$WORK/direct"
}

st_small() {
    for len in 0 1 4095 4096 1048579; do
        random_file "$WORK/s$len" "$len"
        # dd with fsync, read back with O_DIRECT.
        run "dd write $MNT/dd$len" dd if="$WORK/s$len" of="$MNT/dd$len" bs=1M conv=fsync status=none
        dropcache
        direct_cmp "$MNT/dd$len" "$WORK/s$len"
        expect "size of $MNT/dd$len" "$(stat -c %s "$MNT/dd$len")" "$len"
        # cp (buffered) and sync, read back buffered.
        run "cp to $MNT/cp$len" cp "$WORK/s$len" "$MNT/cp$len"
        cached_cmp "$MNT/cp$len" "$WORK/s$len"
    done
}

# What stat says of every entry under $1 (sorted): names, types, modes, owners; sizes of
# non-directories (a directory's size is the file system's business).
tree_stat() {
    (cd "$1" && find . ! -type d -exec stat -c '%n %F %a %u:%g %s' {} + &&
        find . -type d -exec stat -c '%n %F %a %u:%g' {} +) | sort
}

# Compare tree $2 (through the mount) with the reference tree $1.
tree_cmp() {
    dropcache
    run "diff -r $1 $2" diff -r "$1" "$2"
    tree_stat "$1" >"$WORK/stat.want" || fail "stat of $1"
    tree_stat "$2" >"$WORK/stat.got" || fail "stat of $2"
    if ! r=$(diff "$WORK/stat.want" "$WORK/stat.got" 2>&1); then
        fail "stat of $2 differs from $1: $(echo "$r" | head -n 4 | tr '\n' ' ')"
    fi
}

st_cp_tree() {
    t=$WORK/tree
    mkdir "$t"
    i=1
    while [ "$i" -le 20 ]; do
        mkdir "$t/d$i"
        j=1
        while [ "$j" -le 100 ]; do
            echo "file $i $j" >"$t/d$i/f$j"
            j=$((j + 1))
        done
        i=$((i + 1))
    done
    chmod 600 "$t/d3/f5"
    chmod 755 "$t/d4/f6"
    if [ "$(id -u)" -eq 0 ]; then
        chown -R 1000:1000 "$t/d7"
        OWNED=1
    else
        echo "$ME: note: not root: no chown (the owner check compares the one uid)"
        OWNED=
    fi
    ln -s d1/f1 "$t/link"
    (cd "$WORK" && tar cf tree.tar tree) || fail "tar cf of the reference tree"
    run "cp -a to $MNT/tree" cp -a "$t" "$MNT/tree"
    tree_cmp "$t" "$MNT/tree"
    if [ -n "$OWNED" ]; then
        expect "owner of $MNT/tree/d7/f3" "$(stat -c %u:%g "$MNT/tree/d7/f3")" 1000:1000
        expect "owner of $MNT/tree/d7" "$(stat -c %u:%g "$MNT/tree/d7")" 1000:1000
    fi
    expect "readlink $MNT/tree/link" "$(readlink "$MNT/tree/link")" d1/f1
    expect "mode of $MNT/tree/d3/f5" "$(stat -c %a "$MNT/tree/d3/f5")" 600
}

st_tar() {
    mkdir "$MNT/untar" || fail "mkdir $MNT/untar"
    run "tar x into $MNT/untar" tar xf "$WORK/tree.tar" -C "$MNT/untar"
    tree_cmp "$WORK/tree" "$MNT/untar/tree"
    run "tar c of $MNT/untar" tar cf "$WORK/back.tar" -C "$MNT/untar" tree
    mkdir "$WORK/back"
    run "tar x of the archive made from the mount" tar xf "$WORK/back.tar" -C "$WORK/back"
    tree_cmp "$WORK/tree" "$WORK/back/tree"
}

st_dir() {
    mkdir "$MNT/big" || fail "mkdir $MNT/big"
    i=1
    while [ "$i" -le "$DIR_N" ]; do
        true >"$MNT/big/entry-$i" || fail "creating $MNT/big/entry-$i"
        echo "entry-$i"
        i=$((i + 1))
    done >"$WORK/names"
    sort "$WORK/names" >"$WORK/names.want"
    dropcache
    run "ls -l $MNT/big" ls -l "$MNT/big"
    expect "regular files in ls -l $MNT/big" "$(grep -c '^-' "$WORK/out")" "$DIR_N"
    dropcache
    ls "$MNT/big" >"$WORK/names.ls" || fail "ls $MNT/big"
    expect "ls $MNT/big | wc -l" "$(wc -l <"$WORK/names.ls" | tr -d ' ')" "$DIR_N"
    sort "$WORK/names.ls" >"$WORK/names.got"
    if ! r=$(cmp "$WORK/names.want" "$WORK/names.got" 2>&1); then
        fail "the names in $MNT/big are not entry-1..entry-$DIR_N: $r"
    fi
}

st_names() {
    tr=$MNT/tree
    run "mv" mv "$tr/d1/f1" "$tr/d2/moved"
    dropcache
    [ ! -e "$tr/d1/f1" ] || fail "$tr/d1/f1 still there after mv"
    expect "content of $tr/d2/moved" "$(cat "$tr/d2/moved")" "file 1 1"
    run "ln" ln "$tr/d2/moved" "$tr/hard"
    dropcache
    expect "link count of $tr/d2/moved" "$(stat -c %h "$tr/d2/moved")" 2
    expect "inode of $tr/hard" "$(stat -c %i "$tr/hard")" "$(stat -c %i "$tr/d2/moved")"
    run "ln -s" ln -s ../d2/moved "$tr/d3/sym"
    dropcache
    expect "readlink $tr/d3/sym" "$(readlink "$tr/d3/sym")" ../d2/moved
    expect "content through $tr/d3/sym" "$(cat "$tr/d3/sym")" "file 1 1"
    run "chmod" chmod 640 "$tr/hard"
    dropcache
    expect "mode of $tr/d2/moved" "$(stat -c %a "$tr/d2/moved")" 640
    run "truncate" truncate -s 3 "$tr/hard"
    dropcache
    expect "size of $tr/d2/moved" "$(stat -c %s "$tr/d2/moved")" 3
    expect "content of $tr/d2/moved" "$(cat "$tr/d2/moved")" fil
    run "rm of a hard link" rm "$tr/hard"
    dropcache
    expect "link count of $tr/d2/moved after rm" "$(stat -c %h "$tr/d2/moved")" 1
}

st_parallel() {
    random_file "$WORK/par" $((8 * 1048576))
    pids=
    i=1
    while [ "$i" -le "$PAR_N" ]; do
        dd if="$WORK/par" of="$MNT/par$i" bs=1M conv=fsync status=none &
        pids="$pids $!"
        i=$((i + 1))
    done
    for p in $pids; do
        wait "$p" || fail "a writer (pid $p) failed"
    done
    dropcache
    i=1
    while [ "$i" -le "$PAR_N" ]; do
        direct_cmp "$MNT/par$i" "$WORK/par"
        i=$((i + 1))
    done
}

st_rm() {
    (cd "$MNT" && rm -r ./*) || fail "rm -r of everything in $MNT"
    dropcache
    left=$(ls -A "$MNT") || fail "ls -A $MNT"
    [ -z "$left" ] || fail "$MNT not empty after rm -r: $(echo "$left" | head -n 5 | tr '\n' ' ')"
}

# ---- main --------------------------------------------------------------------------------

[ $# -eq 2 ] || [ $# -eq 3 ] || usage
MNT=$1
SCRATCH=$2
MODE=${3:-full}
case $MODE in
    full) DATA_MIB=256 DIRECT_MIB=16 DIR_N=5000 PAR_N=4 ;;
    short) DATA_MIB=32 DIRECT_MIB=4 DIR_N=500 PAR_N=2 ;;
    *) usage ;;
esac
[ -d "$MNT" ] || fail "MNT $MNT is not a directory"
[ -d "$SCRATCH" ] || fail "SCRATCH $SCRATCH is not a directory"
if [ -n "$(ls -A "$MNT")" ]; then
    fail "MNT $MNT is not empty (the last step checks that it is empty again)"
fi
trap on_exit EXIT
trap 'echo "$ME: FAIL: $STEP: interrupted by a signal" >&2; REPORTED=1; exit 1' INT TERM HUP
WORK=$(mktemp -d "$SCRATCH/nfs-workload.XXXXXX") || fail "mktemp -d in $SCRATCH"
T_START=$(now)
echo "$ME: $MODE run on $MNT, scratch $WORK"

step "dd $DATA_MIB MiB write+read, O_DIRECT $DIRECT_MIB MiB write+read" st_data
step "files of 0, 1, 4095, 4096, 1 MiB+3 bytes both ways" st_small
step "cp -a of a tree of 2000 files" st_cp_tree
if [ "$MODE" = full ]; then
    step "tar x and tar c of the tree" st_tar
fi
step "ls -l of a $DIR_N-entry directory" st_dir
step "rename, hard link, symlink, chmod, truncate" st_names
step "$PAR_N parallel writers of 8 MiB" st_parallel
step "rm -r of everything" st_rm
echo "$ME: ok: $NSTEPS steps in $(since "$T_START") s"
