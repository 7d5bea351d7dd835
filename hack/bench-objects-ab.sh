#!/usr/bin/env bash
# bench-objects-ab.sh BASE [ROUNDS] [COUNT] [CASES]: issue 17's per-object
# benchmarks (test/envtest/bench's BenchmarkObjects, or the cases matching
# the regexp CASES, e.g. '^(lease|image)$') at commit BASE and in this tree,
# alternating the two test binaries ROUNDS times (default 2), each run with
# -count COUNT (default 3), so that both see the same minutes of this VM's
# drift. The benchmark's files are this tree's, copied into BASE's worktree:
# both sides measure the same cases, over the same fleets. Prints, per case
# and fleet size, the median ns/op, cpu-ns/op and allocs/op, base then tree,
# each side's 1000/10 ratio of those medians, and each side's median paired
# ratio (the sizes run in turn). Needs bin/k8s (make controlplane).
set -euo pipefail

base=${1:?usage: hack/bench-objects-ab.sh BASE [ROUNDS] [COUNT] [CASES]}
rounds=${2:-2}
count=${3:-3}
cases=${4:-.}
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
trap 'git -C "$root" worktree remove --force "$work/base" >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
export KUBEBUILDER_ASSETS=${KUBEBUILDER_ASSETS:-$root/bin/k8s}

git -C "$root" worktree add --detach "$work/base" "$base" >/dev/null
cp "$root/test/envtest/bench/objects_test.go" "$root/test/envtest/bench/bench_test.go" "$work/base/test/envtest/bench/"
(cd "$work/base" && go test -c -o "$work/base.test" ./test/envtest/bench/)
(cd "$root" && go test -c -o "$work/tree.test" ./test/envtest/bench/)

for i in $(seq "$rounds"); do
  for side in base tree; do
    dir=$work/base
    [ "$side" = tree ] && dir=$root
    (cd "$dir/test/envtest/bench" && "$work/$side.test" -test.run '^$' -test.bench "^BenchmarkObjects\$/$cases" \
      -test.count "$count" -test.benchmem -test.timeout 120m) | tee -a "$work/$side.out" | awk -v side="$side" '
        /^BenchmarkObjects\// {
          name = $1; sub(/^BenchmarkObjects\//, "", name); sub(/-[0-9]+$/, "", name)
          for (f = 1; f <= NF; f++) {
            if ($f == "ns/op") ns = $(f-1); if ($f == "cpu-ns/op") cpu = $(f-1); if ($f == "allocs/op") a = $(f-1)
            if ($f == "ratio") r = $(f-1); if ($f == "cpu-ratio") cr = $(f-1)
          }
          if (name ~ /\/fleet=/) print side, name, ns, cpu, a >> runs
          if (name ~ /\/paired$/) { sub(/\/paired$/, "", name); print side, name, r, cr >> paired }
        }' runs="$work/runs" paired="$work/paired"
  done
done
for side in base tree; do cp "$work/$side.out" "${TMPDIR:-/tmp}/bench-objects-ab.$side.out"; done

awk -v rows="$work/rows" -v ratios="$work/ratios" "$(cat "$root/hack/median.awk")"'
  {
    c = $2; f = c; sub(/\/fleet=[0-9]+$/, "", c); sub(/^.*\/fleet=/, "", f)
    k = c SUBSEP f SUBSEP $1
    ns[k] = ns[k] " " $3; cpu[k] = cpu[k] " " $4; allocs[k] = allocs[k] " " $5; cases[c] = 1; fleets[c, f] = 1
  }
  END {
    for (c in cases) for (cf in fleets) {
      split(cf, p, SUBSEP); if (p[1] != c) continue; f = p[2]
      b = c SUBSEP f SUBSEP "base"; t = c SUBSEP f SUBSEP "tree"
      printf "| %s | %s | %d | %d | %d | %d | %d → %d |\n", c, f, median(ns[b]), median(ns[t]), median(cpu[b]), median(cpu[t]), median(allocs[b]), median(allocs[t]) > rows
      mns[b] = median(ns[b]); mns[t] = median(ns[t]); mcpu[b] = median(cpu[b]); mcpu[t] = median(cpu[t])
    }
    for (c in cases) {
      b1 = c SUBSEP "10" SUBSEP "base"; b2 = c SUBSEP "1000" SUBSEP "base"
      t1 = c SUBSEP "10" SUBSEP "tree"; t2 = c SUBSEP "1000" SUBSEP "tree"
      if (mns[b1] == 0 || mns[t1] == 0 || mcpu[b1] == 0 || mcpu[t1] == 0) continue
      printf "| %s | %.2f (%.2f) | %.2f (%.2f) |\n", c, mns[b2] / mns[b1], mcpu[b2] / mcpu[b1], mns[t2] / mns[t1], mcpu[t2] / mcpu[t1] > ratios
    }
  }' "$work/runs"
echo "| case | fleet | base ns/op | tree ns/op | base cpu-ns/op | tree cpu-ns/op | allocs/op, base → tree |"
echo "|---|---|---|---|---|---|---|"
sort -t'|' -k2,2 -k3,3n "$work/rows"
echo
echo "| case | base ratio 1000/10, ns (cpu) | tree ratio 1000/10, ns (cpu) |"
echo "|---|---|---|"
sort "$work/ratios"
# The paired runs: both sizes in turn, in one benchmark (BenchmarkObjects/<case>/paired).
if [ -s "$work/paired" ]; then
  echo
  echo "| case | base paired ratio, ns (cpu) | tree paired ratio, ns (cpu) |"
  echo "|---|---|---|"
  awk "$(cat "$root/hack/median.awk")"'
    { r[$2, $1] = r[$2, $1] " " $3; cr[$2, $1] = cr[$2, $1] " " $4; cases[$2] = 1 }
    END {
      for (c in cases) printf "| %s | %s (%s) | %s (%s) |\n", c, median(r[c, "base"]), median(cr[c, "base"]), median(r[c, "tree"]), median(cr[c, "tree"])
    }' "$work/paired" | sort
fi
