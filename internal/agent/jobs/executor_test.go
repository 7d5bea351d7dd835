package jobs

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/boualleiguie/macrack-operator/internal/gitlab"
	"github.com/boualleiguie/macrack-operator/internal/runner/jobloop"
)

// bashVM runs scripts with the real bash, as the guest's exec channel
// does: the script on standard input, a login user's clean environment.
type bashVM struct {
	home    string
	scripts []string
}

func (b *bashVM) RunScript(ctx context.Context, script io.Reader, out io.Writer) (int, error) {
	body, err := io.ReadAll(script)
	if err != nil {
		return -1, err
	}
	b.scripts = append(b.scripts, string(body))
	cmd := exec.CommandContext(ctx, "/bin/bash")
	cmd.Stdin = bytes.NewReader(body)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.Env = []string{"HOME=" + b.home, "PATH=/usr/bin:/bin", "TMPDIR=" + b.home}
	err = cmd.Run()
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		return exit.ExitCode(), nil
	}
	if err != nil {
		return -1, err
	}
	return 0, nil
}

func job(steps ...gitlab.Step) jobloop.Job {
	return jobloop.Job{ID: 77, Name: "build", Steps: steps, Variables: []gitlab.Variable{
		{Key: "CI_JOB_TOKEN", Value: "glcbt-short-lived", Masked: true},
		{Key: "GREETING", Value: "hello", Public: true},
		{Key: "WHO", Value: "$GREETING world", Public: true},
		{Key: "LITERAL", Value: "$GREETING", Public: true, Raw: true},
		{Key: "TRAP", Value: "$(touch pwned) `touch pwned` it's", Public: true},
		{Key: "CERT", Value: "-----BEGIN-----\nabc\n", File: true},
		{Key: "not a name", Value: "x"},
	}}
}

// A job's steps run in the VM as bash scripts: each command echoed, then
// run; the variables exported, expanded as GitLab documents but never run
// as commands; a file variable names a file only the user may read.
func TestTheExecutorRunsTheStepsAsBashScripts(t *testing.T) {
	vm := &bashVM{home: t.TempDir()}
	var out bytes.Buffer
	code, err := Executor{Scripts: vm}.Run(context.Background(), job(gitlab.Step{
		Name: gitlab.StepScript, When: gitlab.WhenOnSuccess,
		Script: []string{`echo "$WHO"`, `echo "$LITERAL"`, `echo "$TRAP"`, `cat "$CERT"`, `stat -c %a "$CERT"`, `test "$CI_JOB_TOKEN" = glcbt-short-lived && echo token-ok`},
	}), &out)
	if err != nil || code != 0 {
		t.Fatalf("exit %d, %v:\n%s", code, err, out.String())
	}
	for _, want := range []string{"$ echo \"$WHO\"\nhello world\n", "$GREETING\n", "$(touch pwned) `touch pwned` it's\n", "-----BEGIN-----\nabc\n", "600\n", "token-ok\n"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the output lacks %q:\n%s", want, out.String())
		}
	}
	if _, err := os.Stat(filepath.Join(vm.home, "pwned")); err == nil {
		t.Error("a variable's value ran as a command")
	}
}

// The first failing command ends the step with its code, and the job with
// it; an after_script still runs, and its failure does not change the
// job's code. The control: a passing job exits 0 (above).
func TestAFailingCommandEndsTheStepWithItsCode(t *testing.T) {
	vm := &bashVM{home: t.TempDir()}
	var out bytes.Buffer
	code, err := Executor{Scripts: vm}.Run(context.Background(), job(
		gitlab.Step{Name: gitlab.StepScript, When: gitlab.WhenOnSuccess, Script: []string{"echo before", "(exit 3)", "echo never"}},
		gitlab.Step{Name: gitlab.StepAfterScript, When: gitlab.WhenAlways, AllowFailure: true, Script: []string{"echo after", "exit 9"}},
	), &out)
	if err != nil || code != 3 {
		t.Fatalf("exit %d, %v, want 3:\n%s", code, err, out.String())
	}
	if s := out.String(); !strings.Contains(s, "before\n") || strings.Contains(s, "never") || !strings.Contains(s, "after\n") {
		t.Fatalf("output:\n%s", s)
	}
}

// Nothing of the agent's own environment goes into a script: the runner
// token lives in the agent's process, and a script carries only the job.
func TestAScriptCarriesNothingOfTheAgentsEnvironment(t *testing.T) {
	const secret = "glrt-RUNNER-TOKEN-NEVER-IN-A-VM"
	t.Setenv("CI_SERVER_TOKEN", secret)
	vm := &bashVM{home: t.TempDir()}
	var out bytes.Buffer
	if _, err := (Executor{Scripts: vm}).Run(context.Background(), job(gitlab.Step{Name: gitlab.StepScript, When: gitlab.WhenOnSuccess,
		Script: []string{`echo "[$CI_SERVER_TOKEN]"`, "env"}}), &out); err != nil {
		t.Fatal(err)
	}
	if len(vm.scripts) != 1 {
		t.Fatalf("%d scripts, want 1", len(vm.scripts))
	}
	// The control: the script did carry the job's own token.
	if !strings.Contains(vm.scripts[0], "glcbt-short-lived") {
		t.Fatal("the script lacks the job's variables")
	}
	if strings.Contains(vm.scripts[0], secret) || strings.Contains(out.String(), secret) {
		t.Fatal("the agent's environment reached the VM")
	}
	if !strings.Contains(out.String(), "[]\n") {
		t.Fatalf("CI_SERVER_TOKEN is set in the VM:\n%s", out.String())
	}
}
