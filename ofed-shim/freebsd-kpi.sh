#!/usr/bin/env bash
# The FreeBSD KPI check of both C boundaries, with the workplace's freebsd-kpi tool
# (../shared/freebsd-kpi/check.sh, or $FREEBSD_KPI_DIR): it compiles every ofed-shim/c/*.c
# against FreeBSD 14.2's kernel headers in three kmod configurations and checks ONE Rust FFI
# module, ofed-shim/src/ffi.rs, against the C side. The project has two:
#   1. the verbs boundary: ofed-shim/src/ffi.rs (c/krpc_rdma_ofed.h), checked in place;
#   2. the krpc face's boundary: ofed-shim/krpc-face/src/ffi.rs (c/krpc_rdma_{mbuf,clnt,svc}.h),
#      checked through a view of the project in which the same C files (symlinks) sit in
#      ofed-shim/c/, the face's ffi.rs and lib.rs are ofed-shim/src/, and krpc_rdma_ofed.h is a
#      wrapper that includes the real verbs header and the three face headers (the tool's probe
#      includes only krpc_ofed_kpi.h and krpc_rdma_ofed.h).
# usage: ofed-shim/freebsd-kpi.sh [extra check.sh arguments]   (from anywhere)
# Exit 0 only if both runs pass; each prints the tool's last line.
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
kpi=${FREEBSD_KPI_DIR:-$root/../shared/freebsd-kpi}
[ -x "$kpi/check.sh" ] || [ -f "$kpi/check.sh" ] || {
	echo "freebsd-kpi.sh: no $kpi/check.sh (set FREEBSD_KPI_DIR to the freebsd-kpi tool)" >&2
	exit 2
}

view=$(mktemp -d "${TMPDIR:-/tmp}/freebsd-kpi-face.XXXXXX")
trap 'rm -rf "$view"' EXIT INT TERM

echo "== 1/2 verbs boundary: ofed-shim/src/ffi.rs"
bash "$kpi/check.sh" "$root" "$@" >"$view/verbs.out" 2>&1
rc1=$?
grep -E '^(ERROR|WARNING|ffi: MISMATCH|freebsd-kpi:)' "$view/verbs.out"

mkdir -p "$view/ofed-shim/c" "$view/ofed-shim/src" "$view/ofed-shim/kmod"
for f in "$here"/c/*; do
	[ "$(basename "$f")" = krpc_rdma_ofed.h ] || ln -s "$f" "$view/ofed-shim/c/"
done
cat >"$view/ofed-shim/c/krpc_rdma_ofed.h" <<EOF
/* freebsd-kpi.sh's view: the verbs header and the krpc face's three headers. */
#ifndef KRPC_FACE_VIEW_H
#define KRPC_FACE_VIEW_H
#include "$here/c/krpc_rdma_ofed.h"
#include "krpc_rdma_mbuf.h"
#include "krpc_rdma_clnt.h"
#include "krpc_rdma_svc.h"
#endif
EOF
ln -s "$here/krpc-face/src/ffi.rs" "$view/ofed-shim/src/ffi.rs"
ln -s "$here/krpc-face/src/lib.rs" "$view/ofed-shim/src/lib.rs"
ln -s "$here/kmod/Makefile" "$view/ofed-shim/kmod/Makefile"
ln -s "$here/allowed-undefined.txt" "$view/ofed-shim/allowed-undefined.txt"

echo "== 2/2 krpc face boundary: ofed-shim/krpc-face/src/ffi.rs"
bash "$kpi/check.sh" "$view" "$@" >"$view/out" 2>&1
rc2=$?
grep -E '^(ERROR|WARNING|ffi: MISMATCH|ffi: [0-9]|freebsd-kpi:)' "$view/out"
[ $rc1 = 0 ] && [ $rc2 = 0 ] && { echo "freebsd-kpi.sh: both boundaries pass"; exit 0; }
echo "freebsd-kpi.sh: FAILED (verbs rc $rc1, face rc $rc2)"
exit 1
