#!/usr/bin/env bash
# Runs the real conftest over manifests, as a reviewer's CI would: each file
# under test/conftest/deny must be denied with the rule its name starts with
# as given in its first comment, and test/conftest/allow and config/samples
# must pass.
set -euo pipefail
conftest=$1
cd "$(git rev-parse --show-toplevel)"
for f in test/conftest/deny/*.yaml; do
  rule=$(grep -o -m1 'with [a-z.-]*' "$f" | awk '{print $2}' | sed 's/\.$//')
  if out=$("$conftest" test --no-color -p policies "$f" 2>&1); then
    echo "conftest admitted $f, which must be denied with $rule"; exit 1
  fi
  if ! grep -q "FAIL.*$rule:" <<<"$out"; then
    echo "conftest denied $f, but not with $rule:"; echo "$out"; exit 1
  fi
done
"$conftest" test --no-color -p policies test/conftest/allow config/samples >/dev/null
echo "conftest: $(ls test/conftest/deny | wc -l) denied with their rule, allowed manifests pass"
