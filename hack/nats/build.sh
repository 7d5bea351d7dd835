#!/usr/bin/env bash
# Builds nats-server (JetStream included) into $1 (default ../../bin/nats-server)
# from the Go module proxy, at the version go.mod pins. `make run` and the
# audit suites start it as the audit stream's sink. Idempotent: rebuilt only
# when go.mod, go.sum or this script is newer than the binary.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
self="$here/$(basename "$0")"
bin=${1:-$here/../../bin/nats-server}
mkdir -p "$(dirname "$bin")"
bin="$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin")"

cd "$here"
if [ -x "$bin" ] && [ "$bin" -nt go.mod ] && [ "$bin" -nt go.sum ] && [ "$bin" -nt "$self" ]; then
  echo "nats-server: $bin is current"
  exit 0
fi
echo "nats-server: building $bin"
go build -ldflags "-s -w" -o "$bin.tmp" github.com/nats-io/nats-server/v2
mv "$bin.tmp" "$bin"
