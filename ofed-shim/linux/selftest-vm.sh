#!/bin/sh
# SPDX-License-Identifier: BSD-2-Clause
#
# The in-kernel self-test of krpc_rdma.ko, CYCLES times (default 20): insmod with selftest=1
# and rdma_addr=$RXE_IP (the load fails if the self-test fails; it runs the scenario suite
# over the soft provider and over the kernel's verbs on rxe0), one more run through debugfs
# on the first cycle, rmmod; then the kernel log is checked. Run as root in the project's VM,
# from the repository's root, after `cargo xtask kmod`:
#
#   cargo xtask vm -- sh ofed-shim/linux/selftest-vm.sh [CYCLES]
#
# Passes (exit 0) when every load and unload succeeded; `rdma resource show` (per-device
# totals of pd, cq, qp, cm_id, mr, ...) after every rmmod equals its output before the first
# insmod; the log has one PASS line and one kernel-verbs line per run and one "0
# allocations and 0 page references outstanding, 0 cm ids, pds, cqs, qps, mrs and dma maps
# live" line per unload; and no line of the log matches WARNING, BUG, Oops, kmemleak,
# "Call Trace", LEAK or FAIL (case-sensitive).
set -u
KO=${KO:-target/kmod/linux/krpc_rdma.ko}
CYCLES=${1:-20}
ADDR=${RXE_IP:-10.0.2.15}
fail() {
	# The module's report lines and the kernel's markers, so that a failure says why.
	dmesg | grep -E "krpc_rdma|WARNING|BUG|Oops|Call Trace" | tail -n 40
	echo "selftest-vm: FAIL: $*"
	exit 1
}

[ -f "$KO" ] || fail "$KO not found (cargo xtask kmod)"
uname -r
# insmod does not load dependencies: the module needs ib_core (rdma_rxe has it) and rdma_cm.
modprobe rdma_cm || fail "modprobe rdma_cm"
dmesg -C
mountpoint -q /sys/kernel/debug || mount -t debugfs none /sys/kernel/debug
before=$(rdma resource show) || fail "rdma resource show"
echo "rdma resource show before insmod: $before"

i=1
runs=0
t0=$(date +%s)
while [ "$i" -le "$CYCLES" ]; do
	insmod "$KO" selftest=1 rdma_addr="$ADDR" ${KRPC_SELFTEST_ARGS:-} || fail "cycle $i: insmod selftest=1 failed"
	runs=$((runs + 1))
	if [ "$i" -eq 1 ]; then
		out=$(cat /sys/kernel/debug/krpc_rdma/selftest) || fail "debugfs read"
		echo "debugfs: $out"
		case "$out" in *": PASS: "*) ;; *) fail "debugfs run: $out" ;; esac
		runs=$((runs + 1))
	fi
	rmmod krpc_rdma || fail "cycle $i: rmmod failed"
	after=$(rdma resource show) || fail "rdma resource show"
	[ "$after" = "$before" ] || fail "cycle $i: rdma resource show after rmmod: $after (before insmod: $before)"
	i=$((i + 1))
done
t1=$(date +%s)
echo "rdma resource show after the last rmmod: $after"

log=$(dmesg)
echo "$log" | grep "krpc_rdma selftest:" | head -n 3
echo "$log" | grep -m 1 "krpc_rdma: unload"
pass=$(echo "$log" | grep -c "krpc_rdma selftest: PASS")
kverbs=$(echo "$log" | grep -c "krpc_rdma selftest: kernel verbs.* 0 failed")
clean=$(echo "$log" | grep -c "krpc_rdma: unload: 0 allocations and 0 page references outstanding, 0 cm ids, pds, cqs, qps, mrs and dma maps live")
# The kernel's own markers (WARN: "WARNING:", BUG: "BUG:", "Oops", "Call Trace"), kmemleak's,
# and the module's ("LEAK/MISUSE", "selftest: FAIL"); case-sensitive ("0 failed" is fine).
bad=$(echo "$log" | grep -E "WARNING|BUG|Oops|kmemleak|Call Trace|LEAK|FAIL")
[ -z "$bad" ] || fail "kernel log: $bad"
[ "$pass" -eq "$runs" ] || fail "$pass PASS lines for $runs runs"
[ "$kverbs" -eq "$runs" ] || fail "$kverbs kernel-verbs lines without failures for $runs runs"
[ "$clean" -eq "$CYCLES" ] || fail "$clean clean unloads of $CYCLES"
echo "selftest-vm: ok: $CYCLES insmod/selftest/rmmod cycles in $((t1 - t0)) s, $runs self-test runs passed (soft provider and kernel verbs on $ADDR), $clean clean unloads, rdma resource show unchanged, no WARNING/BUG/Oops/kmemleak in the kernel log"
