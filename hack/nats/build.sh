#!/usr/bin/env bash
# Builds nats-server (JetStream included) into $1 (default ../../bin/nats-server)
# from the Go module proxy, at the version go.mod pins. `make run` and the
# audit suites start it as the audit stream's sink. Idempotent: rebuilt only
# when the content of go.mod, go.sum, this script or the Go toolchain
# changes (hack/lib/buildstep.sh), never on timestamps. BUILD_DRY_RUN=1
# says whether it would build.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
self="$here/$(basename "$0")"
# shellcheck source=../lib/buildstep.sh
. "$here/../lib/buildstep.sh"
bin=${1:-$here/../../bin/nats-server}
mkdir -p "$(dirname "$bin")"
bin="$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin")"

cd "$here"
sources=(go.mod go.sum)
hash=$(inputs_hash "${sources[@]}" "$self" "$here/../lib/buildstep.sh" -- "-s -w")
if stamp_current "$bin" "$hash" "${sources[@]}"; then
  echo "nats-server: $bin is current"
  exit 0
fi
if [ -n "${BUILD_DRY_RUN:-}" ]; then
  echo "nats-server: would build $bin"
  exit 0
fi
record="$(dirname "$bin")/.$(basename "$bin").build-seconds"
step_begin "$record" "nats-server: building $bin" "about 15 s after the control plane, 2 cores"
"${GO:-go}" build -ldflags "-s -w" -o "$bin.tmp" github.com/nats-io/nats-server/v2
mv "$bin.tmp" "$bin"
stamp_write "$bin" "$hash"
step_end "$record" "nats-server:"
