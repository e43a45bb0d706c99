#!/bin/sh
# cargo xtask freebsd-setup: a FreeBSD 14.2 test image built from FreeBSD's source with Debian's
# clang 19 through tools/build/make.py (FreeBSD's own cross-build), no FreeBSD machine needed:
#   - the KRPCRDMA kernel (./KRPCRDMA: MINIMAL + VIMAGE, INVARIANTS, WITNESS);
#   - the modules krpc_rdma.ko and NFS need (MODULES below) and their dependencies;
#   - FreeBSD's EFI loader (stand/efi/loader_lua) with its Lua scripts;
# assembled as an EFI system partition tree (EFI/BOOT/BOOTX64.EFI, boot/...) and packed as one
# tarball, $CACHE/freebsd-image.tar.zst, with BUILD-INFO (source, commit, options) inside.
# The build tree stays in $CACHE (src/, obj/) for `cargo xtask freebsd-kmod`.
#
# Env (xtask sets them): CACHE; SRC, a FreeBSD source tree, or MIRROR, a git directory of one,
# and COMMIT (extracted into $CACHE/src once; blobs the mirror lacks are left out: none of them
# is in what is built here).
set -eu
HERE=$(cd "$(dirname "$0")" && pwd)
: "${CACHE:?}" "${COMMIT:=}" "${SRC:=}" "${MIRROR:=}"
MODULES="linuxkpi ibcore krpc xdr nfscl nfsd nfscommon nfssvc nfslockd usb backlight firmware i2c/iicbus i2c/iicbb msdosfs tmpfs"
# What the image's loader loads (each needs the next ones; the loader resolves MODULE_DEPENDs).
IMAGE_KOS="linuxkpi ibcore krpc xdr nfscl nfsd nfscommon nfssvc nfslockd usb backlight firmware iicbus iicbb msdosfs tmpfs"
. "$HERE/lib.sh"
mkdir -p "$CACHE"
t0=$(date +%s)

if [ -z "$SRC" ]; then
    [ -n "$MIRROR" ] && [ -n "$COMMIT" ] || { echo "freebsd-setup: no source: set FREEBSD_SRC or FREEBSD_KPI_MIRROR" >&2; exit 2; }
    SRC=$CACHE/src
    if [ "$(cat "$SRC/.krpc-rdma-commit" 2>/dev/null)" != "$COMMIT" ]; then
        step "extracting $COMMIT from $MIRROR into $SRC"
        rm -rf "$SRC" && mkdir -p "$SRC"
        git --git-dir="$MIRROR" ls-tree -r "$COMMIT" | awk '$2 == "blob" { print $3 " " $4 }' > "$CACHE/tree.txt"
        cut -d' ' -f1 "$CACHE/tree.txt" | git --git-dir="$MIRROR" cat-file --batch-check |
            awk '$2 == "missing" { print $1 }' > "$CACHE/missing.txt"
        grep -F -f "$CACHE/missing.txt" "$CACHE/tree.txt" | cut -d' ' -f2- > "$CACHE/missing-paths.txt" || true
        echo "freebsd-setup: $(wc -l < "$CACHE/missing-paths.txt") blobs missing from the mirror, left out:" $(cat "$CACHE/missing-paths.txt")
        # Excluded by pathspec (git may still name the first as an invalid object; the rest of
        # the tree is extracted whole).
        set -- $(sed 's/^/:!/' "$CACHE/missing-paths.txt")
        git --git-dir="$MIRROR" archive "$COMMIT" -- "$@" | tar x -C "$SRC"
        echo "$COMMIT" > "$SRC/.krpc-rdma-commit"
    fi
