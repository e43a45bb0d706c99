#!/bin/sh
# cargo xtask freebsd-kmod: krpc_rdma.ko for the FreeBSD test kernel, built by FreeBSD's own
# bsd.kmod.mk (ofed-shim/kmod/Makefile) in the cross-build environment freebsd-setup left in
# $CACHE, against that kernel's build directory (its opt_*.h), with SELFTEST=1 (the in-kernel
# self-test and face test, ofed-shim/c/krpc_rdma_bsd_{selftest,facetest}.c) and the Rust object
# RUST_OBJ that xtask made with their entry points; and beside it krpc_rdma_kldtest.ko
# (ofed-shim/kmod/kldtest: the load/unload test, c/krpc_rdma_bsd_kldtest.c).
# Env (xtask sets them): CACHE, ROOT (the workspace), RUST_OBJ, OUT (where the .ko goes).
set -eu
HERE=$(cd "$(dirname "$0")" && pwd)
: "${CACHE:?}" "${ROOT:?}" "${OUT:?}" "${RUST_OBJ:?}"
SRC=$(cat "$CACHE/source" 2>/dev/null) || { echo "freebsd-kmod: no FreeBSD build tree in $CACHE: run cargo xtask freebsd-setup" >&2; exit 2; }
. "$HERE/lib.sh"
OBJDIR=$CACHE/kmod-obj
rm -rf "$OBJDIR" && mkdir -p "$OBJDIR"
cat > "$CACHE/kmod-inner.sh" <<INNER
#!/bin/sh
set -e
MAKEOBJDIR="$OBJDIR" make -C "$ROOT/ofed-shim/kmod" SYSDIR="$SRC/sys" \
    KERNBUILDDIR="$(kernel_obj)" RUST_OBJ="$RUST_OBJ" SELFTEST=1 all
mkdir -p "$OBJDIR/kldtest"
MAKEOBJDIR="$OBJDIR/kldtest" make -C "$ROOT/ofed-shim/kmod/kldtest" SYSDIR="$SRC/sys" \
    KERNBUILDDIR="$(kernel_obj)" all
INNER
chmod +x "$CACHE/kmod-inner.sh"
if ! in_buildenv "$CACHE/kmod-inner.sh" > "$CACHE/kmod.log" 2>&1; then
    grep -E 'error|Error' "$CACHE/kmod.log" | head -20 >&2
    echo "freebsd-kmod: bsd.kmod.mk failed; the log is $CACHE/kmod.log" >&2
    exit 1
fi
mkdir -p "$(dirname "$OUT")"
cp "$OBJDIR/krpc_rdma.ko" "$OUT"
cp "$OBJDIR/kldtest/krpc_rdma_kldtest.ko" "$(dirname "$OUT")/"
echo "freebsd-kmod: $OUT ($(wc -c < "$OUT") bytes) and krpc_rdma_kldtest.ko, by bsd.kmod.mk against $(kernel_obj)"
