#!/bin/sh
# ofed-shim checks that run on any Linux host (see README.md):
#   1. the kernel staticlib builds for x86_64-unknown-none (release, panic=abort);
#   2. its undefined symbols are all in allowed-undefined.txt (or, Linux glue only,
#      allowed-undefined-linux.txt);
#   3. it contains no floating-point / SIMD instruction that a module link could pull in;
#   3b. its object for a module (cargo xtask kobj: GOT references rewritten) carries only
#      relocations a kernel module loader applies, checked again with readelf;
#   4. the shim's logic runs over rxe0: the C wrappers over the libibverbs emulation of the
#      OFED KPI (ofed-testkit/emu/), driven by the core's Requester/Responder (ofed-testkit/tests/emu_rxe.rs), in the
#      project's VM (cargo xtask vm, qemu TCG, rxe0 up). Runs only with OFED_SHIM_VM=1.
# Idempotent; exits non-zero on the first failing check.
set -eu

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
cd "$root"

say() { printf '== %s\n' "$*"; }
fail() { printf 'FAIL: %s\n' "$*" >&2; exit 1; }

tmp=$(mktemp -d "${TMPDIR:-/tmp}/ofed-shim-check.XXXXXX")
trap 'rm -rf "$tmp"' EXIT INT TERM

# ---- 1 -------------------------------------------------------------------------------------
say "1. cargo build --release --target x86_64-unknown-none -p krpc-rdma-kmod --features nfsd (the module's staticlib)"
cargo build --release --target x86_64-unknown-none -p krpc-rdma-kmod --features nfsd
lib="$root/target/x86_64-unknown-none/release/libkrpc_rdma_kmod.a"
[ -f "$lib" ] || fail "$lib not built"
echo "ok: $lib ($(wc -c <"$lib") bytes)"

# ---- 2 -------------------------------------------------------------------------------------
say "2. undefined symbols of the staticlib vs ofed-shim/allowed-undefined.txt"
mkdir "$tmp/o"
(cd "$tmp/o" && ar x "$lib")
# binutils nm cannot read Rust 1.95's objects here; readelf can.
for f in "$tmp"/o/*.o; do
    readelf -Ws "$f" | awk '$7 == "UND" && $8 != "" { print $8 }'
done | sort -u >"$tmp/und"
for f in "$tmp"/o/*.o; do
    readelf -Ws "$f" | awk '$7 != "UND" && ($5 == "GLOBAL" || $5 == "WEAK") && $8 != "" { print $8 }'
done | sort -u >"$tmp/def"
comm -23 "$tmp/und" "$tmp/def" >"$tmp/unresolved"
# allowed-undefined.txt: what every kernel's glue defines; allowed-undefined-linux.txt: what
# only the Linux module's glue defines (the staticlib here is built with the NFS server).
cat "$here/allowed-undefined.txt" "$here/allowed-undefined-linux.txt" |
    sed -e 's/#.*//' -e 's/[[:space:]]//g' | grep -v '^$' | sort -u >"$tmp/allowed"
comm -23 "$tmp/unresolved" "$tmp/allowed" >"$tmp/bad"
if [ -s "$tmp/bad" ]; then
    echo "undefined symbols not in allowed-undefined.txt:" >&2
    sed 's/^/  /' "$tmp/bad" >&2
    fail "unexpected undefined symbols"
fi
comm -13 "$tmp/unresolved" "$tmp/allowed" >"$tmp/unused"
if [ -s "$tmp/unused" ]; then
    echo "note: allowlisted but not referenced: $(tr '\n' ' ' <"$tmp/unused")"
fi
# The kernel runtime is really in there: the global allocator and the panic handler.
# (Rust 1.95 mangles the allocator shims and the panic entry point: match the suffix.)
grep -qE '__rust_alloc$' "$tmp/def" || fail "no __rust_alloc: the #[global_allocator] is missing"
grep -qE 'rust_begin_unwind$' "$tmp/def" || fail "no rust_begin_unwind: the #[panic_handler] is missing"
grep -qx 'krpc_ofed_malloc' "$tmp/unresolved" || fail "the allocator does not use krpc_ofed_malloc"
grep -qx 'krpc_ofed_panic' "$tmp/unresolved" || fail "the panic handler does not use krpc_ofed_panic"
for s in _Unwind_Resume rust_eh_personality; do
    if grep -qx "$s" "$tmp/unresolved"; then fail "$s referenced: not panic=abort"; fi
done
echo "ok: $(wc -l <"$tmp/unresolved") undefined symbols, all allowlisted"

