package cli

import (
	"bytes"
	"context"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Tests run in internal/cli; the repository root is two levels up.
var (
	repoRoot    = filepath.Join("..", "..")
	policiesDir = filepath.Join(repoRoot, "policies")
	vectorsDir  = filepath.Join(repoRoot, "test", "policy")
	samplesDir  = filepath.Join(repoRoot, "config", "samples")
)

// fixedNow is the clock a test's env reads when no --now or now is given.
var fixedNow = time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)

type result struct {
	code           int
	stdout, stderr string
}

// runCLI runs macrackctl in-process with stdin and a fixed clock.
func runCLI(t *testing.T, stdin string, args ...string) result {
	t.Helper()
	return runAt(t, fixedNow, stdin, args...)
}

// runAt runs macrackctl in-process with stdin and the clock at now.
func runAt(t *testing.T, now time.Time, stdin string, args ...string) result {
	t.Helper()
	var out, errOut bytes.Buffer
	e := env{stdin: strings.NewReader(stdin), stdout: &out, stderr: &errOut, now: func() time.Time { return now }}
	code := run(context.Background(), e, args)
	return result{code: code, stdout: out.String(), stderr: errOut.String()}
}

// expectation is what a table case asserts of a run.
type expectation struct {
	code int
	// stdout and stderr must contain each of these.
	stdout, stderr []string
	// and must not contain these (either stream).
	absent []string
}

func (x expectation) check(t *testing.T, r result) {
	t.Helper()
	if r.code != x.code {
		t.Errorf("exit code %d, want %d\nstdout:\n%s\nstderr:\n%s", r.code, x.code, r.stdout, r.stderr)
	}
	for _, s := range x.stdout {
		if !strings.Contains(r.stdout, s) {
			t.Errorf("stdout lacks %q:\n%s", s, r.stdout)
		}
	}
	for _, s := range x.stderr {
		if !strings.Contains(r.stderr, s) {
			t.Errorf("stderr lacks %q:\n%s", s, r.stderr)
		}
	}
	for _, s := range x.absent {
		if strings.Contains(r.stdout, s) || strings.Contains(r.stderr, s) {
			t.Errorf("output contains %q\nstdout:\n%s\nstderr:\n%s", s, r.stdout, r.stderr)
		}
	}
}

// noStackTrace are the marks of a Go panic, which no input may cause.
var noStackTrace = []string{"goroutine", "panic"}

func TestTheDispatcher(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		args []string
		want expectation
	}{
		{"help lists the commands and exits 0", []string{"help"},
			expectation{code: 0, stdout: []string{"policy", "version", "help"}}},
		{"--help is help too", []string{"--help"},
			expectation{code: 0, stdout: []string{"macrackctl <command>"}}},
		{"no command is a usage error on stderr", nil,
			expectation{code: 2, stderr: []string{"no command given", "Commands:"}}},
		{"an unknown command is a usage error", []string{"frobnicate"},
			expectation{code: 2, stderr: []string{`unknown command "frobnicate"`}}},
		{"policy --help documents every exit code", []string{"policy", "--help"},
			expectation{code: 0, stdout: []string{"Exit codes:", "0  every document allowed", "1  a policy denied", "2  usage error", "3  the policies themselves failed"}}},
		{"help policy check shows the check flags", []string{"help", "policy", "check"},
			expectation{code: 0, stdout: []string{"--inventory FILE", "--operation OP"}}},
		{"policy help eval shows the input shape", []string{"policy", "help", "eval"},
			expectation{code: 0, stdout: []string{"oldObject:", "inventory:"}}},
		{"policy without a subcommand is a usage error", []string{"policy"},
			expectation{code: 2, stderr: []string{"no subcommand given", "Subcommands:"}}},
		{"an unknown policy subcommand is a usage error", []string{"policy", "lint"},
			expectation{code: 2, stderr: []string{`unknown subcommand "lint"`, "macrackctl policy --help"}}},
		{"version names the embedded policies' revision", []string{"version"},
			expectation{code: 0, stdout: []string{"macrackctl ", "policies ", "embedded"}}},
		{"node retire --help says it cannot be undone", []string{"node", "retire", "--help"},
			expectation{code: 0, stdout: []string{"This cannot be undone", "status.unwipedDisks"}}},
		{"node retire wants one serial", []string{"node", "retire"},
			expectation{code: 2, stderr: []string{"want exactly one serial, got 0 arguments"}}},
		{"node retire with an unreadable kubeconfig says so", []string{"node", "retire", "C02XL0GHJGH5", "--kubeconfig", "/nonexistent/kubeconfig"},
			expectation{code: 2, stderr: []string{"loading the kubeconfig"}, absent: noStackTrace}},
		{"node enroll still wants its class", []string{"node", "enroll", "C02XL0GHJGH5"},
			expectation{code: 2, stderr: []string{"--class is required"}}},
		{"an unknown node subcommand is a usage error", []string{"node", "reboot"},
			expectation{code: 2, stderr: []string{`unknown subcommand "reboot"`}}},
		{"version takes no argument", []string{"version", "now"},
			expectation{code: 2, stderr: []string{`unexpected argument "now"`}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.want.check(t, runCLI(t, "", tc.args...))
		})
	}
}

func TestMainWritesToTheWritersItIsGiven(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := Main([]string{"help"}, &out, &errOut); code != 0 || !strings.Contains(out.String(), "Commands:") {
		t.Errorf("help: exit %d, stdout %q", code, out.String())
	}
	out.Reset()
	if code := Main([]string{"policy", "check"}, &out, &errOut); code != 2 || !strings.Contains(errOut.String(), "no manifests given") {
		t.Errorf("check without -f: exit %d, stderr %q", code, errOut.String())
	}
}

func TestFlagsMayFollowPositionalArguments(t *testing.T) {
	fs := newFlagSet("t")
	out := outputFlag(fs)
	pos, err := parseFlags(fs, "t", []string{"dir", "--output", "json", "--", "-x"}, io.Discard, "")
	if err != nil {
		t.Fatal(err)
	}
	if *out != formatJSON || len(pos) != 2 || pos[0] != "dir" || pos[1] != "-x" {
		t.Errorf("output %q, positional %q; want json and [dir -x]", *out, pos)
	}
	// Positive control: without "--", -x is a flag, and unknown.
	if _, err := parseFlags(newFlagSet("t"), "t", []string{"dir", "-x"}, io.Discard, ""); err == nil {
		t.Error("an unknown flag after a positional argument was accepted")
	}
}

// copyTree copies src into a new temporary directory, so that a test can
// break a copy of the policies.
func copyTree(t *testing.T, src string) string {
	t.Helper()
	dst := t.TempDir()
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		target := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(target, data, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
	return dst
}

// editFile replaces old by new in a file, failing if old is not there.
func editFile(t *testing.T, path, old, new string) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(data), old) {
		t.Fatalf("%s no longer contains %q; update this test", path, old)
	}
	if err := os.WriteFile(path, []byte(strings.Replace(string(data), old, new, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
}
