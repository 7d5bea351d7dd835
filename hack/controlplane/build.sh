#!/usr/bin/env bash
# Builds the binaries named after $1 (kube-apiserver, etcd,
# kube-controller-manager, kubectl; default the first two) into $1 (default
# ../../bin/k8s) from the Go module proxy. Idempotent: a binary is rebuilt
# only when the content of its inputs changes (go.mod, go.sum, this script,
# its main.go, the version and flags, the Go toolchain), whose hash is kept
# beside it in .NAME.inputs: a copied bin/k8s is current. BUILD_DRY_RUN=1
# says what would be built, and builds nothing.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
self="$here/$(basename "$0")"
# shellcheck source=../lib/buildstep.sh
. "$here/../lib/buildstep.sh"
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
declare -A hashes
for t in "${targets[@]}"; do
  sources=(go.mod go.sum "$t/main.go")
  hashes[$t]=$(inputs_hash "${sources[@]}" "$self" "$here/../lib/buildstep.sh" -- "$k8s_version" "$ldflags")
  if stamp_current "$out/$t" "${hashes[$t]}" "${sources[@]}"; then
    echo "controlplane: $t is current"
  else
    stale+=("$t")
  fi
done
[ ${#stale[@]} -gt 0 ] || exit 0
if [ -n "${BUILD_DRY_RUN:-}" ]; then
  echo "controlplane: would build ${stale[*]}"
  exit 0
fi
# How long this set took last time, on this machine.
record="$out/.build-seconds.$(IFS=+; echo "${stale[*]}")"
step_begin "$record" "controlplane: building ${stale[*]}" "about 6.5 minutes cold on 2 cores"
# The project's own build flags (no -trimpath, cgo as the machine has it),
# and go.mod's versions aligned with the project's: every package both
# compile is compiled once, and `make test` finds it in the cache. One go
# build for all: one schedule for both cores, not one tail per binary.
tmp=$(mktemp -d "$out/.build.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
"${GO:-go}" build -ldflags "$ldflags" -o "$tmp/" "${stale[@]/#/./}"
for t in "${stale[@]}"; do
  mv "$tmp/$t" "$out/$t"
  stamp_write "$out/$t" "${hashes[$t]}"
done
step_end "$record" "controlplane: ${stale[*]}"
