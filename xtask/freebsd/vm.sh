#!/bin/sh
# cargo xtask freebsd-vm: boot the FreeBSD image (freebsd-setup's tarball) under qemu (TCG) with
# OVMF and FreeBSD's own EFI loader, the image served as a FAT disk (qemu's vvfat), the serial
# console in $LOG.
#
# Boot 1 (always): with a krpc_rdma.ko (built with SELFTEST=1), the loader preloads it with
# the other modules, the kernel links it and runs its MOD_LOAD (boot_verbose: it says
# "krpc_rdma: loaded"), and with krpc_rdma.selftest=1 a kernel thread runs the self-test, then
# the face test against FreeBSD's own krpc, and powers the VM off
# (ofed-shim/c/krpc_rdma_bsd_{selftest,facetest}.c). This boot has no root file system:
# without a module the kernel ends at the mountroot prompt, where this script stops it.
#
# Boot 2 (with krpc_rdma_kldtest.ko beside krpc_rdma.ko): the load/unload test. A second disk
# (virtio-blk, a FAT image made here with mtools) is the root file system: /boot/kernel/
# krpc_rdma.ko and an /sbin/init that only sleeps (init.c, built here with Debian's clang for
# FreeBSD/amd64). The loader preloads krpc_rdma_kldtest.ko, which kern_kldloads krpc_rdma.ko,
# runs its face test, checks what it leaves and kern_kldunloads it, 20 times, then powers off
# (ofed-shim/c/krpc_rdma_bsd_kldtest.c).
#
# The checks: the kernel booted; every module preloaded; no link error, no panic, no WITNESS
# warning, no malloc type unloaded with memory in use; krpc_rdma.ko loaded and its self-test,
# face test and load/unload cycles passed. One summary line; exit 1 if a check failed. The
# serial logs: $LOG.txt (boot 1), $LOG-kld.txt (boot 2).
#
# Boot 3 (an image built with freebsd/patches/, its BUILD-INFO says so): FreeBSD's own NFS
# over the transport. The root disk's /sbin/init is nfstest.c: a tmpfs exported, an nfsd
# listening on RDMA (vfs.nfsd.rdma_listen), an NFSv3 mount -o rdma of it, 64 MiB written (64
# KiB writes, many WRITEs in flight) and read back after a remount, 100 files created, listed
# and removed; krpc_rdma.ko registers the
# software fabric with the krpc (krpc_rdma.soft_fabric=1: FreeBSD has no RDMA device). Serial
# log $LOG-nfs.txt.
#
# usage: vm.sh IMAGE.tar.zst LOG [KRPC_RDMA_KO]     env: TIMEOUT (seconds per boot, default 900),
#   ONLY_NFS=1 (a developer's shortcut: boot 3 alone)
set -eu
IMAGE=$1 LOG=$2 KO=${3:-}
TIMEOUT=${TIMEOUT:-900}
OVMF_CODE=/usr/share/OVMF/OVMF_CODE.fd
OVMF_VARS=/usr/share/OVMF/OVMF_VARS.fd
LLVM=${LLVM:-/usr/lib/llvm-19/bin}
KLDTEST=
[ -n "$KO" ] && [ -f "$(dirname "$KO")/krpc_rdma_kldtest.ko" ] && KLDTEST=$(dirname "$KO")/krpc_rdma_kldtest.ko
tmp=$(mktemp -d)
qemu=
cleanup() { [ -n "$qemu" ] && kill "$qemu" 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT INT TERM
fail=0
check() { # check WHAT CONDITION...
    _check=$1; shift
    if "$@"; then :; else echo "freebsd-vm: FAILED: $_check" >&2; fail=1; fi
}

# boot ESP LOG DONE_PATTERN [QEMU ARGS...]: run qemu until DONE_PATTERN is on the console and
# qemu has exited (the test powered off), a panic, a module the linker refused, or TIMEOUT;
# $end says which ("done" when all went as it should), $secs how long; LOG.txt the console.
boot() {
    _esp=$1 _log=$2 _done=$3; shift 3
    cp "$OVMF_VARS" "$tmp/vars.fd"
    mkdir -p "$(dirname "$_log")"
    : > "$_log"
    _start=$(date +%s)
    qemu-system-x86_64 -accel tcg -cpu max -m 1024 -smp 2 -nographic -no-reboot \
        -drive if=pflash,format=raw,readonly=on,file="$OVMF_CODE" \
        -drive if=pflash,format=raw,file="$tmp/vars.fd" \
        -drive format=raw,file=fat:rw:"$_esp" "$@" </dev/null >"$_log" 2>&1 &
    qemu=$!
    end=done
    while :; do
        # The console as plain lines (no CR, no terminal escapes).
        tr -d '\r' < "$_log" | sed 's/\x1b\[[0-9;]*[a-zA-Z]//g' > "$_log.txt"
        if grep -qE '^panic:|^Fatal trap' "$_log.txt"; then
            # Keep the backtrace: DDB prints it, then waits at its prompt.
            for _ in 1 2 3 4 5 6 7 8 9 10; do grep -q 'db>' "$_log" && break; sleep 2; done
            end=panic; break
        fi
        if [ -z "$_done" ] && grep -q '^mountroot>' "$_log.txt"; then break; fi
        # A module the kernel linker refused never runs its tests: no need to wait for them.
        if grep -q 'could not finalize loading' "$_log.txt"; then end="a module did not link"; break; fi
        if ! kill -0 "$qemu" 2>/dev/null; then
            [ -n "$_done" ] && grep -q "$_done" "$_log.txt" || end="qemu exited"
            break
        fi
        if [ $(( $(date +%s) - _start )) -ge "$TIMEOUT" ]; then end="timeout after $TIMEOUT s"; break; fi
        sleep 2
    done
    secs=$(( $(date +%s) - _start ))
    kill "$qemu" 2>/dev/null || true
    wait "$qemu" 2>/dev/null || true
    qemu=
    tr -d '\r' < "$_log" | sed 's/\x1b\[[0-9;]*[a-zA-Z]//g' > "$_log.txt"
}

# root_disk IMG PROGRAM.c DIR...: a FAT root file system in IMG (what boots 2 and 3 mount,
# read-only, from virtio-blk): PROGRAM.c (beside this script) built for FreeBSD/amd64 without
# libc as /sbin/init, and the directories DIR... (/sbin among them).
root_disk() {
    _img=$1 _prog=$2; shift 2
    "$LLVM/clang" --target=x86_64-unknown-freebsd14.2 -nostdlib -static -ffreestanding \
        -fuse-ld=lld -Wl,-e,_start -O2 -o "$_img.init" "$(dirname "$0")/$_prog"
    mkfs.vfat -C "$_img" 16384 >/dev/null
    for _d in "$@"; do mmd -i "$_img" "::$_d"; done
    mcopy -i "$_img" "$_img.init" ::/sbin/init
}

# The loader's lines that make that disk the root.
ROOT_CONF='vfs.root.mountfrom="msdosfs:/dev/vtbd0"
vfs.root.mountfrom.options="ro"'

# The checks every boot gets; $1 the console, $2 the modules the loader was told to load.
common_checks() {
    _preloaded=$(grep -c '^Preloaded elf obj module' "$1" || true)
    # WITNESS's complaints: a lock-order reversal, a duplicate acquisition, sleeping with a
    # non-sleepable lock held.
    lors=$(grep -cE 'lock order reversal|acquiring duplicate lock|non-sleepable locks held' "$1" || true)
    check "the run ended as it should (ended: $end; $1)" [ "$end" = done ]
    check "a FreeBSD 14 kernel banner" grep -q '^FreeBSD 14' "$1"
    check "$2 modules preloaded (saw $_preloaded)" [ "$_preloaded" -eq "$2" ]
    check "no kernel link error" sh -c "! grep -qE 'link_elf|undefined symbol|could not finalize' '$1'"
    check "no WITNESS warning (saw $lors)" [ "$lors" -eq 0 ]
    check "no malloc type unloaded with memory in use" sh -c "! grep -q 'still allocated' '$1'"
}

ONLY_NFS=${ONLY_NFS:-0}
what="boots 1 and 2 skipped (ONLY_NFS=1)"
KLDTEST_RUN=$KLDTEST
[ "$ONLY_NFS" = 1 ] && KLDTEST_RUN=

# ---- boot 1: the self-test and the face test, krpc_rdma.ko preloaded --------------------
if [ "$ONLY_NFS" != 1 ]; then
mkdir "$tmp/esp"
tar --zstd -xf "$IMAGE" -C "$tmp/esp"
if [ -n "$KO" ]; then
    cp "$KO" "$tmp/esp/boot/kernel/krpc_rdma.ko"
    {
        echo 'krpc_rdma_load="YES"'
        echo 'krpc_rdma.selftest="1"'
        echo 'krpc_rdma.selftest_poweroff="1"'
    } >> "$tmp/esp/boot/loader.conf"
fi
expect=$(grep -c '_load="YES"' "$tmp/esp/boot/loader.conf")
boot "$tmp/esp" "$LOG" "${KO:+krpc_rdma facetest: done}"
common_checks "$LOG.txt" "$expect"
banner=$(grep -m1 '^FreeBSD 14' "$LOG.txt" || true)
what="$banner booted (TCG; INVARIANTS, WITNESS); $expect modules preloaded"
if [ -n "$KO" ]; then
    check "krpc_rdma.ko loaded (its MOD_LOAD said so)" grep -q '^krpc_rdma: loaded' "$LOG.txt"
    # (The console's mountroot prompt may stand at the start of a report line.)
    check "the self-test passed" grep -q 'krpc_rdma selftest: PASS' "$LOG.txt"
    check "the self-test returned 0" grep -q 'krpc_rdma selftest: done, rc 0,' "$LOG.txt"
    summary=$(grep -m1 'krpc_rdma selftest: soft' "$LOG.txt" | sed 's/^.*krpc_rdma selftest: //' || true)
    took=$(grep -m1 'krpc_rdma selftest: done' "$LOG.txt" | sed 's/^.*, //' || true)
    what="$what, krpc_rdma.ko loaded; self-test (${took:-?}): ${summary:-no summary}"
    # The krpc face against FreeBSD's own svc.c, CLIENT calls and mbufs.
    check "the face test passed" grep -q 'krpc_rdma facetest: PASS' "$LOG.txt"
    check "the face test returned 0" grep -q 'krpc_rdma facetest: done, rc 0,' "$LOG.txt"
    face=$(grep -m1 'krpc_rdma facetest: PASS' "$LOG.txt" | sed 's/^.*PASS: //; s/;.*$//' || true)
    ftook=$(grep -m1 'krpc_rdma facetest: done' "$LOG.txt" | sed 's/^.*, //' || true)
    what="$what; face test (${ftook:-?}): ${face:-failed}"
fi
what="$what; $secs s"
fi

# ---- boot 2: load/unload cycles from a root file system ---------------------------------
if [ -n "$KLDTEST_RUN" ] && [ "$fail" = 0 ]; then
    root_disk "$tmp/root.img" init.c /boot /boot/kernel /sbin
    mcopy -i "$tmp/root.img" "$KO" ::/boot/kernel/krpc_rdma.ko
    mkdir "$tmp/esp2"
    tar --zstd -xf "$IMAGE" -C "$tmp/esp2"
    cp "$KLDTEST" "$tmp/esp2/boot/kernel/"
    {
        echo 'krpc_rdma_kldtest_load="YES"'
        echo "$ROOT_CONF"
    } >> "$tmp/esp2/boot/loader.conf"
    expect2=$(grep -c '_load="YES"' "$tmp/esp2/boot/loader.conf")
    boot "$tmp/esp2" "$LOG-kld" 'krpc_rdma kldtest: done' \
        -drive if=none,id=root,format=raw,file="$tmp/root.img" -device virtio-blk-pci,drive=root
    common_checks "$LOG-kld.txt" "$expect2"
    check "the load/unload cycles passed" grep -q 'krpc_rdma kldtest: PASS' "$LOG-kld.txt"
    check "the load/unload test returned 0" grep -q 'krpc_rdma kldtest: done, rc 0,' "$LOG-kld.txt"
    cycles=$(grep -m1 'krpc_rdma kldtest: PASS' "$LOG-kld.txt" | sed 's/^.*PASS: //' || true)
    ktook=$(grep -m1 'krpc_rdma kldtest: done' "$LOG-kld.txt" | sed 's/^.*, //' || true)
    what="$what; load/unload (${ktook:-?}, boot $secs s): ${cycles:-failed}"
fi

# ---- boot 3: FreeBSD's own NFS over the transport (an image built with freebsd/patches/) --
NFSLOG=
if [ -n "$KO" ] && [ "$fail" = 0 ] &&
    tar --zstd -xOf "$IMAGE" ./BUILD-INFO 2>/dev/null | grep -q '^patches: .*[.]patch'; then
    root_disk "$tmp/nfsroot.img" nfstest.c /sbin /dev /export /mnt
    mkdir "$tmp/esp3"
    tar --zstd -xf "$IMAGE" -C "$tmp/esp3"
    cp "$KO" "$tmp/esp3/boot/kernel/krpc_rdma.ko"
    {
        echo 'krpc_rdma_load="YES"'
        echo 'krpc_rdma.soft_fabric="1"'
        echo "$ROOT_CONF"
    } >> "$tmp/esp3/boot/loader.conf"
    expect3=$(grep -c '_load="YES"' "$tmp/esp3/boot/loader.conf")
    NFSLOG=$LOG-nfs.txt
    boot "$tmp/esp3" "$LOG-nfs" 'krpc_rdma nfstest: done' \
        -drive if=none,id=root,format=raw,file="$tmp/nfsroot.img" -device virtio-blk-pci,drive=root
    common_checks "$LOG-nfs.txt" "$expect3"
    check "NFS over the transport passed" grep -q 'krpc_rdma nfstest: PASS' "$LOG-nfs.txt"
    nfs=$(grep -m1 'krpc_rdma nfstest: PASS' "$LOG-nfs.txt" | sed 's/^.*PASS: //' || true)
    if [ -z "$nfs" ]; then
        nfs="failed: $(grep -m1 'krpc_rdma nfstest: FAIL' "$LOG-nfs.txt" | sed 's/^.*FAIL: //' || true)"
    fi
    what="$what; NFS (boot $secs s): $nfs"
elif [ -n "$KO" ] && [ "$fail" = 0 ]; then
    what="$what; FreeBSD's NFS over the transport: not in this image (a stock one; FREEBSD_PATCHES=1 cargo xtask freebsd-setup builds the patched one)"
fi

if [ "$fail" = 0 ]; then
    echo "freebsd-vm: ok: $what; 0 WITNESS warnings (serial logs: $LOG.txt${KLDTEST:+, $LOG-kld.txt}${NFSLOG:+, $NFSLOG})"
else
    echo "freebsd-vm: FAILED: $what (serial logs: $LOG.txt${KLDTEST:+, $LOG-kld.txt}${NFSLOG:+, $NFSLOG})" >&2
    exit 1
fi
