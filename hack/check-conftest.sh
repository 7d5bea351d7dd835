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
# The reviewer's examples (docs/compliance.md): examples/manifests passes, and
# each violating example of a rule policies/conftest applies is denied with it
# (the others need the inventory, which only macrackctl reads).
examples=0
for f in examples/violating/*.yaml; do
  rule=$(sed -n '1s/^# Violates \([a-z.-]*\): .*/\1/p' "$f")
  case "$rule" in lease.floor|node.commercial|quota.never-circumvent) ;; *) continue ;; esac
  if out=$("$conftest" test --no-color -p policies "$f" 2>&1) || ! grep -q "FAIL.*$rule:" <<<"$out"; then
    echo "conftest did not deny $f with $rule:"; echo "$out"; exit 1
  fi
  examples=$((examples + 1))
done
if [ "$examples" -ne 3 ]; then
  echo "examples/violating has $examples examples of conftest's three rules; want one of each"; exit 1
fi
"$conftest" test --no-color -p policies examples/manifests >/dev/null
echo "conftest: $(ls test/conftest/deny | wc -l) denied with their rule, allowed manifests pass;" \
  "$examples violating examples denied with their rule, examples/manifests passes"
