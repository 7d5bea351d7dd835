#!/usr/bin/env bash
# MacRack is a separate product from its sibling project, whose name must
# appear nowhere here. The name is built from parts so this file does not
# match itself.
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
name="docker""ios"
hits=$(grep -rIil --exclude-dir=.git --exclude-dir=bin -- "$name" . || true)
if [ -n "$hits" ]; then
  echo "The sibling project's name appears in:"
  echo "$hits"
  exit 1
fi
echo "decoupling check passed"
