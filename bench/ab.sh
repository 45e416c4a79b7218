#!/usr/bin/env bash
# ab.sh compares builds of Skulk's host (and, unless a child is given, of
# the whole stack) under the same load: the bench test binaries of two or
# more checkouts run in turn, round by round, and benchstat compares them.
#
#   bench/ab.sh [-n ROUNDS] [-b BENCH_REGEXP] [-c CHILD_BINARY] CHECKOUT...
#
# Each CHECKOUT is a working tree of the repository (git worktree add
# /tmp/old REV). Its bench test binary is built once (go test -c) and run
# from its own bench/internal/compare, so that it builds the children from
# its own tree. With -c, every build drives that one child binary instead
# (SKULK_BENCH_CHILD), so only the hosts differ:
#
#   (cd bench && go build -o /tmp/child ./cmd/skulkchild)
#   bench/ab.sh -c /tmp/child /tmp/old .
#
# Results go to ab-out/<n>.txt beside this script's working directory, one
# file per checkout in the order given, and benchstat (if installed:
# go install golang.org/x/perf/cmd/benchstat@latest) prints the first as
# the baseline.
set -euo pipefail
rounds=6
re='SkulkSmallStream$|SkulkSmallStreamPlain$|SkulkMedia$|SkulkCall$|SkulkUnary$'
child=
while getopts n:b:c: opt; do
	case $opt in
	n) rounds=$OPTARG ;;
	b) re=$OPTARG ;;
	c) child=$(realpath "$OPTARG") ;;
	*) exit 2 ;;
	esac
done
shift $((OPTIND - 1))
if [ $# -lt 2 ]; then
	echo "usage: ab.sh [-n ROUNDS] [-b BENCH_REGEXP] [-c CHILD_BINARY] CHECKOUT CHECKOUT..." >&2
	exit 2
fi
if [ -n "$child" ]; then
	for tree in "$@"; do
		if ! grep -q SKULK_BENCH_CHILD "$tree/bench/internal/compare/bench_test.go"; then
			echo "ab.sh: $tree: its bench tests ignore SKULK_BENCH_CHILD, so -c cannot make it drive the given child" >&2
			exit 2
		fi
	done
fi
out=$(pwd)/ab-out
mkdir -p "$out"
bins=()
i=0
for tree in "$@"; do
	i=$((i + 1))
	bin="$out/$i.test"
	(cd "$tree/bench" && go test -c -o "$bin" ./internal/compare)
	bins+=("$bin")
	: >"$out/$i.txt"
done
for round in $(seq "$rounds"); do
	i=0
	for tree in "$@"; do
		i=$((i + 1))
		echo "round $round/$rounds: $tree" >&2
		(cd "$tree/bench/internal/compare" &&
			SKULK_BENCH_CHILD=$child "${bins[$((i - 1))]}" -test.run '^$' -test.bench "$re" -test.benchtime 1s) >>"$out/$i.txt"
	done
done
files=()
for j in $(seq "$i"); do files+=("$out/$j.txt"); done
if command -v benchstat >/dev/null; then
	benchstat "${files[@]}"
else
	echo "results: ${files[*]} (benchstat not installed)" >&2
fi
