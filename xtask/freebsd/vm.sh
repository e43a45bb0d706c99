#!/bin/sh
# cargo xtask freebsd-vm: boot the FreeBSD image (freebsd-setup's tarball) under qemu (TCG) with
# OVMF and FreeBSD's own EFI loader, the image served as a FAT disk (qemu's vvfat), the serial
# console in $LOG. With a krpc_rdma.ko, the loader preloads it with the other modules and the
# kernel links it and runs its MOD_LOAD (boot_verbose: it says "krpc_rdma: loaded").
#
# The image has no root file system: the kernel ends at the mountroot prompt, which is where
# this script stops it. The checks: the kernel booted (its banner, then the mountroot prompt);
# every module preloaded; krpc_rdma.ko linked and loaded; no link error, no panic, no WITNESS
# lock-order reversal. One summary line; exit 1 if a check failed.
#
# usage: vm.sh IMAGE.tar.zst LOG [KRPC_RDMA_KO]     env: TIMEOUT (seconds, default 420)
set -eu
IMAGE=$1 LOG=$2 KO=${3:-}
TIMEOUT=${TIMEOUT:-420}
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
    echo 'krpc_rdma_load="YES"' >> "$tmp/esp/boot/loader.conf"
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
    if plain | grep -q '^mountroot>'; then break; fi
    if plain | grep -qE '^panic:|^Fatal trap'; then end=panic; break; fi
    if ! kill -0 "$qemu" 2>/dev/null; then end="qemu exited"; break; fi
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
    what=$1; shift
    if "$@"; then :; else echo "freebsd-vm: FAILED: $what" >&2; fail=1; fi
}
banner=$(grep -m1 '^FreeBSD 14' "$LOG.txt" || true)
preloaded=$(grep -c '^Preloaded elf obj module' "$LOG.txt" || true)
lors=$(grep -c 'lock order reversal' "$LOG.txt" || true)
check "the boot ended at the mountroot prompt (ended: $end)" [ "$end" = done ]
check "a FreeBSD 14 kernel banner" [ -n "$banner" ]
check "$expect modules preloaded (saw $preloaded)" [ "$preloaded" -eq "$expect" ]
check "no kernel link error" sh -c "! grep -qE 'link_elf|undefined symbol|could not finalize' '$LOG.txt'"
check "no WITNESS lock-order reversal (saw $lors)" [ "$lors" -eq 0 ]
if [ -n "$KO" ]; then
    check "krpc_rdma.ko loaded (its MOD_LOAD said so)" grep -q '^krpc_rdma: loaded' "$LOG.txt"
fi
what="$banner booted in $secs s (TCG; INVARIANTS, WITNESS); $preloaded modules preloaded"
[ -n "$KO" ] && what="$what, krpc_rdma.ko linked and loaded"
if [ "$fail" = 0 ]; then
    echo "freebsd-vm: ok: $what; 0 lock-order reversals (serial log: $LOG.txt)"
else
    echo "freebsd-vm: FAILED: $what (serial log: $LOG.txt)" >&2
    exit 1
fi
