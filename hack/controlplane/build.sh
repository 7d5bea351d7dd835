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
stale=()
for t in "${targets[@]}"; do
  bin="$out/$t"
  if [ -x "$bin" ] && [ "$bin" -nt go.mod ] && [ "$bin" -nt go.sum ] && [ "$bin" -nt "$0" ] && [ "$bin" -nt "$t/main.go" ]; then
    echo "controlplane: $t is current"
  else
    stale+=("$t")
  fi
done
[ ${#stale[@]} -gt 0 ] || exit 0
echo "controlplane: building ${stale[*]} (cold builds take a few minutes)"
# The project's own build flags (no -trimpath, cgo as the machine has it),
# and go.mod's versions aligned with the project's: every package both
# compile is compiled once, and `make test` finds it in the cache. One go
# build for all: one schedule for both cores, not one tail per binary.
tmp=$(mktemp -d "$out/.build.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
go build -ldflags "$ldflags" -o "$tmp/" "${stale[@]/#/./}"
for t in "${stale[@]}"; do mv "$tmp/$t" "$out/$t"; done
