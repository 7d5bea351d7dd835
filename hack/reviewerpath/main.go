// Command reviewerpath keeps docs/ci/policy.yaml, the sample workflow for
// compliance reviewers, true. It checks the workflow's pinned versions
// against the Makefile's and go.mod's, then runs the workflow's policy
// steps, as written, in a scratch directory laid out as a reviewer's
// repository: on compliant manifests every step must pass and leave a JUnit
// report with no failure; on one violating manifest conftest and macrackctl
// must fail and name the rule. The install steps are checked, not run: the
// pinned tools are given by flag and macrackctl is built from this tree.
package main

import (
	"bytes"
	"context"
	"encoding/xml"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

type config struct {
	root, workflow, policies string
	opa, conftest            string
	opaVersion, conftestVer  string
	allow                    []string
	deny, denyRule, junit    string
	keep                     bool
	stepTimeout              time.Duration
	stdout                   io.Writer
	manifestsVar             string
}

// path is a flag's path, relative to the repository root unless absolute.
func (c config) path(p string) string {
	if filepath.IsAbs(p) {
		return p
	}
	return filepath.Join(c.root, p)
}

type list []string

func (l *list) String() string     { return strings.Join(*l, ",") }
func (l *list) Set(s string) error { *l = append(*l, s); return nil }

func main() {
	c := config{stdout: os.Stdout, manifestsVar: "MANIFESTS"}
	var allow list
	flag.StringVar(&c.root, "root", ".", "the repository root")
	flag.StringVar(&c.workflow, "workflow", "docs/ci/policy.yaml", "the sample workflow")
	flag.StringVar(&c.policies, "policies", "policies", "the policies folder copied into the reviewer's repository")
	flag.StringVar(&c.opa, "opa", "", "the pinned opa binary")
	flag.StringVar(&c.conftest, "conftest", "", "the pinned conftest binary")
	flag.StringVar(&c.opaVersion, "opa-version", "", "the Makefile's OPA_VERSION")
	flag.StringVar(&c.conftestVer, "conftest-version", "", "the Makefile's CONFTEST_VERSION")
	flag.Var(&allow, "allow", "a compliant manifest, or a directory of them (default test/conftest/allow and config/samples); repeatable")
	flag.StringVar(&c.deny, "deny", "test/conftest/deny/lease-23h.yaml", "the violating manifest of the negative control")
	flag.StringVar(&c.denyRule, "deny-rule", "lease.floor", "the rule that must deny it")
	flag.StringVar(&c.junit, "junit", "macrack-policy.xml", "the JUnit report the macrackctl step writes")
	flag.BoolVar(&c.keep, "keep", false, "keep the scratch directory")
	flag.DurationVar(&c.stepTimeout, "step-timeout", 5*time.Minute, "the longest one step may run")
	flag.Parse()
	c.allow = allow
	if len(c.allow) == 0 {
		c.allow = []string{"test/conftest/allow", "config/samples"}
	}
	for name, v := range map[string]string{"--opa": c.opa, "--conftest": c.conftest, "--opa-version": c.opaVersion, "--conftest-version": c.conftestVer} {
		if v == "" {
			fmt.Fprintf(os.Stderr, "reviewerpath: %s is required\n", name)
			os.Exit(2)
		}
	}
	if err := run(context.Background(), c); err != nil {
		fmt.Fprintf(os.Stderr, "reviewerpath: %s: %v\n", c.workflow, err)
		os.Exit(1)
	}
}

func run(ctx context.Context, c config) error {
	data, err := os.ReadFile(c.path(c.workflow))
	if err != nil {
		return err
	}
	p, err := parseWorkflow(data)
	if err != nil {
		return err
	}
	goMod, err := os.ReadFile(c.path("go.mod"))
	if err != nil {
		return err
	}
	if err := checkPins(p, pins{opa: c.opaVersion, conftest: c.conftestVer, goMod: goMod, resolveRef: gitRef(c.root)}); err != nil {
		return fmt.Errorf("pins:\n%w", err)
	}
	fmt.Fprintf(c.stdout, "reviewerpath: %s pins go %s, opa %s, conftest %s, macrackctl %s, %d actions by SHA\n",
		c.workflow, p.pinned["go"], p.pinned[opaModule], p.pinned[conftestModule], p.pinned[macrackctlModule], len(p.actions))
	mstep := stepByID(p, "macrackctl")
	if !strings.Contains(mstep.Run, c.junit) {
		return fmt.Errorf("%s does not write %s", mstep.label(), c.junit)
	}

	tmp, err := os.MkdirTemp("", "reviewerpath-")
	if err != nil {
		return err
	}
	if c.keep {
		fmt.Fprintf(c.stdout, "reviewerpath: scratch directory %s\n", tmp)
	} else {
		defer os.RemoveAll(tmp)
	}
	bin, err := tools(ctx, c, tmp)
	if err != nil {
		return err
	}

	// Positive control: every policy step passes on compliant manifests.
	repo, err := reviewerRepo(c, p, filepath.Join(tmp, "compliant"), c.allow)
	if err != nil {
		return err
	}
	for _, s := range p.policy {
		out, code, err := runStep(ctx, c, p, s, repo, bin)
		if err != nil {
			return err
		}
		if code != 0 {
			return stepError(s, "compliant manifests", fmt.Sprintf("exit status %d, want 0", code), out)
		}
		fmt.Fprintf(c.stdout, "ok   %-26s compliant manifests: %s\n", s.Name, lastLine(out))
	}
	r, err := readJUnit(filepath.Join(repo, c.junit))
	switch {
	case err != nil:
		return fmt.Errorf("compliant manifests: %s: %w", mstep.label(), err)
	case r.Tests == 0 || r.Failures != 0 || r.Errors != 0 || r.failureElems != 0:
		return fmt.Errorf("compliant manifests: %s: %s has %d tests, %d failures, %d errors; want tests and no failure",
			mstep.label(), c.junit, r.Tests, r.Failures, r.Errors)
	}
	fmt.Fprintf(c.stdout, "ok   %-26s %s: %d tests, 0 failures\n", "JUnit report", c.junit, r.Tests)

	// Negative control: the steps that judge manifests must deny one
	// violating manifest, by exit status 1 (a denial, not a usage error),
	// and say which rule. opa test reads no manifest and is not rerun.
	repo, err = reviewerRepo(c, p, filepath.Join(tmp, "violating"), []string{c.deny})
	if err != nil {
		return err
	}
	for _, id := range []string{"conftest", "macrackctl"} {
		s := stepByID(p, id)
		out, code, err := runStep(ctx, c, p, s, repo, bin)
		if err != nil {
			return err
		}
		if code != 1 || !strings.Contains(out, c.denyRule) {
			return stepError(s, "violating manifest "+filepath.Base(c.deny),
				fmt.Sprintf("exit status %d; want 1 and output naming %s", code, c.denyRule), out)
		}
		fmt.Fprintf(c.stdout, "ok   %-26s violating manifest: exit 1, names %s\n", s.Name, c.denyRule)
	}
	raw, _ := os.ReadFile(filepath.Join(repo, c.junit))
	r, err = readJUnit(filepath.Join(repo, c.junit))
	switch {
	case err != nil:
		return fmt.Errorf("violating manifest: %s: %w", mstep.label(), err)
	case r.Failures == 0 || r.failureElems == 0 || !bytes.Contains(raw, []byte(c.denyRule)):
		return fmt.Errorf("violating manifest: %s has %d failures; want one naming %s:\n%s", c.junit, r.Failures, c.denyRule, raw)
	}
	fmt.Fprintf(c.stdout, "ok   %-26s %s: %d failure, names %s\n", "JUnit report", c.junit, r.Failures, c.denyRule)
	fmt.Fprintf(c.stdout, "reviewerpath: %s: %d policy steps pass on compliant manifests; conftest and macrackctl deny %s with %s\n",
		c.workflow, len(p.policy), filepath.Base(c.deny), c.denyRule)
	return nil
}

func stepByID(p *plan, id string) step {
	for _, s := range p.policy {
		if s.ID == id {
			return s
		}
	}
	panic("parseWorkflow guarantees step " + id)
}

// tools puts the pinned binaries on a PATH of their own, under the names the
// workflow's steps call them by.
func tools(ctx context.Context, c config, tmp string) (string, error) {
	bin := filepath.Join(tmp, "bin")
	if err := os.Mkdir(bin, 0o755); err != nil {
		return "", err
	}
	for name, path := range map[string]string{"opa": c.opa, "conftest": c.conftest} {
		abs, err := filepath.Abs(path)
		if err != nil {
			return "", err
		}
		if _, err := os.Stat(abs); err != nil {
			return "", fmt.Errorf("--%s: %w", name, err)
		}
		if err := os.Symlink(abs, filepath.Join(bin, name)); err != nil {
			return "", err
		}
	}
	build := exec.CommandContext(ctx, "go", "build", "-o", filepath.Join(bin, "macrackctl"), "./cmd/macrackctl")
	build.Dir = c.root
	if out, err := build.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/macrackctl: %w\n%s", err, out)
	}
	return bin, nil
}

