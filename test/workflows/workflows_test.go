// Package workflows holds the GitHub Actions workflows of the repository
// (and the sample in docs/ci) to what actionlint does not check: every
// action pinned by commit SHA, and the macOS workflow running the darwin
// tests that hack/darwincheck type-checks on Linux.
package workflows

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

const root = "../.."

type workflow struct {
	Jobs map[string]struct {
		RunsOn string `json:"runs-on"`
		Steps  []struct {
			Name string `json:"name"`
			Uses string `json:"uses"`
			Run  string `json:"run"`
		} `json:"steps"`
	} `json:"jobs"`
}

func workflowFiles(t *testing.T) []string {
	t.Helper()
	var files []string
	for _, pattern := range []string{".github/workflows/*.yml", ".github/workflows/*.yaml", "docs/ci/*.yaml"} {
		m, err := filepath.Glob(filepath.Join(root, pattern))
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, m...)
	}
	if len(files) < 2 {
		t.Fatalf("found %q: the workflows are missing", files)
	}
	return files
}

func read(t *testing.T, path string) (string, workflow) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var w workflow
	if err := yaml.Unmarshal(b, &w); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return string(b), w
}

var (
	pinned = regexp.MustCompile(`^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+(/[A-Za-z0-9_./-]+)?@[0-9a-f]{40}$`)
	// The tag a SHA stands for, for the reader and for updates.
	usesLine = regexp.MustCompile(`(?m)^\s*(?:-\s+)?uses:\s*(\S+)(.*)$`)
)

func TestEveryActionIsPinnedByCommitSHA(t *testing.T) {
	for _, f := range workflowFiles(t) {
		text, w := read(t, f)
		n := 0
		for job, j := range w.Jobs {
			for _, s := range j.Steps {
				if s.Uses == "" {
					continue
				}
				n++
				if !pinned.MatchString(s.Uses) {
					t.Errorf("%s: job %s uses %q, not pinned by a full commit SHA", f, job, s.Uses)
				}
			}
		}
		lines := usesLine.FindAllStringSubmatch(text, -1)
		if len(lines) != n {
			t.Errorf("%s: %d uses lines, %d steps with uses", f, len(lines), n)
		}
		for _, l := range lines {
			if !regexp.MustCompile(`^\s+# v[0-9]`).MatchString(l[2]) {
				t.Errorf("%s: %q names no version in a comment", f, strings.TrimSpace(l[0]))
			}
		}
	}
}

func TestTheMacOSWorkflowRunsTheDarwinTestsOnAppleSilicon(t *testing.T) {
	text, w := read(t, filepath.Join(root, ".github/workflows/macos.yml"))
	job, ok := w.Jobs["mac"]
	if !ok {
		t.Fatal("no job mac")
	}
	v, ok := strings.CutPrefix(job.RunsOn, "macos-")
	if n, err := strconv.Atoi(v); !ok || err != nil || n < 15 {
		t.Errorf("runs-on %q: want a hosted Apple-silicon runner, macos-15 or later", job.RunsOn)
	}
	for _, f := range regexp.MustCompile(`deploy/macos/[A-Za-z0-9_.-]+`).FindAllString(text, -1) {
		if _, err := os.Stat(filepath.Join(root, f)); err != nil {
			t.Errorf("the workflow uses %s: %v", f, err)
		}
	}
	var tests string
	for _, s := range job.Steps {
		if s.Name == "Darwin tests" {
			tests = s.Run
		}
	}
	pkgs := regexp.MustCompile(`internal/agent/[a-z/]+`).FindAllString(tests, -1)
	if len(pkgs) < 2 {
		t.Fatalf("the Darwin tests step runs %q", pkgs)
	}
	// Each package it tests has darwin test files, which make test's
	// darwincheck type-checks on Linux.
	for _, p := range pkgs {
		files, err := filepath.Glob(filepath.Join(root, p, "*_test.go"))
		if err != nil {
			t.Fatal(err)
		}
		darwin := 0
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			if strings.HasPrefix(string(b), "//go:build darwin") || strings.HasSuffix(f, "_darwin_test.go") {
				darwin++
			}
		}
		if darwin == 0 {
			t.Errorf("%s has no darwin test file for the workflow to run", p)
		}
	}
}
