#!/usr/bin/env bash
# Builds the binaries named after $1 (kube-apiserver, etcd,
# kube-controller-manager, kubectl; default the first two) into $1 (default
# ../../bin/k8s) from the Go module proxy. Idempotent: a binary is rebuilt
# only when go.mod, go.sum, this script or its main.go is newer than it.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-$here/../../bin/k8s}
mkdir -p "$out"
out=$(cd "$out" && pwd)
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(kube-apiserver etcd)

k8s_version=v1.37.2
pkg=k8s.io/component-base/version
ldflags="-s -w -X ${pkg}.gitVersion=${k8s_version} -X ${pkg}.gitMajor=1 -X ${pkg}.gitMinor=37 -X ${pkg}.gitTreeState=clean"

cd "$here"
for t in "${targets[@]}"; do
  bin="$out/$t"
  if [ -x "$bin" ] && [ "$bin" -nt go.mod ] && [ "$bin" -nt go.sum ] && [ "$bin" -nt "$0" ] && [ "$bin" -nt "$t/main.go" ]; then
    echo "controlplane: $t is current"
    continue
  fi
  echo "controlplane: building $t (cold builds take a few minutes)"
  # The project's own build flags (no -trimpath, cgo as the machine has
  # it), and go.mod's versions aligned with the project's: every package
  # both compile is compiled once, and `make test` finds it in the cache.
  go build -ldflags "$ldflags" -o "$bin.tmp" "./$t"
  mv "$bin.tmp" "$bin"
done
