#!/bin/sh
# Stack frames of every function of the kernel module: `sh krpc-rdma/benches/stack.sh [KO] [LIMIT]`
# (KO defaults to target/kmod/linux/krpc_rdma.ko from `cargo xtask kmod`, LIMIT to 1024).
#
# For every function of the .ko (its symbols: `cargo xtask kmod` keeps the local ones) it
# measures the frame: every `sub $N,%rsp` of the prologue (large frames are allocated in
# page steps by LLVM's inline stack probes: `sub $0x1000,%rsp; movq $0,(%rsp)` repeated,
# then the rest) plus 8 bytes per register pushed plus the return address, read from
# `objdump -dr` from the prologue's first push or `sub` up to the next call, jump or return
# (what comes before the prologue is read past: the C functions' leading `call __fentry__`,
# and the early exits of a shrink-wrapped function, whose prologue follows a branch or a
# `ret` — until 2026-11-26 the script stopped there and counted 95 such functions, up to
# 912 bytes, as frameless). It fails when a function's frame is above LIMIT (EXEMPT below could
# name a function with a ceiling of its own; it names none).
#
# Functions are counted by where they come from: our crates (krpc_rdma, mbuf,
# krpc_rdma_scenarios, ofed_shim, krpc_face, ofed_testkit, onc_rpc, nfs_proto, nfs_service, harness_rpc: their own
# functions, and core/alloc generics whose symbol names one of our types, e.g. drop_in_place<krpc_rdma::...> or
# <ofed_shim::qp::OfedQp as Provider>::register), other Rust (core/alloc/compiler_builtins,
# precompiled or instantiated with types the symbol does not name), and unmangled (the C
# glue and verbs wrapper compiled by kbuild, and compiler_builtins' memcpy & co). All are
# held to LIMIT.
#
# Why not the kernel's scripts/checkstack.pl alone: its x86_64 pattern matches `add` as well as
# `sub` of %rsp and adds up every match in a function, so a Rust function (no frame pointer:
# its epilogues `add` the frame back instead of `leave`) is counted once per epilogue plus
# once for the prologue: at least twice its frame. Its figure is printed beside ours.
set -eu
ko=${1:-target/kmod/linux/krpc_rdma.ko}
limit=${2:-1024}

# Exempt functions: "CEILING SYMBOL-PATH" (the legacy-mangled path up to the hash; every
# instantiation), one a line, each held to its own ceiling instead of LIMIT. The list is
# empty: every function of ours is at most 1 KiB. (Until 2026-11-26 it named 11 paths, 20
# functions of up to 1,808 bytes: `OfedQp::new`, which built the 880-byte `Binding` from its
# parts and then copied it into the queue pair — now built in place, `Binding::unallocated`
# writing straight into `OfedQp::new`'s result and `Binding::allocate` filling it there —, the
# self-test driver `ofed_testkit::selftest::run_suite` and eight scenario functions, now split
# into `#[inline(never)]` steps.)
EXEMPT=''

checkstack=$(ls /usr/src/linux-headers-*-common/scripts/checkstack.pl 2>/dev/null | head -n1)
tmp=$(mktemp)
trap 'rm -f "$tmp" "$tmp.cs" "$tmp.ex" "$tmp.out"' EXIT
objdump -dr --no-show-raw-insn "$ko" > "$tmp"
if [ -n "$checkstack" ]; then
	perl "$checkstack" x86_64 < "$tmp" | awk '{n=$2; sub(/.*:/, "", $NF); print n, $NF}' > "$tmp.cs"
else
	: > "$tmp.cs"
fi
printf '%s\n' "$EXEMPT" > "$tmp.ex"
perl -e '
open(my $cs, "<", $ARGV[0]) or die;
my %checkstack = map { split " " } <$cs>;
open(my $ex, "<", $ARGV[1]) or die;
my @exempt = map { [split " "] } grep { /\S/ } <$ex>;
my $limit = $ARGV[2];
my ($name, $pushes, $sub, $r11, $done);
sub kind {
	my $n = shift;
	return "ours" if $n =~ /krpc_rdma|mbuf|ofed_shim|krpc_face|ofed_testkit|onc_rpc|nfs_proto|nfs_service|harness_rpc/;
	return "rust" if $n =~ /^_(ZN|R)/;
	return "unmangled";
}
sub out {
	return unless defined $name;
	my $frame = $sub + 8 * $pushes + 8;
	return if $frame == 8;
	my $note = "";
	for my $e (@exempt) {
		next unless index($name, $e->[1]) == 0;
		$note = $frame <= $e->[0] ? " (exempt, ceiling $e->[0])" : " (ABOVE its exemption ceiling $e->[0])";
	}
	printf "%6d %6s %-9s %s%s\n", $frame, $checkstack{$name} // "-", kind($name), $name, $note;
}
while (<STDIN>) {
	if (/^[0-9a-f]+ <(.*)>:$/) { out(); ($name, $pushes, $sub, $r11, $done) = ($1, 0, 0, 0, 0); next }
	next if $done || !defined $name;
	next if /^\s+[0-9a-f]+:\s+R_X86_64/;
	if (/\tpush +%r/) { $pushes++; next }
	if (/\tsub +\$0x([0-9a-f]+),%rsp$/) { my $v = hex($1); $sub += $v if $v < 0x80000000; next }
	if (/\tsub +\$0x([0-9a-f]+),%r11$/) { my $v = hex($1); $r11 = $v if $v < 0x80000000; next }
	# Before the prologue: the leading `call __fentry__` of the C functions, and the early
	# exits of a shrink-wrapped function (its prologue after a branch or a return).
	next if /\t(call|ret|jmp|j[a-z]+ )/ && $pushes == 0 && $sub == 0;
	if (/\t(call|ret|jmp|j[a-z]+ )/) { $sub = $r11 if $r11 > $sub; $done = 1 }
}
out();' "$tmp.cs" "$tmp.ex" "$limit" < "$tmp" | sort -rn > "$tmp.out"
over=$(awk -v limit="$limit" '$1 > limit && !/\(exempt, ceiling [0-9]+\)$/' "$tmp.out" | wc -l)
echo "frame  checkstack.pl  kind  function (every function of the .ko with a frame >= 512 bytes)"
awk '$1 >= 512' "$tmp.out"
for k in ours rust unmangled; do
	n=$(awk -v k="$k" '$3 == k' "$tmp.out" | wc -l)
	top=$(awk -v k="$k" '$3 == k && !/\(exempt/ {print $1, $4; exit}' "$tmp.out")
	echo "stack.sh: $k: $n functions with a frame; largest not exempt: $top"
done
total=$(wc -l < "$tmp.out")
exempt=$(awk -v limit="$limit" '$1 > limit && /\(exempt, ceiling [0-9]+\)$/' "$tmp.out" | wc -l)
echo "stack.sh: $total functions with a frame; $exempt above $limit bytes exempt (listed above, each under its ceiling); $over above $limit bytes otherwise"
[ "$over" -eq 0 ]
