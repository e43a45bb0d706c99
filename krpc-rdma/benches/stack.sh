#!/bin/sh
# Stack frames of the core in the kernel module: `sh krpc-rdma/benches/stack.sh [KO] [LIMIT]`
# (KO defaults to target/kmod/linux/krpc_rdma.ko from `cargo xtask kmod`, LIMIT to 1024).
#
# For every function of krpc_rdma:: and mbuf:: (the scenario suite and the self-test
# excluded) it prints the frame: the prologue's `sub $N,%rsp` plus 8 bytes per register
# pushed before it plus the return address. It fails when one is above LIMIT, except
# `wire::HeaderRepr::parse` (the owned 2 KiB header repr, used only by the scenario suite and
# the fuzzers, never by the transport; listed, not counted).
#
# Why not the kernel's scripts/checkstack.pl alone: its x86_64 pattern matches `add` as well as
# `sub` of %rsp and adds up every match in a function, so a Rust function (no frame pointer:
# its epilogues `add` the frame back instead of `leave`) is counted once per epilogue plus
# once for the prologue: at least twice its frame. Both figures are printed.
set -eu
ko=${1:-target/kmod/linux/krpc_rdma.ko}
limit=${2:-1024}
checkstack=$(ls /usr/src/linux-headers-*-common/scripts/checkstack.pl 2>/dev/null | head -n1)
tmp=$(mktemp)
trap 'rm -f "$tmp"' EXIT
objdump -d --no-show-raw-insn "$ko" > "$tmp"
if [ -n "$checkstack" ]; then
	perl "$checkstack" x86_64 < "$tmp" | awk '{n=$2; sub(/.*:/, "", $NF); print n, $NF}' > "$tmp.cs"
else
	: > "$tmp.cs"
fi
perl -e '
open(my $cs, "<", $ARGV[0]) or die;
my %checkstack = map { split " " } <$cs>;
my ($name, $pushes, $done);
while (<STDIN>) {
	if (/^[0-9a-f]+ <(.*)>:$/) { ($name, $pushes, $done) = ($1, 0, 0); next }
	next if $done || !defined $name;
	if (/\tpush +%r/) { $pushes++; next }
	if (/\tsub +\$0x([0-9a-f]+),%rsp$/) {
		my $sub = hex($1);
		$done = 1;
		next if $name !~ /krpc_rdma|mbuf/ || $name =~ /krpc_rdma_scenarios|selftest/;
		# Outside the transport: listed, not held to the limit.
		my $exempt = $name =~ /HeaderRepr5parse/ ? " (exempt)" : "";
		printf "%6d %6s %s%s\n", $sub + 8 * $pushes + 8, $checkstack{$name} // "-", $name, $exempt;
		next;
	}
	$done = 1 if /\t(call|ret|jmp)/;
}' "$tmp.cs" < "$tmp" | sort -rn > "$tmp.out"
rm -f "$tmp.cs"
over=$(awk -v limit="$limit" '$1 > limit && !/\(exempt\)$/' "$tmp.out" | wc -l)
echo "frame  checkstack.pl  function (krpc_rdma:: and mbuf::, frames >= 512 bytes; scenario suite and self-test excluded)"
awk '$1 >= 512' "$tmp.out"
total=$(wc -l < "$tmp.out")
largest=$(grep -v '(exempt)$' "$tmp.out" | head -n1 | awk '{print $1, $3}')
rm -f "$tmp.out"
echo "stack.sh: $total functions with a frame; largest (not exempt) $largest; $over above $limit bytes"
[ "$over" -eq 0 ]
