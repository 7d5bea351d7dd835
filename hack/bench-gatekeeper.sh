#!/usr/bin/env bash
# bench-gatekeeper.sh [ROUNDS] [N]: Gatekeeper v3.23.1's constraint
# framework (its Rego driver and its CEL driver, hack/gkbench) and MacRack's
# BenchmarkRuleDecoded/lease.floor on the same lease review, alternated
# ROUNDS times (default 3) so that each sees the same minutes of this VM's
# drift. Prints each one's median p50 and p99, and the ratios.
set -euo pipefail
rounds=${1:-3}
n=${2:-5000}
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
(cd "$root/hack/gkbench" && go build -o "$work/gkbench" .)
(cd "$root" && go test -c -o "$work/tree.test" ./internal/policy/vectors/)
for i in $(seq "$rounds"); do
  for engine in rego cel; do
    "$work/gkbench" -policies "$root/policies" -engine "$engine" -n "$n" >>"$work/runs"
  done
  (cd "$root/internal/policy/vectors" && "$work/tree.test" -test.run '^$' -test.bench 'BenchmarkRuleDecoded/lease.floor$' \
    -test.benchtime "${n}x" -test.benchmem) | awk '/^BenchmarkRuleDecoded\// {
      for (f = 1; f <= NF; f++) { if ($f == "p50-µs") p50 = $(f-1); if ($f == "p99-µs") p99 = $(f-1); if ($f == "allocs/op") a = $(f-1) }
      print "macrack-lease.floor", p50, "p50-µs", p99, "p99-µs", a, "allocs/op" }' >>"$work/runs"
done
cat "$work/runs" >&2
echo "| decision | p50 / p99 (µs), median of the rounds | allocs/op | p50 ratio to MacRack |"
echo "|---|---|---|---|"
awk "$(cat "$root/hack/median.awk")"'
  { p50[$1] = p50[$1] " " $2; p99[$1] = p99[$1] " " $4; a[$1] = $6 }
  END {
    m = median(p50["macrack-lease.floor"])
    for (k in p50) printf "| %s | %s / %s | %s | %.2f |\n", k, median(p50[k]), median(p99[k]), a[k], median(p50[k]) / m
  }' "$work/runs" | sort
