#!/usr/bin/env bash
# Builds the CNCF Distribution registry (hack/registry/main.go, filesystem
# storage only) into $1 (default ../../bin/registry) from the Go module
# proxy. Idempotent: it is rebuilt only when go.mod, go.sum, this script or
# main.go is newer than the binary.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
self="$here/$(basename "$0")"
bin=${1:-$here/../../bin/registry}
mkdir -p "$(dirname "$bin")"
bin="$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin")"

cd "$here"
if [ -x "$bin" ] && [ "$bin" -nt go.mod ] && [ "$bin" -nt go.sum ] && [ "$bin" -nt "$self" ] && [ "$bin" -nt main.go ]; then
  echo "registry: $bin is current"
  exit 0
fi
echo "registry: building $bin"
# The project's own build flags, and go.mod's versions aligned with the
# project's (otel, grpc, protobuf, x/net, klauspost/compress, ...): the
# packages both compile are compiled once and shared in the build cache.
go build -ldflags "-s -w" -o "$bin.tmp" .
mv "$bin.tmp" "$bin"
