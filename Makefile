# MacRack. `make run` brings up a local control plane, the operator and a
# simulated fleet; `make test` runs every check CI runs.

SHELL := /usr/bin/env bash -o pipefail
.SHELLFLAGS := -ec

BIN        := $(CURDIR)/bin
K8S_BIN    := $(BIN)/k8s
export KUBEBUILDER_ASSETS := $(K8S_BIN)
export GOTOOLCHAIN := local

CONTROLLER_GEN_VERSION := v0.23.0
OPA_VERSION            := v1.22.3
CONFTEST_VERSION       := v0.71.1
STATICCHECK_VERSION    := v0.8.2

CONTROLLER_GEN := $(BIN)/controller-gen-$(CONTROLLER_GEN_VERSION)
OPA            := $(BIN)/opa-$(OPA_VERSION)
CONFTEST       := $(BIN)/conftest-$(CONFTEST_VERSION)
STATICCHECK    := $(BIN)/staticcheck-$(STATICCHECK_VERSION)

GO_TEST_FLAGS ?= -count=1
# Test binaries are linked without symbol tables and DWARF: about a quarter
# less link time each, and nothing in CI reads them. Link flags only, so
# every compiled package is still the build cache's (BENCHMARKS.md, "make
# test's time").
GO_TEST_LDFLAGS ?= -s -w
UNIT_PKGS      = $$(go list ./... | grep -v /test/envtest)

.PHONY: all
all: build

##@ Tools (pinned; opa in the project's module graph, the others each in its own)

$(CONTROLLER_GEN):
	GOBIN=$(BIN)/.gobin-controller-gen go install sigs.k8s.io/controller-tools/cmd/controller-gen@$(CONTROLLER_GEN_VERSION)
	mv $(BIN)/.gobin-controller-gen/controller-gen $@ && rm -rf $(BIN)/.gobin-controller-gen

# opa is a tool of the project's own module (go.mod's tool directive): the
# CLI compiles against the OPA packages the policy engine already uses,
# once. The version is go.mod's, which must equal OPA_VERSION.
$(OPA): go.mod go.sum
	@v=$$(go list -m -f '{{.Version}}' github.com/open-policy-agent/opa); \
	  if [ "$$v" != "$(OPA_VERSION)" ]; then echo "go.mod has opa $$v, the Makefile $(OPA_VERSION)"; exit 1; fi
	go build -o $@ github.com/open-policy-agent/opa

$(CONFTEST):
	GOBIN=$(BIN)/.gobin-conftest go install github.com/open-policy-agent/conftest@$(CONFTEST_VERSION)
	mv $(BIN)/.gobin-conftest/conftest $@ && rm -rf $(BIN)/.gobin-conftest

$(STATICCHECK):
	GOBIN=$(BIN)/.gobin-staticcheck go install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)
	mv $(BIN)/.gobin-staticcheck/staticcheck $@ && rm -rf $(BIN)/.gobin-staticcheck

.PHONY: tools
tools: $(CONTROLLER_GEN) $(OPA) $(CONFTEST) $(STATICCHECK)

##@ Generation

.PHONY: generate
generate: $(CONTROLLER_GEN) ## Deepcopy code, the VAPs in config/policies, the vectors as Rego tests.
	$(CONTROLLER_GEN) object paths="./api/..."
	go run ./hack/policygen --root $(CURDIR)

.PHONY: manifests
manifests: $(CONTROLLER_GEN) ## CRDs, RBAC and webhook manifests.
	$(CONTROLLER_GEN) \
	  crd:maxDescLen=512 paths="./api/..." output:crd:artifacts:config=config/crd/bases
	$(CONTROLLER_GEN) \
	  rbac:roleName=macrack-operator paths="./..." output:rbac:artifacts:config=config/rbac
	$(CONTROLLER_GEN) \
	  webhook paths="./internal/admission/..." output:webhook:artifacts:config=config/webhook

##@ Control plane

