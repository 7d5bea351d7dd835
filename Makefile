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
ACTIONLINT_VERSION     := v1.7.12

CONTROLLER_GEN := $(BIN)/controller-gen-$(CONTROLLER_GEN_VERSION)
OPA            := $(BIN)/opa-$(OPA_VERSION)
CONFTEST       := $(BIN)/conftest-$(CONFTEST_VERSION)
STATICCHECK    := $(BIN)/staticcheck-$(STATICCHECK_VERSION)
ACTIONLINT     := $(BIN)/actionlint-$(ACTIONLINT_VERSION)
BUNDLECHECK    := $(BIN)/bundlecheck

# The release the OLM bundle and the operator image are of. The CSV and
# config/manager/manager.yaml name the image by this tag (its digest is pinned
# at release), so bundle/ does not change with every commit.
BUNDLE_VERSION := 0.1.0
IMG_TAG        := v$(BUNDLE_VERSION)
IMG_REPO       := ghcr.io/boualleiguie/macrack-operator
IMG            ?= $(IMG_REPO):$(IMG_TAG)
BUNDLE_IMG     ?= $(IMG_REPO)-bundle:$(IMG_TAG)
IMAGE_ARCH     ?= $(shell go env GOARCH)

GO_TEST_FLAGS ?= -count=1
# Test binaries are linked without symbol tables and DWARF: about a quarter
# less link time each, and nothing in CI reads them. Link flags only, so
# every compiled package is still the build cache's (BENCHMARKS.md, "make
# test's time").
GO_TEST_LDFLAGS ?= -s -w
# BG prefixes the CPU-heavy checks that make test runs beside the test
# suites (nice): they take the cores the suites leave idle, and do not slow
# the suites' timing-sensitive waits.
BG ?=
UNIT_PKGS      = $$(go list ./... | grep -v /test/envtest)
# make test's processes (compilers, test binaries, their API servers, etcd
# and helpers) collect garbage at GOGC=400 rather than 100: a sixth less CPU
# in the suites, for heaps up to five times their live size, which 24 GiB
# holds (BENCHMARKS.md, "make test's time").
TEST_GOGC ?= 400

.PHONY: all
all: build

##@ Tools (pinned; opa in the project's module graph, conftest and controller-gen in aligned ones of their own, staticcheck in its own)

# controller-gen is built in hack/controller-gen, whose go.mod holds every
# module it shares with the project at the project's version: k8s.io/api and
# the rest compile once (about 40 s of CPU less than its own module graph,
# cold). Its version is hack/controller-gen/go.mod's, which must equal
# CONTROLLER_GEN_VERSION.
$(CONTROLLER_GEN): hack/controller-gen/go.mod hack/controller-gen/go.sum
	@v=$$(cd hack/controller-gen && go list -m -f '{{.Version}}' sigs.k8s.io/controller-tools); \
	  if [ "$$v" != "$(CONTROLLER_GEN_VERSION)" ]; then echo "hack/controller-gen/go.mod has controller-tools $$v, the Makefile $(CONTROLLER_GEN_VERSION)"; exit 1; fi
	cd hack/controller-gen && go build -o $@ sigs.k8s.io/controller-tools/cmd/controller-gen

# opa is a tool of the project's own module (go.mod's tool directive): the
# CLI compiles against the OPA packages the policy engine already uses,
# once. The version is go.mod's, which must equal OPA_VERSION.
$(OPA): go.mod go.sum
	@v=$$(go list -m -f '{{.Version}}' github.com/open-policy-agent/opa); \
	  if [ "$$v" != "$(OPA_VERSION)" ]; then echo "go.mod has opa $$v, the Makefile $(OPA_VERSION)"; exit 1; fi
	go build -o $@ github.com/open-policy-agent/opa

# conftest is built in hack/conftest, whose go.mod holds every module it
# shares with the project at the project's version: OPA and the rest compile
# once (about 65 s of CPU less than its own module graph, cold). Its version
# is hack/conftest/go.mod's, which must equal CONFTEST_VERSION.
$(CONFTEST): hack/conftest/go.mod hack/conftest/go.sum
	@v=$$(cd hack/conftest && go list -m -f '{{.Version}}' github.com/open-policy-agent/conftest); \
	  if [ "$$v" != "$(CONFTEST_VERSION)" ]; then echo "hack/conftest/go.mod has conftest $$v, the Makefile $(CONFTEST_VERSION)"; exit 1; fi
	cd hack/conftest && $(BG) go build -o $@ \
	  -ldflags '-X github.com/open-policy-agent/conftest/internal/version.Version=$(CONFTEST_VERSION)' \
	  github.com/open-policy-agent/conftest

