#!/usr/bin/env bash
# Runs the given generation command and fails if it changed any generated file.
# It compares content hashes, so it works on a clean clone and in a dirty tree.
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
paths=(api config policies test/policy docs)
snapshot() {
  local existing=()
  for p in "${paths[@]}"; do [ -e "$p" ] && existing+=("$p"); done
  find "${existing[@]}" -type f | LC_ALL=C sort | xargs -r sha256sum
}
before=$(snapshot)
"$@" >/dev/null
after=$(snapshot)
if [ "$before" != "$after" ]; then
  echo "Generated files are stale; run 'make generate manifests' and commit the result:"
  diff <(echo "$before") <(echo "$after") | grep '^[<>]' | awk '{print "  " $3}' | sort -u
  exit 1
fi
echo "generated files are current"
