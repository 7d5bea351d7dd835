package main

import (
	"errors"
	"os"
	"regexp"
	"strings"
	"testing"
)

// makeVar reads a variable of the Makefile, as make passes it by flag.
func makeVar(t *testing.T, name string) string {
	t.Helper()
	data, err := os.ReadFile("../../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^` + name + `\s*:=\s*(\S+)`).FindSubmatch(data)
	if m == nil {
		t.Fatalf("the Makefile sets no %s", name)
	}
	return string(m[1])
}

func sample(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile("../../docs/ci/policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

func want(t *testing.T) pins {
	t.Helper()
	goMod, err := os.ReadFile("../../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	return pins{opa: makeVar(t, "OPA_VERSION"), conftest: makeVar(t, "CONFTEST_VERSION"), goMod: goMod}
}

func check(wf string, w pins) error {
	p, err := parseWorkflow([]byte(wf))
	if err != nil {
		return err
	}
	return checkPins(p, w)
}

func TestSamplePins(t *testing.T) {
	if err := check(sample(t), want(t)); err != nil {
		t.Fatalf("docs/ci/policy.yaml:\n%v", err)
	}
}

// Each edit of the sample must be caught, with a message naming the pin.
func TestWrongPins(t *testing.T) {
	w := want(t)
	for _, tc := range []struct{ name, old, new, msg string }{
		{"opa env", `OPA_VERSION: "` + w.opa + `"`, `OPA_VERSION: "v1.22.2"`, "pinned to v1.22.2, but OPA_VERSION in the Makefile is " + w.opa},
		{"conftest literal", `conftest@"$CONFTEST_VERSION"`, `conftest@v0.70.0`, "pinned to v0.70.0, but CONFTEST_VERSION"},
		{"conftest unpinned", `conftest@"$CONFTEST_VERSION"`, `conftest@latest`, "pinned to latest"},
		{"opa unversioned", `opa@"$OPA_VERSION"`, `opa`, "has no @version"},
		{"undefined variable", `opa@"$OPA_VERSION"`, `opa@"$OPA"`, "OPA is not defined"},
		{"go older than go.mod", `GO_VERSION: "1.26.8"`, `GO_VERSION: "1.25.9"`, "not a go1.26 release"},
		{"go minor only", `GO_VERSION: "1.26.8"`, `GO_VERSION: "1.26"`, "not a release such as"},
		{"go as a number", `GO_VERSION: "1.26.8"`, `GO_VERSION: 1.26`, "not a string"},
		{"action by tag", `actions/checkout@3d3c42e5aac5ba805825da76410c181273ba90b1`, `actions/checkout@v7`, "not pinned to a full commit SHA"},
		{"macrackctl branch", `MACRACKCTL_VERSION: "a6af6603a71fa875fac09efcc3d63970484f40a0"`, `MACRACKCTL_VERSION: "main"`, "neither a release tag"},
		{"macrackctl missing", `go install github.com/boualleiguie/macrack-operator/cmd/macrackctl@"$MACRACKCTL_VERSION"`, ``, "installed 0 times"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wf := sample(t)
			if !strings.Contains(wf, tc.old) {
				t.Fatalf("the sample no longer holds %q; update the test", tc.old)
			}
			err := check(strings.Replace(wf, tc.old, tc.new, 1), w)
			if err == nil || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("got %v, want an error containing %q", err, tc.msg)
			}
		})
	}
}

func TestUnknownRef(t *testing.T) {
	w := want(t)
	w.resolveRef = func(ref string) error { return errors.New(ref + " is not a commit") }
	if err := check(sample(t), w); err == nil || !strings.Contains(err.Error(), "is not a commit") {
		t.Fatalf("got %v, want the ref refused", err)
	}
}

func TestGoToolchainLine(t *testing.T) {
	goMod := []byte("module m\n\ngo 1.26.0\n\ntoolchain go1.26.7\n")
	if err := checkGo("1.26.8", goMod); err == nil || !strings.Contains(err.Error(), "toolchain is go1.26.7") {
		t.Fatalf("got %v, want the toolchain line enforced", err)
	}
	if err := checkGo("1.26.7", goMod); err != nil {
		t.Fatal(err)
	}
}

// The structure the check relies on: a step it would not run is refused.
func TestUnknownStep(t *testing.T) {
	wf := strings.Replace(sample(t), "id: opa-test", "id: opa-tests", 1)
	if err := check(wf, want(t)); err == nil || !strings.Contains(err.Error(), "neither an install step") {
		t.Fatalf("got %v, want the unknown step refused", err)
	}
	wf = strings.Replace(sample(t), `"$MANIFESTS"`, `${{ env.MANIFESTS }}`, 1)
	if err := check(wf, want(t)); err == nil || !strings.Contains(err.Error(), "expression") {
		t.Fatalf("got %v, want the expression refused", err)
	}
}