$(STATICCHECK):
	GOBIN=$(BIN)/.gobin-staticcheck go install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)
	mv $(BIN)/.gobin-staticcheck/staticcheck $@ && rm -rf $(BIN)/.gobin-staticcheck

# actionlint is built in hack/actionlint, a module of its own: none of its
# dependencies is in the project's build, and x/sys and x/sync, which are,
# are at the project's versions. Its version is hack/actionlint/go.mod's,
# which must equal ACTIONLINT_VERSION.
$(ACTIONLINT): hack/actionlint/go.mod hack/actionlint/go.sum
	@v=$$(cd hack/actionlint && go list -m -f '{{.Version}}' github.com/rhysd/actionlint); \
	  if [ "$$v" != "$(ACTIONLINT_VERSION)" ]; then echo "hack/actionlint/go.mod has actionlint $$v, the Makefile $(ACTIONLINT_VERSION)"; exit 1; fi
	cd hack/actionlint && go build -o $@ github.com/rhysd/actionlint/cmd/actionlint

# bin/opa and bin/conftest name the pinned builds, so that a reviewer with
# bin/ on PATH runs docs/compliance.md's commands as its CI workflow does.
.PHONY: tools
tools: $(CONTROLLER_GEN) $(OPA) $(CONFTEST) $(STATICCHECK) $(ACTIONLINT)
	ln -sf $(notdir $(OPA)) $(BIN)/opa
	ln -sf $(notdir $(CONFTEST)) $(BIN)/conftest

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
controlplane: ## Build kube-apiserver, etcd, kube-controller-manager and kubectl into bin/k8s from the Go module proxy.
	hack/controlplane/build.sh $(K8S_BIN) kube-apiserver etcd kube-controller-manager kubectl

.PHONY: kubectl
kubectl:
	hack/controlplane/build.sh $(K8S_BIN) kubectl

.PHONY: registry
registry: ## Build the CNCF Distribution registry (filesystem storage) into bin/registry from the Go module proxy.
	hack/registry/build.sh $(BIN)/registry

.PHONY: nats
nats: ## Build nats-server (JetStream) into bin/nats-server from the Go module proxy: the audit stream's sink in make run and the tests.
	hack/nats/build.sh $(BIN)/nats-server

##@ Build

.PHONY: build
build: ## Build every binary into bin/.
	@. hack/lib/buildstep.sh; cold=; [ -x $(BIN)/operator ] || cold=1; \
	  [ -z "$$cold" ] || step_begin $(BIN)/.build-seconds "build: the operator, agents and macrackctl" "about 45 s after the control plane, 2 cores"; \
	  echo go build -o $(BIN)/ ./cmd/... ./hack/devcluster; \
	  go build -o $(BIN)/ ./cmd/... ./hack/devcluster; \
	  [ -z "$$cold" ] || step_end $(BIN)/.build-seconds "build:"

##@ OLM bundle and images (no Docker)

.PHONY: bundle
bundle: ## The OLM bundle in bundle/ (CSV, CRDs, roles, annotations) from config/; commit it.
	go run ./hack/bundle --root $(CURDIR) --out bundle --version $(BUNDLE_VERSION) --image $(IMG)

.PHONY: bundlecheck
bundlecheck: ## Build the bundle validator (the operator framework's validators, hack/bundlecheck) into bin/bundlecheck.
	hack/bundlecheck/build.sh $(BUNDLECHECK)

# The committed bundle names the release's image, whatever IMG says.
.PHONY: check-bundle
check-bundle: bundlecheck ## Fail if bundle/ is not what `make bundle` writes, or if a validator reports an error or a warning.
	@tmp=$$(mktemp -d); trap 'rm -rf "$$tmp"' EXIT; \
	  go run ./hack/bundle --root $(CURDIR) --out "$$tmp" --version $(BUNDLE_VERSION) --image $(IMG_REPO):$(IMG_TAG); \
	  if ! diff -ru bundle "$$tmp"; then echo "bundle/ is stale: run 'make bundle' and commit it"; exit 1; fi; \
	  echo "bundle/ is current"
	$(BUNDLECHECK) bundle

