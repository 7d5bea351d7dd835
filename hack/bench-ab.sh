#!/usr/bin/env bash
# bench-ab.sh BASE [ROUNDS] [BENCHTIME] [RULES]: every rule's (or the rules
# matching the regexp RULES') BenchmarkRuleDecoded
# at commit BASE and in this tree, alternating the two test binaries ROUNDS
# times (default 3), so that both see the same minutes of this VM's drift.
# Prints each rule's median p50 and p99 over the rounds, base then tree, and
# the median CPU per decision where the benchmark reports it (cpu-µs/op).
set -euo pipefail

base=${1:?usage: hack/bench-ab.sh BASE [ROUNDS] [BENCHTIME] [RULES]}
rounds=${2:-3}
benchtime=${3:-5000x}
rules=${4:-.}
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
trap 'git -C "$root" worktree remove --force "$work/base" >/dev/null 2>&1 || true; rm -rf "$work"' EXIT

git -C "$root" worktree add --detach "$work/base" "$base" >/dev/null
(cd "$work/base" && go test -c -o "$work/base.test" ./internal/policy/vectors/)
(cd "$root" && go test -c -o "$work/tree.test" ./internal/policy/vectors/)

for i in $(seq "$rounds"); do
  for side in base tree; do
    dir=$work/base
    [ "$side" = tree ] && dir=$root
    (cd "$dir/internal/policy/vectors" && "$work/$side.test" -test.run '^$' -test.bench "BenchmarkRuleDecoded/$rules" \
      -test.benchtime "$benchtime" -test.benchmem) | awk -v side="$side" '
        /^BenchmarkRuleDecoded\// {
          rule = $1; sub(/^BenchmarkRuleDecoded\//, "", rule); sub(/-[0-9]+$/, "", rule)
          cpu = "-"
          for (f = 1; f <= NF; f++) { if ($f == "p50-µs") p50 = $(f-1); if ($f == "p99-µs") p99 = $(f-1); if ($f == "allocs/op") a = $(f-1); if ($f == "cpu-µs/op") cpu = $(f-1) }
          print side, rule, p50, p99, a, cpu
        }' >>"$work/runs"
  done
done

# Median of each rule's p50 and p99 per side.
echo "| rule | base p50 / p99 (µs) | tree p50 / p99 (µs) | allocs/op, base → tree | CPU µs/decision, base → tree |"
echo "|---|---|---|---|---|"
awk "$(cat "$root/hack/median.awk")"'
  { key = $2 SUBSEP $1; p50[key] = p50[key] " " $3; p99[key] = p99[key] " " $4; allocs[key] = $5; rules[$2] = 1
    if ($6 != "-") cpu[key] = cpu[key] " " $6 }
  END {
    for (r in rules) {
      b = r SUBSEP "base"; t = r SUBSEP "tree"
      cb = (b in cpu) ? median(cpu[b]) : "-"; ct = (t in cpu) ? median(cpu[t]) : "-"
      printf "| %s | %s / %s | %s / %s | %s → %s | %s → %s |\n", r, median(p50[b]), median(p99[b]), median(p50[t]), median(p99[t]), allocs[b], allocs[t], cb, ct
    }
  }' "$work/runs" | sort
