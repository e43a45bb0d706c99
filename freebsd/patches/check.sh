#!/bin/sh
# freebsd/patches/check.sh [PRISTINE_TREE]
#
# Checks 0001-krpc-nfs-rdma.patch against FreeBSD 14.2:
#  1. `git apply --check` on a pristine tree: PRISTINE_TREE (a FreeBSD source root, e.g.
#     /usr/src at 14.2), or else the directories the patch touches extracted from the git
#     mirror ($FREEBSD_MIRROR, default /work/.mirror/kaizenwa+freebsd-14.2/repo, at
#     $FREEBSD_COMMIT, default b66633d79ade, 14.2-BETA1).
#  2. If the FreeBSD build tree of `cargo xtask freebsd-setup` exists ($KRPC_RDMA_FREEBSD_CACHE,
#     default /var/tmp/krpc-rdma-freebsd: the kernel KRPCRDMA and its modules, built from
#     $CACHE/src), every .c file the patch touches is compiled, pristine and patched, with the
#     flags sys/conf/kmod.mk gives a module of that kernel (amd64, clang 19, -Werror and the
#     kernel's warnings), -fsyntax-only, from the object directory of the module it belongs
#     to (krpc, nfscommon, nfscl, nfsd: its opt_*.h, vnode_if.h, machine/), the patched
#     directories searched before the build's source tree. A file fails if it does not
#     compile or if it has more warnings patched than pristine.
# Prints one line: "ok: ..." or "fail: ..." (details above it), exit status 0 or 1.
# Reads the mirror and the build tree; writes only under a temporary directory.
set -u
here=$(cd "$(dirname "$0")" && pwd)
patch=$here/0001-krpc-nfs-rdma.patch
MIRROR=${FREEBSD_MIRROR:-/work/.mirror/kaizenwa+freebsd-14.2/repo}
COMMIT=${FREEBSD_COMMIT:-b66633d79ade}
CACHE=${KRPC_RDMA_FREEBSD_CACHE:-/var/tmp/krpc-rdma-freebsd}
LLVM=${LLVM:-/usr/lib/llvm-19/bin}

fail() { echo "fail: $*"; exit 1; }
[ -f "$patch" ] || fail "no $patch"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/nfsrdma-check.XXXXXX") || fail "mktemp"
trap 'rm -rf "$tmp"' EXIT

# Paths the patch touches (new files included) and the directories holding them.
files=$(sed -n 's|^+++ b/||p' "$patch" | sort -u)
dirs=$(for f in $files; do dirname "$f"; done | sort -u)
[ -n "$files" ] || fail "no file in the patch"

# git apply, with no repository above the tree to confuse it.
apply() { # apply TREE [--check]
    ( cd "$1" && GIT_CEILING_DIRECTORIES=$(dirname "$1") git apply ${2-} "$patch" ) 2>&1
}