# ---- 3 -------------------------------------------------------------------------------------
say "3. no floating-point / SIMD instructions (objdump -d of every member)"
# Members exempt from the scan, and why: the prebuilt compiler_builtins of the
# x86_64-unknown-none rust-std carries a few compiler-rt C objects compiled with the hard-float
# ABI (complex multiply/divide and float negation). Nothing in the archive references them,
# so an archive link (kmod/Makefile links the .a as an archive, never --whole-archive) never
# pulls them in. This script re-checks that they stay unreferenced.
exempt='__divdc3 __divsc3 __muldc3 __mulsc3 __negdf2 __negsf2'
# Instruction lines only ("  addr:<TAB>mnemonic operands"); prefixes (lock, rep, notrack, ...)
# skipped. Flagged: any x87 mnemonic (f...), any MMX/SSE/AVX register operand, SIMD-state
# instructions.
scan() {
    awk -F'\t' '
        /^ *[0-9a-f]+:\t/ {
            insn = $2
            n = split(insn, w, /[ ]+/)
            i = 1
            while (i < n && w[i] ~ /^(lock|rep|repz|repnz|repe|repne|notrack|bnd|data16|addr32|cs|ds|es|ss|fs|gs|rex(\.[A-Z]+)?)$/) i++
            m = w[i]
            if (m ~ /^f/ || m ~ /^(ldmxcsr|stmxcsr|emms|fxsave|fxsave64|fxrstor|fxrstor64|xsave.*|xrstor.*|vzeroupper|vzeroall)$/ || insn ~ /%[xyz]?mm[0-9]/)
                print
        }' "$1"
}
bad=0
scanned=0
for f in "$tmp"/o/*.o; do
    scanned=$((scanned + 1))
    objdump -d --no-show-raw-insn "$f" >"$tmp/dis" 2>"$tmp/dis.err" || fail "objdump -d $f failed: $(cat "$tmp/dis.err")"
    scan "$tmp/dis" >"$tmp/hits"
    n=$(wc -l <"$tmp/hits")
    [ "$n" -eq 0 ] && continue
    syms=$(readelf -Ws "$f" | awk '$7 != "UND" && $4 == "FUNC" && ($5 == "GLOBAL" || $5 == "WEAK") { print $8 }' | sort -u)
    ok=1
    for s in $syms; do
        case " $exempt " in *" $s "*) ;; *) ok=0 ;; esac
        if grep -qx "$s" "$tmp/und"; then
            echo "  $s (in $(basename "$f")) is referenced by another member" >&2
            ok=0
        fi
    done
    if [ "$ok" -eq 1 ] && [ -n "$syms" ]; then
        echo "  exempt, unreferenced: $(basename "$f") ($syms): $n FP/SIMD lines"
    else
        echo "  FP/SIMD in $(basename "$f") ($n lines):" >&2
        head -5 "$tmp/hits" | sed 's/^/    /' >&2
        bad=1
    fi
done
[ "$bad" -eq 0 ] || fail "floating-point or SIMD instructions in the staticlib"
echo "ok: $scanned members scanned"

# ---- 3b ------------------------------------------------------------------------------------
say "3b. kernel object relocations (cargo xtask kobj, checked again here with readelf)"
# A module loader applies only these in allocated sections (Linux 6.1: apply_relocate_add;
# FreeBSD amd64: elf_reloc_internal); the staticlib's GOT references must have been rewritten.
cargo xtask kobj >"$tmp/kobj.log" 2>&1 || { cat "$tmp/kobj.log" >&2; fail "3b: cargo xtask kobj"; }
grep '^kernel object ' "$tmp/kobj.log"
for o in "$root/target/kmod/krpc_rdma_rs.o" "$root/target/kmod/krpc_rdma_whole.o"; do
    [ -f "$o" ] || fail "3b: $o not built"
    readelf -rW "$o" | awk '
        /^Relocation section / { sec = $3; gsub(/\047/, "", sec); next }
        /R_X86_64_/ && sec !~ /^\.rela\.debug/ {
            n++
            if ($3 !~ /^R_X86_64_(NONE|64|PC32|PLT32|32S)$/) { print sec, $3; bad++ }
        }
        END { printf "%d relocations, %d refused\n", n, bad > "/dev/stderr"; exit bad > 0 }
    ' >"$tmp/relocs.bad" 2>"$tmp/relocs.sum" || {
        head -5 "$tmp/relocs.bad" >&2
        fail "3b: $(basename "$o"): relocations a module loader refuses"
    }
    echo "ok: $(basename "$o"): $(cat "$tmp/relocs.sum"), all NONE/64/PC32/PLT32/32S"
done

# ---- 4 -------------------------------------------------------------------------------------
if [ "${OFED_SHIM_VM:-0}" != 1 ]; then
    say "4. not run (set OFED_SHIM_VM=1: the shim over rxe0 in cargo xtask vm)"
    say "checks 1-3b passed"
    exit 0
fi
say "4. the shim over rxe0: C wrappers + KPI emulation on libibverbs (ofed-testkit/tests/emu_rxe.rs)"
# Host: the unit tests with the emulation linked, and the rxe test binary (built here, so the
# VM only runs it; cargo there finds it fresh).
cargo test -p ofed-testkit --features emu --test mbuf_bridge
# The self-test's soft-provider suite over heap pages (what the module runs at load).
cargo test -p ofed-testkit --features selftest --lib
cargo test --release -p ofed-testkit --features emu --test emu_rxe --no-run
# VM: rxe0 up; KRPC_RDMA_REQUIRE_RDMA=1 turns "no device" into a failure.
cargo xtask vm -- env KRPC_RDMA_REQUIRE_RDMA=1 \
    cargo test --release -p ofed-testkit --features emu --test emu_rxe -- --test-threads=1 --nocapture \
    2>&1 | tee "$tmp/vm.log"
status=$(grep -E '^test result: ' "$tmp/vm.log" | tail -n 1)
case "$status" in
    "test result: ok."*) ;;
    *) fail "4: emu_rxe in the VM: ${status:-no test result}" ;;
esac
if grep -q 'skipped: no RDMA device' "$tmp/vm.log"; then fail "4: tests skipped in the VM"; fi
echo "ok: $status"
say "all ofed-shim checks passed"
