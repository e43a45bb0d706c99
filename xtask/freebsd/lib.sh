# Sourced by setup.sh and kmod.sh: FreeBSD's cross-build (tools/build/make.py) over a source
# tree, driven from Linux with Debian's clang 19.
#   CACHE   the cache directory (obj/ under it)
#   SRC     the FreeBSD source tree (absolute)
LLVM=/usr/lib/llvm-19/bin
step() { echo "==> freebsd: $*"; }
elapsed() { echo "$(( $(date +%s) - $1 )) s"; }

# make_py ARGS...: tools/build/make.py for amd64 with Debian's LLVM, objects under $CACHE/obj.
# bmake's bootstrap runs its own unit tests, whose interrupt tests fail when SIGINT is ignored
# (as in a background job): the default disposition is restored first.
make_py() {
    ( cd "$SRC" && MAKEOBJDIRPREFIX=$CACHE/obj python3 -c 'import signal, os, sys
signal.signal(signal.SIGINT, signal.SIG_DFL)
os.execvp(sys.argv[1], sys.argv[1:])' python3 tools/build/make.py --cross-bindir="$LLVM" \
        TARGET=amd64 TARGET_ARCH=amd64 -DWITHOUT_CLANG_BOOTSTRAP -DWITHOUT_LLD_BOOTSTRAP "$@" )
}

# in_buildenv SCRIPT: run SCRIPT (a file) in make.py's buildenv: the cross toolchain's
# environment, where a plain `make` is FreeBSD's bmake with FreeBSD's share/mk (buildenv
# refuses -j).
in_buildenv() {
    make_py buildenv BUILDENV_SHELL="$1"
}

# The kernel's object directory.
kernel_obj() { echo "$CACHE/obj$SRC/amd64.amd64/sys/KRPCRDMA"; }