# 1. The pristine tree.
if [ $# -ge 1 ]; then
    pristine=$(cd "$1" && pwd) || fail "no tree $1"
    what="$pristine"
else
    [ -d "$MIRROR" ] || fail "no pristine tree given and no mirror $MIRROR"
    pristine=$tmp/pristine
    mkdir -p "$pristine"
    existing=$(for d in $dirs; do
        git --git-dir="$MIRROR" cat-file -e "$COMMIT:$d" 2>/dev/null && echo "$d"; done)
    # (The mirror lacks a few large blobs elsewhere in the tree; git archive may complain
    # about them even with a pathspec: what counts is that the directories arrive.)
    git --git-dir="$MIRROR" archive "$COMMIT" $existing 2>"$tmp/archive.err" |
        tar x -C "$pristine"
    for d in $existing; do
        [ -d "$pristine/$d" ] || { cat "$tmp/archive.err"; fail "cannot extract $d"; }
    done
    what="$MIRROR@$COMMIT"
fi
out=$(apply "$pristine" --check) || { echo "$out"; fail "git apply --check on $what"; }
nfiles=$(echo "$files" | wc -w)
applied="git apply --check: $nfiles files on $what"

# 2. Compile-check, if the build tree exists.
SRC=$CACHE/src
KOBJ=$CACHE/obj$SRC/amd64.amd64/sys/KRPCRDMA
MODOBJ=$KOBJ/modules$SRC/sys/modules
if [ ! -f "$KOBJ/opt_global.h" ] || [ ! -x "$LLVM/clang" ]; then
    echo "ok: $applied; compile check skipped (no FreeBSD build tree at $KOBJ)"
    exit 0
fi
patched=$tmp/patched
mkdir -p "$patched"
for d in $dirs; do
    if [ -d "$pristine/$d" ]; then
        mkdir -p "$patched/$d" && cp -R "$pristine/$d/." "$patched/$d/"
    fi
done
out=$(apply "$patched") || { echo "$out"; fail "git apply on a copy"; }

# The module a file is built in (sys/modules/*/Makefile).
module() {
    case $1 in
    sys/rpc/*) echo krpc ;;
    sys/fs/nfs/*) echo nfscommon ;;
    sys/fs/nfsclient/*) echo nfscl ;;
    sys/fs/nfsserver/*) echo nfsd ;;
    *) echo "" ;;
    esac
}

# Two kernel configurations: the build's (VIMAGE, INVARIANTS, WITNESS) and the same without
# those three (the other side of every NFSD_VNET / KASSERT / lock assertion macro).
grep -v -e VIMAGE -e INVARIANT -e WITNESS "$KOBJ/opt_global.h" > "$tmp/opt_global_plain.h"
OPTS="$KOBJ/opt_global.h $tmp/opt_global_plain.h"

# cc OPT_GLOBAL TREE FILE: the kmod.mk compile line of this build (as in $CACHE/kmod.log),
# -fsyntax-only.
cc() {
    opt=$1
    shift
    ( cd "$MODOBJ/$(module "$2")" && "$LLVM/clang" -target x86_64-unknown-freebsd14.2 \
        --sysroot="$CACHE/obj$SRC/amd64.amd64/tmp" -O2 -pipe -fno-common \
        -fno-strict-aliasing -Werror -D_KERNEL -DKLD_MODULE -nostdinc \
        -DHAVE_KERNEL_OPTION_HEADERS -include "$opt" -I. -I"$1/sys" \
        -I"$SRC/sys" -I"$SRC/sys/contrib/ck/include" -fno-common -fno-omit-frame-pointer \
        -mno-omit-leaf-frame-pointer -I"$KOBJ" -mcmodel=kernel -mno-red-zone -mno-mmx \
        -mno-sse -msoft-float -fno-asynchronous-unwind-tables -ffreestanding -fwrapv \
        -fstack-protector -Wall -Wstrict-prototypes -Wmissing-prototypes -Wpointer-arith \
        -Wcast-qual -Wundef -Wno-pointer-sign -D__printf__=__freebsd_kprintf__ \
        -Wmissing-include-dirs -fdiagnostics-show-option -Wno-unknown-pragmas \
        -Wno-error=tautological-compare -Wno-error=empty-body \
        -Wno-error=parentheses-equality -Wno-error=unused-function \
        -Wno-error=pointer-sign -Wno-error=shift-negative-value \
        -Wno-address-of-packed-member -Wno-format-zero-length -Wno-cast-qual \
        -Wno-pointer-arith -mno-aes -mno-avx -std=gnu99 -fsyntax-only "$1/$2" ) 2>&1
}

n=0
bad=""
for f in $files; do
    case $f in *.c) ;; *) continue ;; esac
    [ -n "$(module "$f")" ] || { bad="$bad $f(no module)"; continue; }
    fok=1
    for opt in $OPTS; do
        after=$(cc "$opt" "$patched" "$f"); rc=$?
        if [ $rc -ne 0 ]; then
            echo "$after"
            bad="$bad $f($(basename "$opt"))"
            fok=0
            break
        fi
        wa=$(printf '%s\n' "$after" | grep -c 'warning:')
        wb=0
        if [ -f "$pristine/$f" ]; then
            wb=$(cc "$opt" "$pristine" "$f" | grep -c 'warning:')
        fi
        if [ "$wa" -gt "$wb" ]; then
            echo "$after"
            bad="$bad $f($(basename "$opt"): warnings $wb -> $wa)"
            fok=0
            break
        fi
    done
    [ $fok -eq 1 ] && n=$((n + 1))
done
[ -z "$bad" ] || fail "$applied; compile check failed:$bad"

# 3. The module's side: ofed-shim/c/krpc_rdma_mod.c against the patched headers registers
# the transport (its <rpc/rpc_rdma.h> branch: rpc_rdma_register with clnt_rdma_reconnect_create
# and svc_rdma_listen, whose types must match struct rpc_rdma_ops). Its compile line is the one
# `cargo xtask freebsd-kmod` logged ($CACHE/kmod.log), the patched sys/ searched first.
modc=$(cd "$here/../../ofed-shim/c" && pwd)/krpc_rdma_mod.c
line=$(grep -F "$modc" "$CACHE/kmod.log" 2>/dev/null | grep -e ' -c ' | head -1)
if [ -z "$line" ]; then
    line=$(grep -e '/krpc_rdma_mod\.c' "$CACHE/kmod.log" 2>/dev/null | grep -e ' -c ' | head -1)
fi
modnote="module side not checked (no krpc_rdma_mod.c line in $CACHE/kmod.log: run cargo xtask freebsd-kmod)"
if [ -n "$line" ]; then
    src=$(printf '%s\n' "$line" | grep -o '[^ ]*krpc_rdma_mod\.c' | head -1)
    base=$(printf '%s\n' "$line" | sed "s| -o [^ ]*||; s| -nostdinc | -nostdinc -I$patched/sys |; s|$src|$modc|")
    pre=$(cd "$CACHE/kmod-obj" && eval "$(printf '%s\n' "$base" | sed 's| -c | -E |')" 2>&1) ||
        { echo "$pre" | tail -20; fail "$applied; krpc_rdma_mod.c does not preprocess against the patched tree"; }
    printf '%s\n' "$pre" | grep -q 'rpc_rdma_register' ||
        fail "$applied; krpc_rdma_mod.c does not register with the patched krpc"
    out=$(cd "$CACHE/kmod-obj" && eval "$(printf '%s\n' "$base" | sed 's| -c | -fsyntax-only -Werror |')" 2>&1) ||
        { echo "$out"; fail "$applied; krpc_rdma_mod.c does not compile against the patched tree"; }
    modnote="krpc_rdma_mod.c registers the transport and compiles against the patched headers (-Werror)"
fi
echo "ok: $applied; $n C files compile (kmod flags, amd64 KRPCRDMA objdir, -Werror; with and without VIMAGE/INVARIANTS/WITNESS), no new warnings; $modnote"