// reviewerRepo lays out a reviewer's repository: a copy of policies/ and the
// manifests under the directory the workflow's MANIFESTS names.
func reviewerRepo(c config, p *plan, dir string, manifests []string) (string, error) {
	if err := copyTree(c.path(c.policies), filepath.Join(dir, "policies")); err != nil {
		return "", fmt.Errorf("copying the policies: %w", err)
	}
	mdir := p.env[stepByID(p, "conftest").label()][c.manifestsVar]
	if mdir == "" || filepath.IsAbs(mdir) || strings.HasPrefix(filepath.Clean(mdir), "..") {
		return "", fmt.Errorf("env %s is %q; want a directory inside the repository", c.manifestsVar, mdir)
	}
	mdir = filepath.Join(dir, mdir)
	if err := os.MkdirAll(mdir, 0o755); err != nil {
		return "", err
	}
	for _, m := range manifests {
		files, err := manifestFiles(c.path(m))
		if err != nil {
			return "", err
		}
		for _, f := range files {
			dst := filepath.Join(mdir, filepath.Base(f))
			if _, err := os.Stat(dst); err == nil {
				return "", fmt.Errorf("two manifests are named %s", filepath.Base(f))
			}
			if err := copyFile(f, dst); err != nil {
				return "", err
			}
		}
	}
	return dir, nil
}

