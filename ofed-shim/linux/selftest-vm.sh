#!/bin/sh
# SPDX-License-Identifier: BSD-2-Clause
#
# The in-kernel self-test of krpc_rdma.ko, CYCLES times (default 20): insmod with selftest=1
# (the load fails if the self-test fails), one more run through debugfs on the first cycle,
# rmmod; then the kernel log is checked. Run as root in the project's VM, from the
# repository's root, after `cargo xtask kmod`:
#
#   cargo xtask vm -- sh ofed-shim/linux/selftest-vm.sh [CYCLES]
#
# Passes (exit 0) when every load and unload succeeded, the log has one PASS line per run and
# one "0 allocations and 0 page references outstanding" line per unload, and no line of the
# log matches WARNING, BUG, Oops, kmemleak, "Call Trace", LEAK or FAIL (case-sensitive).
set -u
KO=${KO:-target/kmod/linux/krpc_rdma.ko}
CYCLES=${1:-20}
fail() { echo "selftest-vm: FAIL: $*"; exit 1; }

[ -f "$KO" ] || fail "$KO not found (cargo xtask kmod)"
uname -r
dmesg -C
mountpoint -q /sys/kernel/debug || mount -t debugfs none /sys/kernel/debug

i=1
runs=0
while [ "$i" -le "$CYCLES" ]; do
	insmod "$KO" selftest=1 || fail "cycle $i: insmod selftest=1 failed"
	runs=$((runs + 1))
	if [ "$i" -eq 1 ]; then
		line=$(cat /sys/kernel/debug/krpc_rdma/selftest) || fail "debugfs read"
		echo "debugfs: $line"
		case "$line" in *": PASS: "*) ;; *) fail "debugfs run: $line" ;; esac
		runs=$((runs + 1))
	fi
	rmmod krpc_rdma || fail "cycle $i: rmmod failed"
	i=$((i + 1))
done

log=$(dmesg)
echo "$log" | grep -m 1 "krpc_rdma selftest: PASS"
echo "$log" | grep -m 1 "krpc_rdma: unload"
pass=$(echo "$log" | grep -c "krpc_rdma selftest: PASS")
clean=$(echo "$log" | grep -c "krpc_rdma: unload: 0 allocations and 0 page references outstanding")
# The kernel's own markers (WARN: "WARNING:", BUG: "BUG:", "Oops", "Call Trace"), kmemleak's,
# and the module's ("LEAK/MISUSE", "selftest: FAIL"); case-sensitive ("0 failed" is fine).
bad=$(echo "$log" | grep -E "WARNING|BUG|Oops|kmemleak|Call Trace|LEAK|FAIL")
[ -z "$bad" ] || fail "kernel log: $bad"
[ "$pass" -eq "$runs" ] || fail "$pass PASS lines for $runs runs"
[ "$clean" -eq "$CYCLES" ] || fail "$clean clean unloads of $CYCLES"
echo "selftest-vm: ok: $CYCLES insmod/selftest/rmmod cycles, $runs self-test runs passed, $clean clean unloads, no WARNING/BUG/Oops/kmemleak in the kernel log"
