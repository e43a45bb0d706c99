#!/bin/sh
# Stage 1 of the krpc-rdma rxe VM: /init of the initramfs `cargo xtask vm-setup` builds
# (busybox sh; compiled into xtask, the cache's stamp tracks it).
#
# Builds the guest's root in /newroot and switch_roots into stage 2:
#   /                 the host's / over 9p (tag hostroot, read-only) under an overlay whose upper
#                     layer is a tmpfs: writes are the guest's own and vanish with it
#   /lib/modules/KVER the Debian kernel's modules, bound from the cache (MODDIR)
#   /run              a tmpfs, with the run's control directory (9p tag krpcvmctl, read-write)
#                     at /run/krpc-vm; stage 2 is /run/krpc-vm/guest-init.sh
# /etc/krpcvm.conf (KVER, MODDIR) and /modules (the .ko files, in load order in
# /modules/order) are written by vm-setup. Messages go to the console (ttyS0, a log file on
# the host side).

/bin/busybox --install -s /bin
export PATH=/bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev

fail() {
    echo "krpc-vm stage 1: $*"
    poweroff -f
}

. /etc/krpcvm.conf

while read -r ko; do
    insmod "/modules/$ko" || fail "insmod $ko"
done </modules/order

p9=trans=virtio,version=9p2000.L,msize=512000
mount -t 9p -o "$p9,ro,cache=loose" hostroot /lower || fail "cannot mount the host's root (9p)"
mount -t tmpfs -o mode=755 tmpfs /upper || fail "tmpfs for the overlay"
mkdir /upper/data /upper/work
mount -t overlay -o lowerdir=/lower,upperdir=/upper/data,workdir=/upper/work overlay /newroot ||
    fail "overlay on the host's root"

mkdir -p "/newroot/lib/modules/$KVER"
mount --bind "/newroot$MODDIR" "/newroot/lib/modules/$KVER" || fail "no modules at $MODDIR"
mount -t tmpfs -o mode=755 tmpfs /newroot/run || fail "tmpfs /run"
mkdir /newroot/run/krpc-vm
mount -t 9p -o "$p9,cache=none" krpcvmctl /newroot/run/krpc-vm || fail "cannot mount the control dir"
[ -f /newroot/run/krpc-vm/guest-init.sh ] || fail "no stage 2 in the control dir"

umount /proc /sys
mount --move /dev /newroot/dev
exec switch_root /newroot /bin/sh /run/krpc-vm/guest-init.sh
