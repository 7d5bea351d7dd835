#!/usr/bin/env bash
# Builds the CNCF Distribution registry (hack/registry/main.go, filesystem
# storage only) into $1 (default ../../bin/registry) from the Go module
# proxy. Idempotent: it is rebuilt only when the content of go.mod, go.sum,
# this script, main.go or the Go toolchain changes (hack/lib/buildstep.sh),
# never on timestamps. BUILD_DRY_RUN=1 says whether it would build.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
self="$here/$(basename "$0")"
# shellcheck source=../lib/buildstep.sh
. "$here/../lib/buildstep.sh"
bin=${1:-$here/../../bin/registry}
mkdir -p "$(dirname "$bin")"
bin="$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin")"

cd "$here"
sources=(go.mod go.sum main.go)
hash=$(inputs_hash "${sources[@]}" "$self" "$here/../lib/buildstep.sh" -- "-s -w")
if stamp_current "$bin" "$hash" "${sources[@]}"; then
  echo "registry: $bin is current"
  exit 0
fi
if [ -n "${BUILD_DRY_RUN:-}" ]; then
  echo "registry: would build $bin"
  exit 0
fi
record="$(dirname "$bin")/.$(basename "$bin").build-seconds"
step_begin "$record" "registry: building $bin" "about 15 s after the control plane, 2 cores"
# The project's own build flags, and go.mod's versions aligned with the
# project's (otel, grpc, protobuf, x/net, klauspost/compress, ...): the
# packages both compile are compiled once and shared in the build cache.
"${GO:-go}" build -ldflags "-s -w" -o "$bin.tmp" .
mv "$bin.tmp" "$bin"
stamp_write "$bin" "$hash"
step_end "$record" "registry:"