.PHONY: image
image: ## The operator image (static binary, empty base) as an OCI layout in bin/image/; IMAGE_ARCH=arm64 cross-builds, PUSH=1 pushes it to IMG.
	mkdir -p $(BIN)/image
	CGO_ENABLED=0 GOOS=linux GOARCH=$(IMAGE_ARCH) go build -trimpath -ldflags '-s -w' \
	  -o $(BIN)/image/operator-linux-$(IMAGE_ARCH) ./cmd/operator
	cd hack/image && go run . --binary $(BIN)/image/operator-linux-$(IMAGE_ARCH) --arch $(IMAGE_ARCH) \
	  --version $(IMG_TAG) --revision "$$(git -C $(CURDIR) rev-parse HEAD 2>/dev/null || true)" \
	  --tag $(IMG) --output $(BIN)/image/macrack-operator-linux-$(IMAGE_ARCH).oci $(if $(PUSH),--push $(IMG))

.PHONY: bundle-image
bundle-image: ## The OLM bundle image of bundle/ as an OCI layout in bin/image/; PUSH=1 pushes it to BUNDLE_IMG.
	cd hack/image && go run . --bundle $(CURDIR)/bundle --arch $(IMAGE_ARCH) \
	  --tag $(BUNDLE_IMG) --output $(BIN)/image/macrack-operator-bundle.oci $(if $(PUSH),--push $(BUNDLE_IMG))

.PHONY: image-test
image-test: registry ## The image builder's tests: both images pushed to a real registry and read back.
	cd hack/image && go test $(GO_TEST_FLAGS) -ldflags '$(GO_TEST_LDFLAGS)' ./...

##@ Checks and tests

.PHONY: fmt-check
fmt-check:
	@out=$$(find . -name '*.go' -not -path './bin/*' -not -path './.git/*' | xargs gofmt -l); \
	  if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

.PHONY: vet
vet:
	go vet ./...

# staticcheck analyses every dependency for facts, and half its CPU is
# garbage collection at the default GOGC: 800 takes a third less CPU
# (1.6 GB peak rather than 0.5).
.PHONY: staticcheck
staticcheck: $(STATICCHECK) ## staticcheck on every package.
	GOGC=800 $(BG) $(STATICCHECK) ./...

.PHONY: check-generated
check-generated: $(CONTROLLER_GEN) ## Fail if `make generate manifests` changes any file.
	hack/check-generated.sh $(MAKE) generate manifests

.PHONY: check-aligned-modules
check-aligned-modules: ## Fail if the project and hack/{controlplane,registry,bundlecheck,image} build a shared module at two versions.
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

# The workflows actionlint checks: the Mac side's, which no runner here can
# run, and the reviewers' sample. shellcheck and pyflakes are off, so that
# the result does not depend on what the machine has installed.
WORKFLOWS := .github/workflows/macos.yml docs/ci/policy.yaml

.PHONY: actionlint
actionlint: $(ACTIONLINT) ## Lint the GitHub Actions workflows with actionlint; a broken copy must fail.
	$(ACTIONLINT) -shellcheck= -pyflakes= $(WORKFLOWS)
	@tmp=$$(mktemp -d); trap 'rm -rf "$$tmp"' EXIT; \
	  sed 's/runs-on: macos-15$$/runs-on: macos-15-arm99/' .github/workflows/macos.yml > "$$tmp/macos.yml"; \
	  if $(ACTIONLINT) -shellcheck= -pyflakes= -no-color "$$tmp/macos.yml" > "$$tmp/out" 2>&1; then \
	    echo "actionlint passed a workflow with an unknown runner label"; exit 1; fi; \
	  grep -q 'label "macos-15-arm99" is unknown' "$$tmp/out" || { cat "$$tmp/out"; exit 1; }; \
	  echo "actionlint: $(WORKFLOWS) pass; the control with an unknown runner label fails"

# darwincheck type-checks every package, test files included, for
# darwin/arm64 with cgo. It needs vz's source, which no Linux build loads:
# it downloads it first, as go mod download does.
.PHONY: darwincheck
darwincheck: ## Type-check every darwin file for darwin/arm64 against the real vz and x/sys APIs.
	go mod download github.com/Code-Hex/vz/v3
	$(BG) go run ./hack/darwincheck ./...

.PHONY: unit
unit: registry nats ## Unit tests (no control plane; the golden tests run the real registry).
	go test $(GO_TEST_FLAGS) -ldflags '$(GO_TEST_LDFLAGS)' $(UNIT_PKGS)

.PHONY: envtest
envtest: controlplane registry nats ## Integration suites against a real kube-apiserver and etcd (some with kube-controller-manager).
	go test $(GO_TEST_FLAGS) -ldflags '$(GO_TEST_LDFLAGS)' -timeout 25m ./test/envtest/...