fi
[ -f "$SRC/tools/build/make.py" ] || { echo "freebsd-setup: $SRC is not a FreeBSD source tree" >&2; exit 2; }
SRC=$(cd "$SRC" && pwd)
# With FREEBSD_PATCHES=1, the project's patches for FreeBSD's NFS over the transport
# (freebsd/patches/*.patch), applied once: a tree they already apply to in reverse is left as
# it is; one they apply to neither way is refused. Use a cache of its own
# (KRPC_RDMA_FREEBSD_CACHE): the image then runs freebsd-vm's NFS boot (vm.sh, boot 3).
PATCHES=
[ "${FREEBSD_PATCHES:-0}" = 1 ] && PATCHES=$(ls "$HERE"/../../freebsd/patches/*.patch 2>/dev/null || true)
for p in $PATCHES; do
    [ -f "$p" ] || continue
    if ( cd "$SRC" && GIT_CEILING_DIRECTORIES=$(dirname "$SRC") git apply --check "$p" 2>/dev/null ); then
        step "applying $(basename "$p") to $SRC"
        ( cd "$SRC" && GIT_CEILING_DIRECTORIES=$(dirname "$SRC") git apply "$p" )
    elif ( cd "$SRC" && GIT_CEILING_DIRECTORIES=$(dirname "$SRC") git apply -R --check "$p" 2>/dev/null ); then
        step "$(basename "$p"): already applied to $SRC"
    else
        echo "freebsd-setup: $(basename "$p") applies to $SRC neither way" >&2
        exit 1
    fi
done
OBJ=$CACHE/obj
mkdir -p "$OBJ" "$CACHE/conf"
{ echo "include \"$SRC/sys/amd64/conf/MINIMAL\""; cat "$HERE/KRPCRDMA"; } > "$CACHE/conf/KRPCRDMA"
LOG=$CACHE/build.log
: > "$LOG"
run() {
    what=$1; shift
    s=$(date +%s)
    step "$what (log: $LOG)"
    if ! make_py "$@" >> "$LOG" 2>&1; then
        tail -30 "$LOG" >&2
        echo "freebsd-setup: $what failed after $(elapsed "$s"); the log is $LOG" >&2
        exit 1
    fi
    step "$what: ok ($(elapsed "$s"))"
}
# The cross toolchain depends on the source only: built once per tree.
if [ "$(cat "$OBJ/.toolchain-built" 2>/dev/null)" != "$SRC" ]; then
    run "kernel-toolchain" -j2 kernel-toolchain
    echo "$SRC" > "$OBJ/.toolchain-built"
else
    step "kernel-toolchain: already built for $SRC"
fi
run "kernel KRPCRDMA and modules" -j2 buildkernel KERNCONF=KRPCRDMA KERNCONFDIR="$CACHE/conf" \
    "MODULES_OVERRIDE=$MODULES"
# The loader: libsa, liblua, libefi, the Lua scripts' defaults, loader_lua.efi (buildenv gives
# the cross toolchain's environment; buildenv refuses -j).
cat > "$CACHE/stand.sh" <<STAND
#!/bin/sh
set -e
for d in libsa liblua efi/libefi defaults efi/loader_lua; do
    make -C "$SRC/stand/\$d" obj >/dev/null
    make -C "$SRC/stand/\$d" -j2 all
done
STAND
chmod +x "$CACHE/stand.sh"
run "EFI loader (stand)" buildenv BUILDENV_SHELL="$CACHE/stand.sh"
echo "$SRC" > "$CACHE/source"

step "assembling the image"
KOBJ=$(kernel_obj)
IMG=$CACHE/image
rm -rf "$IMG"
mkdir -p "$IMG/EFI/BOOT" "$IMG/boot/kernel" "$IMG/boot/lua" "$IMG/boot/defaults"
cp "$OBJ$SRC/amd64.amd64/stand/efi/loader_lua/loader_lua.efi" "$IMG/EFI/BOOT/BOOTX64.EFI"
cp "$SRC"/stand/lua/*.lua "$IMG/boot/lua/"
cp "$SRC/stand/defaults/loader.conf" "$IMG/boot/defaults/"
cp "$KOBJ/kernel" "$IMG/boot/kernel/"
for m in $IMAGE_KOS; do
    ko=$(find "$KOBJ/modules" -name "$m.ko" | head -1)
    [ -n "$ko" ] || { echo "freebsd-setup: $m.ko was not built" >&2; exit 1; }
    cp "$ko" "$IMG/boot/kernel/"
done
{
    echo 'autoboot_delay="0"'
    echo 'beastie_disable="YES"'
    echo 'console="comconsole"'
    echo 'comconsole_speed="115200"'
    echo 'boot_serial="YES"'
    echo 'boot_verbose="YES"'
    for m in $IMAGE_KOS; do echo "${m}_load=\"YES\""; done
} > "$IMG/boot/loader.conf"
{
    echo "source: $SRC"
    echo "commit: ${COMMIT:-$(cat "$SRC/.krpc-rdma-commit" 2>/dev/null || echo unknown)}"
    echo "kernel: KRPCRDMA ="; sed 's/^/    /' "$CACHE/conf/KRPCRDMA"
    echo "modules: $IMAGE_KOS"
    echo "patches: $(for p in $PATCHES; do printf '%s ' "$(basename "$p")"; done)"
    echo "toolchain: $("$LLVM/clang" --version | head -1)"
    echo "built: $(date -u +%Y-%m-%dT%H:%M:%SZ) in $(elapsed "$t0")"
} > "$IMG/BUILD-INFO"
tar --zstd -cf "$CACHE/freebsd-image.tar.zst" -C "$IMG" .
step "image $CACHE/freebsd-image.tar.zst: $(du -h "$CACHE/freebsd-image.tar.zst" | cut -f1) (built in $(elapsed "$t0"))"
