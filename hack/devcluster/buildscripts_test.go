package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// fakeGo is a go command that builds nothing: `go build -o DIR/ ./a ./b`
// writes DIR/a and DIR/b and logs "built a" to $FAKE_GO_LOG; `go version`
// answers a fixed toolchain. The build scripts' decisions are tested with
// it in a scratch directory, never against the shared bin/.
const fakeGo = `#!/usr/bin/env bash
set -eu
case "$1" in
version) echo "go version go1.99.0 linux/amd64" ;;
build)
  shift; out=
  while [ $# -gt 0 ]; do
    case "$1" in
    -o) out=$2; shift 2 ;;
    -ldflags) shift 2 ;;
    *) t=$(basename "$1"); [ "$t" = . ] && t=registry
       if [ "${out%/}" != "$out" ]; then f="$out$t"; else f="$out"; t=$(basename "$out" .tmp); fi
       printf '#!/bin/sh\n' > "$f"; chmod +x "$f"; echo "built $t" >> "$FAKE_GO_LOG"; shift ;;
    esac
  done ;;
*) echo "fake go: $*" >&2; exit 2 ;;
esac
`

// scratchControlPlane copies hack/controlplane's script and inputs, and
// hack/lib, into a scratch tree, so that the test may change an input.
func scratchControlPlane(t *testing.T) (script, dir string) {
	t.Helper()
	root := t.TempDir()
	for _, f := range []string{
		"controlplane/build.sh", "controlplane/go.mod", "controlplane/go.sum",
		"controlplane/kube-apiserver/main.go", "controlplane/etcd/main.go",
		"controlplane/kube-controller-manager/main.go", "controlplane/kubectl/main.go",
		"lib/buildstep.sh",
	} {
		b, err := os.ReadFile(filepath.Join("..", f))
		if err != nil {
			t.Fatal(err)
		}
		dst := filepath.Join(root, "hack", f)
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(dst, b, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return filepath.Join(root, "hack", "controlplane", "build.sh"), filepath.Join(root, "hack", "controlplane")
}

type buildRun struct {
	t      *testing.T
	goDir  string
	goLog  string
	script string
}

func newBuildRun(t *testing.T, script string) *buildRun {
	t.Helper()
	goDir := t.TempDir()
	if err := os.WriteFile(filepath.Join(goDir, "go"), []byte(fakeGo), 0o755); err != nil {
		t.Fatal(err)
	}
	return &buildRun{t: t, goDir: goDir, goLog: filepath.Join(goDir, "log"), script: script}
}

// run runs the script and returns its output and what the fake go built
// during it.
func (b *buildRun) run(env []string, args ...string) (out string, built []string) {
	b.t.Helper()
	_ = os.Remove(b.goLog)
	cmd := exec.Command(b.script, args...)
	cmd.Env = append(os.Environ(), append([]string{"GO=" + filepath.Join(b.goDir, "go"), "FAKE_GO_LOG=" + b.goLog}, env...)...)
	o, err := cmd.CombinedOutput()
	if err != nil {
		b.t.Fatalf("%s %v: %v\n%s", b.script, args, err, o)
	}
	if log, err := os.ReadFile(b.goLog); err == nil {
		for _, l := range strings.Split(strings.TrimSpace(string(log)), "\n") {
			built = append(built, strings.TrimPrefix(l, "built "))
		}
	}
	return string(o), built
}

func TestControlPlaneBuildDecidesOnContentNotTimestamps(t *testing.T) {
	script, dir := scratchControlPlane(t)
	b := newBuildRun(t, script)
	out := filepath.Join(t.TempDir(), "k8s")

	o, built := b.run(nil, out, "kube-apiserver", "etcd")
	if strings.Join(built, ",") != "kube-apiserver,etcd" {
		t.Fatalf("a cold build built %v, want kube-apiserver and etcd\n%s", built, o)
	}
	if !strings.Contains(o, "a first build here; about") {
		t.Errorf("a cold build with no record does not say so:\n%s", o)
	}
	if _, err := os.Stat(filepath.Join(out, ".build-seconds.kube-apiserver+etcd")); err != nil {
		t.Errorf("the build's duration is not recorded beside its outputs: %v", err)
	}

	// Unchanged inputs: nothing builds.
	if o, built := b.run(nil, out, "kube-apiserver", "etcd"); len(built) != 0 || strings.Count(o, "is current") != 2 {
		t.Fatalf("a second run built %v:\n%s", built, o)
	}

	// A copy of the outputs (new mtimes, older than freshly touched inputs,
	// as in a fresh clone) is current.
	copied := filepath.Join(t.TempDir(), "k8s")
	if err := exec.Command("cp", "-r", out, copied).Run(); err != nil {
		t.Fatal(err)
	}
	past := time.Now().Add(-time.Hour)
	for _, f := range []string{"kube-apiserver", "etcd"} {
		if err := os.Chtimes(filepath.Join(copied, f), past, past); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{"go.mod", "go.sum", "build.sh", "etcd/main.go", "../lib/buildstep.sh"} {
		if err := os.Chtimes(filepath.Join(dir, f), time.Now(), time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	if o, built := b.run(nil, copied, "kube-apiserver", "etcd"); len(built) != 0 {
		t.Fatalf("a copied bin/k8s, older than its inputs' mtimes, was rebuilt (%v):\n%s", built, o)
	}

	// A changed input that only etcd reads: only etcd builds, and the step
	// says how long it took last time.
	appendTo(t, filepath.Join(dir, "etcd", "main.go"), "\n// changed\n")
	if o, _ := b.run([]string{"BUILD_DRY_RUN=1"}, copied, "kube-apiserver", "etcd"); !strings.Contains(o, "would build etcd") {
		t.Errorf("the dry run does not say it would build etcd:\n%s", o)
	}
	if _, built := b.run([]string{"BUILD_DRY_RUN=1"}, copied, "kube-apiserver", "etcd"); len(built) != 0 {
		t.Errorf("the dry run built %v", built)
	}
	if o, built := b.run(nil, copied, "kube-apiserver", "etcd"); strings.Join(built, ",") != "etcd" {
		t.Fatalf("a changed etcd/main.go built %v, want etcd only:\n%s", built, o)
	}

	// A changed shared input (go.sum): both build, with last time's figure.
	appendTo(t, filepath.Join(dir, "go.sum"), "example.com/x v1.0.0 h1:AAAA=\n")
	o, built = b.run(nil, copied, "kube-apiserver", "etcd")
	if strings.Join(built, ",") != "kube-apiserver,etcd" {
		t.Fatalf("a changed go.sum built %v, want both:\n%s", built, o)
	}
	if !strings.Contains(o, "on this machine last time") {
		t.Errorf("a rebuild does not say how long it took last time:\n%s", o)
	}
}

// A binary from before the stamps, newer than its inputs, is adopted once;
// one older than an input is rebuilt.
func TestControlPlaneBuildAdoptsUnstampedBinaries(t *testing.T) {
	script, _ := scratchControlPlane(t)
	b := newBuildRun(t, script)
	out := t.TempDir()
	for _, f := range []string{"kubectl", "etcd"} {
		if err := os.WriteFile(filepath.Join(out, f), []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	past := time.Now().Add(-time.Hour)
	if err := os.Chtimes(filepath.Join(out, "etcd"), past, past); err != nil {
		t.Fatal(err)
	}
	o, built := b.run(nil, out, "kubectl", "etcd")
	if strings.Join(built, ",") != "etcd" {
		t.Fatalf("built %v, want etcd only (kubectl is newer than its inputs):\n%s", built, o)
	}
	if _, err := os.Stat(filepath.Join(out, ".kubectl.inputs")); err != nil {
		t.Errorf("the adopted kubectl has no stamp: %v", err)
	}
}

func appendTo(t *testing.T, path, s string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(s); err != nil {
		t.Fatal(err)
	}
}
