#!/usr/bin/env bash
# Builds the bundle validator (hack/bundlecheck, the operator framework's
# validators) into $1 (default ../../bin/bundlecheck). Idempotent: it is
# rebuilt only when go.mod, go.sum, this script or a .go file is newer than
# the binary.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
self="$here/$(basename "$0")"
bin=${1:-$here/../../bin/bundlecheck}
mkdir -p "$(dirname "$bin")"
bin="$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin")"

cd "$here"
current=1
[ -x "$bin" ] || current=0
for f in go.mod go.sum "$self" ./*.go; do
  [ "$bin" -nt "$f" ] || current=0
done
if [ "$current" -eq 1 ]; then
  echo "bundlecheck: $bin is current"
  exit 0
fi
echo "bundlecheck: building $bin"
# go.mod's versions are the project's (hack/check-aligned-modules.sh): the
# k8s.io and controller-runtime packages are compiled once and shared.
go build -ldflags "-s -w" -o "$bin.tmp" .
mv "$bin.tmp" "$bin"
