#!/bin/sh
# cargo xtask freebsd-vm: boot the FreeBSD image (freebsd-setup's tarball) under qemu (TCG) with
# OVMF and FreeBSD's own EFI loader, the image served as a FAT disk (qemu's vvfat), the serial
# console in $LOG. With a krpc_rdma.ko (built with SELFTEST=1), the loader preloads it with the
# other modules, the kernel links it and runs its MOD_LOAD (boot_verbose: it says "krpc_rdma:
# loaded"), and with krpc_rdma.selftest=1 a kernel thread runs the self-test and powers the VM
# off (ofed-shim/c/krpc_rdma_bsd_selftest.c).
#
# The image has no root file system: without a module the kernel ends at the mountroot prompt,
# where this script stops it; with one, the self-test's power-off ends the run. The checks: the
# kernel booted; every module preloaded; no link error, no panic, no WITNESS warning;
# krpc_rdma.ko loaded and its self-test passed. One summary line; exit 1 if a check
# failed.
#
# usage: vm.sh IMAGE.tar.zst LOG [KRPC_RDMA_KO]     env: TIMEOUT (seconds, default 900)
set -eu
IMAGE=$1 LOG=$2 KO=${3:-}
TIMEOUT=${TIMEOUT:-900}
OVMF_CODE=/usr/share/OVMF/OVMF_CODE.fd
OVMF_VARS=/usr/share/OVMF/OVMF_VARS.fd
tmp=$(mktemp -d)
qemu=
cleanup() { [ -n "$qemu" ] && kill "$qemu" 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT INT TERM
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
cp "$OVMF_VARS" "$tmp/vars.fd"
mkdir -p "$(dirname "$LOG")"
: > "$LOG"
start=$(date +%s)
qemu-system-x86_64 -accel tcg -cpu max -m 1024 -smp 2 -nographic -no-reboot \
    -drive if=pflash,format=raw,readonly=on,file="$OVMF_CODE" \
    -drive if=pflash,format=raw,file="$tmp/vars.fd" \
    -drive format=raw,file=fat:rw:"$tmp/esp" </dev/null >"$LOG" 2>&1 &
qemu=$!
# The console as plain lines (no CR, no terminal escapes).
plain() { tr -d '\r' < "$LOG" | sed 's/\x1b\[[0-9;]*[a-zA-Z]//g'; }
end=done
while :; do
    if plain | grep -qE '^panic:|^Fatal trap'; then
        # Keep the backtrace: DDB prints it, then waits at its prompt.
        for _ in 1 2 3 4 5 6 7 8 9 10; do plain | grep -q 'db>' && break; sleep 2; done
        end=panic; break
    fi
    if [ -z "$KO" ] && plain | grep -q '^mountroot>'; then break; fi
    # A module the kernel linker refused never runs its tests: no need to wait for them.
    if plain | grep -qE 'could not finalize loading'; then end="a module did not link"; break; fi
    if ! kill -0 "$qemu" 2>/dev/null; then
        [ -n "$KO" ] && plain | grep -q 'krpc_rdma facetest: done' || end="qemu exited"
        break
    fi
    if [ $(( $(date +%s) - start )) -ge "$TIMEOUT" ]; then end="timeout after $TIMEOUT s"; break; fi
    sleep 2
done
secs=$(( $(date +%s) - start ))
kill "$qemu" 2>/dev/null || true
wait "$qemu" 2>/dev/null || true
qemu=
plain > "$LOG.txt"
fail=0
check() { # check WHAT CONDITION...
    _check=$1; shift
    if "$@"; then :; else echo "freebsd-vm: FAILED: $_check" >&2; fail=1; fi
}
banner=$(grep -m1 '^FreeBSD 14' "$LOG.txt" || true)
preloaded=$(grep -c '^Preloaded elf obj module' "$LOG.txt" || true)
# WITNESS's complaints: a lock-order reversal, a duplicate acquisition, sleeping with a
# non-sleepable lock held.
lors=$(grep -cE 'lock order reversal|acquiring duplicate lock|non-sleepable locks held' "$LOG.txt" || true)
check "the run ended as it should (ended: $end)" [ "$end" = done ]
check "a FreeBSD 14 kernel banner" [ -n "$banner" ]
check "$expect modules preloaded (saw $preloaded)" [ "$preloaded" -eq "$expect" ]
check "no kernel link error" sh -c "! grep -qE 'link_elf|undefined symbol|could not finalize' '$LOG.txt'"
check "no WITNESS warning (saw $lors)" [ "$lors" -eq 0 ]
what="$banner booted (TCG; INVARIANTS, WITNESS); $preloaded modules preloaded"
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
if [ "$fail" = 0 ]; then
    echo "freebsd-vm: ok: $what; 0 WITNESS warnings (serial log: $LOG.txt)"
else
    echo "freebsd-vm: FAILED: $what (serial log: $LOG.txt)" >&2
    exit 1
fi
