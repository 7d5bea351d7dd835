#!/usr/bin/env bash
# Fails when a module both the project and hack/controlplane (or
# hack/registry, hack/nats, hack/bundlecheck, hack/conftest,
# hack/controller-gen, hack/image) build from has two versions.
# Aligned, every package they share (k8s.io/*, grpc, protobuf,
# otel, x/net, x/sys, ...) is compiled once: the control plane fills the
# build cache that `make test` then reads. One version apart, each is
# compiled twice, and a cold `make test` takes minutes longer.
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
list() { (cd "$1" && go list -m -f '{{.Path}} {{with .Replace}}{{.Version}}{{else}}{{.Version}}{{end}}' all) | LC_ALL=C sort; }
status=0
for other in hack/controlplane hack/registry hack/nats hack/bundlecheck hack/conftest hack/controller-gen hack/image; do
  apart=$(LC_ALL=C join <(list .) <(list "$other") | awk '$2 != $3')
  if [ -n "$apart" ]; then
    echo "modules at two versions (module, project's, $other's):"
    echo "$apart" | sed 's/^/  /'
    echo "align them: go get the higher version in the other module"
    status=1
  fi
done
[ "$status" -eq 0 ] && echo "the project, hack/controlplane, hack/registry, hack/nats, hack/bundlecheck, hack/conftest, hack/controller-gen and hack/image share every module at one version"
exit "$status"