// manifestFiles is a file, or a directory's manifests one level deep, as
// macrackctl reads a directory.
func manifestFiles(path string) ([]string, error) {
	info, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if !info.IsDir() {
		return []string{path}, nil
	}
	var files []string
	for _, pat := range []string{"*.yaml", "*.yml", "*.json"} {
		m, _ := filepath.Glob(filepath.Join(path, pat))
		files = append(files, m...)
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("%s holds no manifest", path)
	}
	return files, nil
}

func copyTree(src, dst string) error {
	return filepath.WalkDir(src, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, path)
		target := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		return copyFile(path, target)
	})
}

func copyFile(src, dst string) error {
	data, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	return os.WriteFile(dst, data, 0o644)
}

// runStep runs one step's run: as Actions does with shell: bash, in the
// repository, with the workflow's environment and the pinned tools first
// on PATH. It returns the combined output and the exit status.
func runStep(ctx context.Context, c config, p *plan, s step, repo, bin string) (string, int, error) {
	script := filepath.Join(filepath.Dir(repo), s.ID+".sh")
	if err := os.WriteFile(script, []byte(s.Run), 0o644); err != nil {
		return "", 0, err
	}
	ctx, cancel := context.WithTimeout(ctx, c.stepTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "--noprofile", "--norc", "-eo", "pipefail", script)
	cmd.Dir = repo
	cmd.Env = append(os.Environ(), "CI=true", "GITHUB_ACTIONS=true", "GITHUB_WORKSPACE="+repo,
		"PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	for k, v := range p.env[s.label()] {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	switch {
	case ctx.Err() != nil:
		return "", 0, stepError(s, "", fmt.Sprintf("did not finish in %s", c.stepTimeout), string(out))
	case errors.As(err, &exit):
		return string(out), exit.ExitCode(), nil
	case err != nil:
		return "", 0, fmt.Errorf("%s: %w", s.label(), err)
	}
	return string(out), 0, nil
}

func stepError(s step, manifests, what, out string) error {
	if manifests != "" {
		manifests = ", " + manifests
	}
	return fmt.Errorf("%s (id %s)%s: %s\ncommand:\n%s\noutput:\n%s",
		s.label(), s.ID, manifests, what, indent(s.Run), indent(out))
}

func indent(s string) string {
	s = strings.TrimRight(s, "\n")
	if s == "" {
		return "  (none)"
	}
	return "  " + strings.ReplaceAll(s, "\n", "\n  ")
}

func lastLine(out string) string {
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if l := strings.TrimSpace(lines[len(lines)-1]); l != "" {
		return l
	}
	return "(no output)"
}

type junit struct {
	Tests        int `xml:"tests,attr"`
	Failures     int `xml:"failures,attr"`
	Errors       int `xml:"errors,attr"`
	failureElems int
}

// readJUnit reads the root's counts and, independently of them, counts the
// failure and error elements, so that a report whose totals lie is caught.
func readJUnit(path string) (junit, error) {
	var r junit
	data, err := os.ReadFile(path)
	if err != nil {
		return r, err
	}
	if err := xml.Unmarshal(data, &r); err != nil {
		return r, fmt.Errorf("%s is not XML: %w", filepath.Base(path), err)
	}
	d := xml.NewDecoder(bytes.NewReader(data))
	for {
		tok, err := d.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			return r, fmt.Errorf("%s is not XML: %w", filepath.Base(path), err)
		}
		if se, ok := tok.(xml.StartElement); ok && (se.Name.Local == "failure" || se.Name.Local == "error") {
			r.failureElems++
		}
	}
	return r, nil
}

// gitRef accepts a macrackctl pin only if it is a commit or tag of this
// repository, so that the sample never names a version that does not exist.
func gitRef(root string) func(string) error {
	return func(ref string) error {
		name := ref
		if semver.MatchString(ref) {
			name = "refs/tags/" + ref
		}
		cmd := exec.Command("git", "rev-parse", "--verify", "--quiet", name+"^{commit}")
		cmd.Dir = root
		if out, err := cmd.Output(); err != nil || strings.TrimSpace(string(out)) == "" {
			return fmt.Errorf("%s is not a commit or tag of this repository", ref)
		}
		return nil
	}
}
