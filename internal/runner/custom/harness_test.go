package custom

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// executor drives stage executables as gitlab-runner's custom executor
// does (executors/custom/custom.go and command/command.go, 18.x): each
// stage runs in the job's temp dir, in its own process group, with
// gitlab-runner's environment plus TMPDIR, BUILD_FAILURE_EXIT_CODE,
// SYSTEM_FAILURE_EXIT_CODE, BUILD_EXIT_CODE_FILE, JOB_RESPONSE_FILE, and
// the job's variables as CUSTOM_ENV_*; a stage past its deadline gets
// SIGTERM on its group, then SIGKILL after the graceful kill timeout.
type executor struct {
	t *testing.T
	// exec is the stage executable; config_args and the like are its
	// stage names, as RunJob configures them.
	exec string
	// env is gitlab-runner's own environment.
	env []string
	// vars are the job's variables.
	vars map[string]string
	// buildCode and systemCode are what gitlab-runner sets; 0 leaves the
	// variable out, for the stage's fallback.
	buildCode, systemCode int
	graceful, force       time.Duration

	tempDir, responseFile, exitCodeFile string
}

func newExecutor(t *testing.T, exe string, env []string) *executor {
	t.Helper()
	dir := t.TempDir()
	e := &executor{
		t: t, exec: exe, env: env, buildCode: 1, systemCode: 2,
		graceful: 5 * time.Second, force: 5 * time.Second,
		vars:    map[string]string{"CI_JOB_ID": "4242", "CI_PROJECT_PATH_SLUG": "group-project", "CI_JOB_TOKEN": "glcbt-64_jobTOKENshortlived"},
		tempDir: dir, responseFile: filepath.Join(dir, "response.json"), exitCodeFile: filepath.Join(dir, "build_exit_code"),
	}
	if err := os.WriteFile(e.responseFile, []byte(`{"id":4242,"token":"glcbt-64_jobTOKENshortlived"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	return e
}

// outcome is how gitlab-runner takes a stage's end.
type outcome struct {
	kind     string // "ok", "build", "system", "unknown", "killed"
	code     int    // the build's exit code for "build"
	stdout   string
	stderr   string
	signaled []syscall.Signal
	took     time.Duration
}

// stage runs the stage executable with args, bounded by timeout (0: none).
func (e *executor) stage(ctx context.Context, timeout time.Duration, args ...string) outcome {
	e.t.Helper()
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	env := append([]string(nil), e.env...)
	env = append(env, "TMPDIR="+e.tempDir, "BUILD_EXIT_CODE_FILE="+e.exitCodeFile, "JOB_RESPONSE_FILE="+e.responseFile)
	if e.buildCode != 0 {
		env = append(env, "BUILD_FAILURE_EXIT_CODE="+strconv.Itoa(e.buildCode))
	}
	if e.systemCode != 0 {
		env = append(env, "SYSTEM_FAILURE_EXIT_CODE="+strconv.Itoa(e.systemCode))
	}
	for k, v := range e.vars {
		env = append(env, "CUSTOM_ENV_"+k+"="+v)
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(e.exec, args...)
	cmd.Dir, cmd.Env, cmd.Stdout, cmd.Stderr = e.tempDir, env, &stdout, &stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	began := time.Now()
	if err := cmd.Start(); err != nil {
		e.t.Fatalf("starting %v: %v", args, err)
	}
	waitCh := make(chan error, 1)
	go func() { waitCh <- cmd.Wait() }()
	var o outcome
	var err error
	select {
	case err = <-waitCh:
	case <-ctx.Done():
		// helpers/process: SIGTERM to the group, SIGKILL after the grace.
		syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		o.signaled = append(o.signaled, syscall.SIGTERM)
		select {
		case err = <-waitCh:
		case <-time.After(e.graceful):
			syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			o.signaled = append(o.signaled, syscall.SIGKILL)
			select {
			case err = <-waitCh:
			case <-time.After(e.force):
				e.t.Fatalf("stage %v survived SIGKILL", args)
			}
		}
	}
	o.took = time.Since(began)
	o.stdout, o.stderr = stdout.String(), stderr.String()
	var ee *exec.ExitError
	switch {
	case err == nil:
		o.kind = "ok"
	case !errors.As(err, &ee):
		e.t.Fatalf("waiting for %v: %v", args, err)
	case !ee.Exited():
		o.kind = "killed"
	case ee.ExitCode() == e.effective(e.buildCode, 1):
		// command.go parseBuildFailure: the code from the file, or 1.
		o.kind, o.code = "build", e.effective(e.buildCode, 1)
		if b, err := os.ReadFile(e.exitCodeFile); err == nil {
			if o.code, err = strconv.Atoi(strings.SplitN(string(b), "\n", 2)[0]); err != nil {
				o.kind = "unknown"
			}
		}
	case ee.ExitCode() == e.effective(e.systemCode, 2):
		o.kind = "system"
	default:
		o.kind, o.code = "unknown", ee.ExitCode()
	}
	return o
}

// effective is the code gitlab-runner expects: what it set, or what the
// stage falls back to when it set nothing.
func (e *executor) effective(set, fallback int) int {
	if set != 0 {
		return set
	}
	return fallback
}

// configOut is executors/custom/api.ConfigExecOutput, decoded strictly:
// a field gitlab-runner does not know fails the test, though gitlab-
// runner itself would ignore it.
type configOut struct {
	Driver *struct {
		Name    *string `json:"name,omitempty"`
		Version *string `json:"version,omitempty"`
	} `json:"driver,omitempty"`
	Hostname          *string            `json:"hostname,omitempty"`
	BuildsDir         *string            `json:"builds_dir,omitempty"`
	CacheDir          *string            `json:"cache_dir,omitempty"`
	BuildsDirIsShared *bool              `json:"builds_dir_is_shared,omitempty"`
	JobEnv            *map[string]string `json:"job_env,omitempty"`
	Shell             *string            `json:"shell,omitempty"`
}

func parseConfigOut(b []byte) (configOut, error) {
	var c configOut
	d := json.NewDecoder(bytes.NewReader(b))
	d.DisallowUnknownFields()
	if err := d.Decode(&c); err != nil {
		return c, err
	}
	if d.More() {
		return c, errors.New("more than one JSON value")
	}
	return c, nil
}

// script is a stage script in the shape gitlab-runner's bash shell writes
// (shells/bash.go): a shebang, set -eo pipefail, the job's variables
// exported, then the stage's commands.
func (e *executor) script(stage, commands string) string {
	var b strings.Builder
	b.WriteString("#!/usr/bin/env bash\n\nset -eo pipefail\nset +o noclobber\n: | eval $'")
	fmt.Fprintf(&b, "echo \"Running %s\"\\n", stage)
	b.WriteString("'\n")
	for _, k := range []string{"CI_JOB_ID", "CI_JOB_TOKEN", "CI_PROJECT_PATH_SLUG"} {
		fmt.Fprintf(&b, "export %s=%q\n", k, e.vars[k])
	}
	b.WriteString(commands + "\nexit 0\n")
	return b.String()
}

// run is one run_exec call: the script written to a fresh scriptNNN dir
// in the temp dir, 0700, then `<exec> run <script> <stage>`.
func (e *executor) run(ctx context.Context, timeout time.Duration, stage, commands string) outcome {
	e.t.Helper()
	dir, err := os.MkdirTemp(e.tempDir, "script")
	if err != nil {
		e.t.Fatal(err)
	}
	path := filepath.Join(dir, "script")
	if err := os.WriteFile(path, []byte(e.script(stage, commands)), 0o700); err != nil {
		e.t.Fatal(err)
	}
	return e.stage(ctx, timeout, StageRun, path, stage)
}

// job is the stages of one job as gitlab-runner runs them: config,
// prepare, the run sub-stages in their order (after_script always, the
// on_failure variants after a failed build), cleanup always. build is
// build_script's commands. It returns the build's outcome and the order
// of the sub-stages run.
func (e *executor) job(ctx context.Context, build string) (config, prepare, result outcome, stages []string) {
	e.t.Helper()
	config = e.stage(ctx, 10*time.Second, StageConfig)
	if config.kind != "ok" {
		return config, prepare, config, nil
	}
	prepare = e.stage(ctx, 10*time.Second, StagePrepare)
	defer func() {
		if c := e.stage(ctx, 10*time.Second, StageCleanup); c.kind != "ok" {
			e.t.Errorf("cleanup: %+v", c)
		}
	}()
	if prepare.kind != "ok" {
		return config, prepare, prepare, nil
	}
	result = outcome{kind: "ok"}
	step := func(stage, cmds string) {
		stages = append(stages, stage)
		if o := e.run(ctx, 0, stage, cmds); o.kind != "ok" && result.kind == "ok" && stage != "after_script" {
			result = o
		}
	}
	for _, s := range []string{"prepare_script", "get_sources", "restore_cache", "download_artifacts"} {
		if result.kind == "ok" {
			step(s, `echo "`+s+` in $PWD"`)
		}
	}
	if result.kind == "ok" {
		step("build_script", build)
	}
	step("after_script", `echo after`)
	if result.kind == "ok" {
		step("archive_cache", "true")
		step("upload_artifacts_on_success", "true")
	} else {
		step("archive_cache_on_failure", "true")
		step("upload_artifacts_on_failure", "true")
	}
	step("cleanup_file_variables", "true")
	return config, prepare, result, stages
}