.PHONY: controlplane
controlplane: ## Build kube-apiserver, etcd and kube-controller-manager into bin/k8s from the Go module proxy.
	hack/controlplane/build.sh $(K8S_BIN) kube-apiserver etcd kube-controller-manager

.PHONY: kubectl
kubectl:
	hack/controlplane/build.sh $(K8S_BIN) kubectl

.PHONY: registry
registry: ## Build the CNCF Distribution registry (filesystem storage) into bin/registry from the Go module proxy.
	hack/registry/build.sh $(BIN)/registry

##@ Build

.PHONY: build
build: ## Build every binary into bin/.
	go build -o $(BIN)/ ./cmd/... ./hack/devcluster

##@ Checks and tests

.PHONY: fmt-check
fmt-check:
	@out=$$(find . -name '*.go' -not -path './bin/*' -not -path './.git/*' | xargs gofmt -l); \
	  if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

.PHONY: vet
vet:
	go vet ./...

.PHONY: staticcheck
staticcheck: $(STATICCHECK) ## staticcheck on every package.
	$(STATICCHECK) ./...

.PHONY: check-generated
check-generated: $(CONTROLLER_GEN) ## Fail if `make generate manifests` changes any file.
	hack/check-generated.sh $(MAKE) generate manifests

.PHONY: check-aligned-modules
check-aligned-modules: ## Fail if the project and hack/controlplane build a shared module at two versions.
	hack/check-aligned-modules.sh

.PHONY: check-decoupling
check-decoupling: ## Fail if the other project's name appears anywhere.
	hack/check-decoupling.sh

.PHONY: policy
policy: $(OPA) $(CONFTEST) ## The reviewers' tools on policies/: opa fmt, check, test; conftest; the sample CI workflow.
	@out=$$($(OPA) fmt -l policies); if [ -n "$$out" ]; then echo "opa fmt would change:"; echo "$$out"; exit 1; fi
	$(OPA) check --strict policies
	$(OPA) test policies/ -v | tail -n 1
	hack/check-conftest.sh $(CONFTEST)
	go run ./hack/reviewerpath --workflow docs/ci/policy.yaml --opa $(OPA) --conftest $(CONFTEST) \
	  --opa-version $(OPA_VERSION) --conftest-version $(CONFTEST_VERSION)

.PHONY: unit
unit: registry ## Unit tests (no control plane; the golden tests run the real registry).
	go test $(GO_TEST_FLAGS) -ldflags '$(GO_TEST_LDFLAGS)' $(UNIT_PKGS)

.PHONY: envtest
envtest: controlplane registry ## Integration suites against a real kube-apiserver and etcd (some with kube-controller-manager).
	go test $(GO_TEST_FLAGS) -ldflags '$(GO_TEST_LDFLAGS)' -timeout 25m ./test/envtest/...

# go-tests is unit and envtest in one go test: the go command links the
# next test binaries while the envtest suites wait on their API servers.
.PHONY: go-tests
go-tests: controlplane registry
	go test $(GO_TEST_FLAGS) -ldflags '$(GO_TEST_LDFLAGS)' -timeout 25m ./...

# On two cores a cold run is mostly compiling. The steps that leave a core
# idle run side by side: the pinned tools beside the control plane's
# compile, and conftest's compile beside the test suites, which mostly wait.
.PHONY: test
test: check-aligned-modules fmt-check check-decoupling ## Everything CI runs.
	$(MAKE) -j2 --output-sync=target controlplane registry $(CONTROLLER_GEN) $(STATICCHECK) $(OPA)
	$(MAKE) vet staticcheck check-generated
	$(MAKE) -j2 --output-sync=target policy go-tests
	@echo "make test: all checks passed"

.PHONY: bench
bench: controlplane registry ## Benchmarks; record the figures in BENCHMARKS.md.
	go test -run '^$$' -bench . -benchmem $$(go list ./... )

##@ Run

.PHONY: run
run: controlplane kubectl registry build ## Local control plane + operator; prints the KUBECONFIG line.
	$(BIN)/devcluster --root $(CURDIR)

.PHONY: clean
clean:
	rm -rf $(BIN)