# go-tests is unit and envtest in one go test: the go command links the
# next test binaries while the envtest suites wait on their API servers.
# Four packages at once, the longest suites first (go test starts packages in
# the order given), so the run is not their tail. -vet=off: make test runs
# all of go vet on the same packages.
# docs runs the guides on a make run cluster (about 3 minutes, most of it
# waiting on the sim VMs and jobs).
SLOW_SUITES := $(addprefix ./test/envtest/,quarantine scale images instances leases docs)

.PHONY: go-tests
go-tests: controlplane registry nats
	go test $(GO_TEST_FLAGS) -ldflags '$(GO_TEST_LDFLAGS)' -vet=off -p 4 -timeout 25m $(SLOW_SUITES) ./...

# On two cores a cold run is CPU-bound: what counts is CPU, and no idle core.
# The tools build beside the control plane (conftest too: the doc suite's
# reviewer clone copies it, and would compile it again). vet, which compiles what the
# tests need, waits for it: two go commands compiling a package at once both
# compile it. check-generated rewrites files the others read, so it runs
# alone. Then the suites, which mostly wait on their API servers, run beside
# the CPU-heavy rest: staticcheck.
.PHONY: test
test go-tests unit envtest: export GOGC = $(TEST_GOGC)
test: check-aligned-modules fmt-check check-decoupling ## Everything CI runs.
	$(MAKE) -j2 --output-sync=target controlplane registry nats $(CONTROLLER_GEN) $(STATICCHECK) $(OPA) $(CONFTEST) bundlecheck $(ACTIONLINT)
	$(MAKE) vet check-generated
	$(MAKE) -j3 --output-sync=target go-tests check-bundle staticcheck policy image-test darwincheck actionlint BG='nice -n 10'
	@echo "make test: all checks passed"

.PHONY: bench
bench: controlplane registry nats ## Benchmarks; record the figures in BENCHMARKS.md.
	go test -run '^$$' -bench . -benchmem $$(go list ./... )

# OBJECTS_COUNT is how many times bench-objects runs each benchmark.
OBJECTS_COUNT ?= 5

.PHONY: bench-objects
bench-objects: controlplane ## Issue 17: one admission decision and one reconcile of each controller, 10 vs 1,000 chassis.
	go test -run '^$$' -bench '^BenchmarkObjects$$' -benchmem -count $(OBJECTS_COUNT) -timeout 90m ./test/envtest/bench/
	go test -run '^$$' -bench '^BenchmarkExporterReconcile$$' -benchmem -count $(OBJECTS_COUNT) ./internal/reconcile/audit/

# N is the fleet benchmark's size: minis, tenants and leases.
N ?= 100
# WAVES=cold stops the fleet benchmark after its cold wave (the growth table's).
WAVES ?= all

.PHONY: bench-fleet
bench-fleet: controlplane registry nats ## The fleet at scale (N minis, N leases, 2N instances): cold, release and warm waves; figures go in BENCHMARKS.md.
	FLEET_N=$(N) FLEET_WAVES=$(WAVES) go test -run '^$$' -bench BenchmarkFleet -benchtime=1x -timeout 180m ./test/envtest/fleet/

.PHONY: bench-rbac
bench-rbac: controlplane ## Issue 39: a tenant's request's RBAC cost (VisitRulesFor's share of kube-apiserver CPU), 10 vs 1,000 agents, per-agent vs group bindings.
	go test -run '^$$' -bench '^BenchmarkTenantAuthorization$$' -benchtime=1x -count=3 -timeout 30m ./test/envtest/rbaccost/

.PHONY: bench-runner
bench-runner: controlplane registry nats ## Issue 18: a GitLabRunner on one sim chassis: queue-to-start warm and cold, jobs per hour.
	go test -run '^$$' -bench BenchmarkGitLabRunner -benchtime=1x -timeout 30m ./test/envtest/gitlabrunner/

##@ Run

# FLEET is how many simulated Mac minis `make run` enrolls and runs;
# JETSTREAM how many nats-servers hold the audit stream: 1, or 3 for a
# JetStream cluster with the stream at three replicas.
FLEET ?= 4
JETSTREAM ?= 1

.PHONY: run
run: controlplane kubectl registry nats build ## Local control plane + operator + FLEET sim minis (4) + JETSTREAM nats-servers (1, or 3); prints the KUBECONFIG line.
	$(BIN)/devcluster --root $(CURDIR) --fleet $(FLEET) --jetstream $(JETSTREAM)

.PHONY: clean
clean:
	rm -rf $(BIN)
