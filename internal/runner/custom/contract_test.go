package custom

import (
	"context"
	"errors"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// stageEnv is gitlab-runner's environment as RunJob starts it: the
// token (gitlab-runner's own CI_SERVER_TOKEN, and whatever else this
// process has) and the agent's MACRACK_* variables.
func stageEnv(socket string) []string {
	return append(os.Environ(),
		"CI_SERVER_TOKEN="+runnerToken, "CI_SERVER_URL=https://gitlab.example.com",
		EnvSocket+"="+socket, EnvVMUser+"=runner", EnvVMHostname+"=mini-7-vm-1")
}

func TestAJobRunsThroughTheStagesAsGitLabRunnerCallsThem(t *testing.T) {
	vm := newBashVM(t)
	srv := newServer(t, vm)
	proxy := newRecordingProxy(t, srv.Socket())
	e := newExecutor(t, stageBinary, stageEnv(proxy.socket))
	// A job variable gitlab-runner passes only to the stages.
	e.vars["DRIVER_ONLY"] = "custom-env-value-not-for-the-vm"

	config, prepare, result, stages := e.job(context.Background(), `echo "building $CI_JOB_ID as $(whoami 2>/dev/null || echo someone)"; echo to-stderr >&2`)
	if result.kind != "ok" {
		t.Fatalf("build %+v", result)
	}
	c, err := parseConfigOut([]byte(config.stdout))
	if err != nil {
		t.Fatalf("config stage's JSON %q: %v", config.stdout, err)
	}
	if *c.BuildsDir != "/Users/runner/builds" || *c.CacheDir != "/Users/runner/cache" || *c.BuildsDirIsShared ||
		*c.Hostname != "mini-7-vm-1" || *c.Driver.Name != DriverName || *c.Driver.Version == "" || *c.Shell != "bash" || c.JobEnv != nil {
		t.Fatalf("config %q", config.stdout)
	}
	if !strings.Contains(prepare.stdout, "MacRack VM ready") {
		t.Fatalf("prepare %+v", prepare)
	}
	want := []string{"prepare_script", "get_sources", "restore_cache", "download_artifacts", "build_script", "after_script",
		"archive_cache", "upload_artifacts_on_success", "cleanup_file_variables"}
	if !slices.Equal(stages, want) {
		t.Fatalf("stages %v", stages)
	}
	// The VM ran each script once, in order, after prepare's probe: "exit
	// 0", as the fake VM is no Prober.
	got := vm.got()
	if len(got) != len(want)+1 || got[0] != "exit 0\n" {
		t.Fatalf("the VM got %d scripts: %q", len(got), got)
	}
	for i, s := range want {
		if !strings.Contains(got[i+1], `Running `+s) {
			t.Fatalf("script %d is not %s's: %q", i+1, s, got[i+1])
		}
	}
	if n := vm.cleanupCount(); n != 1 {
		t.Fatalf("cleanups %d", n)
	}

	sent := proxy.String()
	for _, secret := range []string{runnerToken, "customRUNNERsecret", "custom-env-value-not-for-the-vm", "gitlab.example.com", e.responseFile} {
		if strings.Contains(sent, secret) {
			t.Fatalf("the stages sent %q toward the VM:\n%s", secret, sent)
		}
	}
	// Positive control: the scripts went, with the job's own variables.
	if !strings.Contains(sent, "glcbt-64_jobTOKENshortlived") || !strings.Contains(sent, "building $CI_JOB_ID") {
		t.Fatalf("the scripts did not go through the socket:\n%s", sent)
	}
}

func TestTheRunStageStreamsTheScriptsOutput(t *testing.T) {
	vm := newBashVM(t)
	e := newExecutor(t, stageBinary, stageEnv(newServer(t, vm).Socket()))
	o := e.run(context.Background(), 0, "build_script", `echo "job $CI_JOB_ID in $PWD"; echo oops >&2`)
	if o.kind != "ok" {
		t.Fatalf("%+v", o)
	}
	if !strings.Contains(o.stdout, "job 4242 in "+vm.home) || !strings.Contains(o.stdout, "oops") {
		t.Fatalf("stdout %q", o.stdout)
	}
}

func TestAFailingScriptIsABuildFailureWithItsExitCode(t *testing.T) {
	for _, tc := range []struct {
		name             string
		buildCode, sysCd int
	}{
		{"with the codes gitlab-runner sets", 7, 8},
		{"with gitlab-runner's documented defaults when it sets none", 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			vm := newBashVM(t)
			e := newExecutor(t, stageBinary, stageEnv(newServer(t, vm).Socket()))
			e.buildCode, e.systemCode = tc.buildCode, tc.sysCd
			_, _, result, stages := e.job(context.Background(), "echo failing; exit 3")
			if result.kind != "build" || result.code != 3 {
				t.Fatalf("build %+v", result)
			}
			if !strings.Contains(result.stdout, "failing") {
				t.Fatalf("output %q", result.stdout)
			}
			want := []string{"prepare_script", "get_sources", "restore_cache", "download_artifacts", "build_script", "after_script",
				"archive_cache_on_failure", "upload_artifacts_on_failure", "cleanup_file_variables"}
			if !slices.Equal(stages, want) {
				t.Fatalf("stages %v", stages)
			}
		})
	}
}

func TestAVMThatCannotRunTheScriptIsASystemFailure(t *testing.T) {
	for _, tc := range []struct {
		name       string
		systemCode int
	}{
		{"with the code gitlab-runner sets", 9},
		{"with gitlab-runner's default when it sets none", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			vm := newBashVM(t)
			vm.fail = errors.New("guest agent gone")
			e := newExecutor(t, stageBinary, stageEnv(newServer(t, vm).Socket()))
			e.systemCode = tc.systemCode
			o := e.run(context.Background(), 0, "get_sources", "true")
			if o.kind != "system" || !strings.Contains(o.stderr, "guest agent gone") {
				t.Fatalf("%+v", o)
			}
			// Positive control: the same stage on a VM that works.
			vm.fail = nil
			if o := e.run(context.Background(), 0, "get_sources", "true"); o.kind != "ok" {
				t.Fatalf("%+v", o)
			}
		})
	}
}

func TestStagesWithoutTheAgentAreSystemFailures(t *testing.T) {
	srv := newServer(t, newBashVM(t))
	e := newExecutor(t, stageBinary, stageEnv(srv.Socket()))
	if o := e.stage(context.Background(), 10*time.Second, StagePrepare); o.kind != "ok" {
		t.Fatalf("positive control: prepare with the agent: %+v", o)
	}
	srv.Close()
	for _, args := range [][]string{{StagePrepare}, {StageRun}} {
		var o outcome
		if args[0] == StageRun {
			o = e.run(context.Background(), 0, "build_script", "true")
		} else {
			o = e.stage(context.Background(), 10*time.Second, args...)
		}
		if o.kind != "system" {
			t.Fatalf("%v: %+v", args, o)
		}
	}
	// Cleanup never fails the job: the VM goes with the agent.
	if o := e.stage(context.Background(), 10*time.Second, StageCleanup); o.kind != "ok" || !strings.Contains(o.stderr, "Cleanup:") {
		t.Fatalf("cleanup %+v", o)
	}
}

func TestStagesRefuseWhatGitLabRunnerDoesNotSend(t *testing.T) {
	srv := newServer(t, newBashVM(t))
	for _, tc := range []struct {
		name string
		env  []string
		args []string
	}{
		{"no stage", nil, nil},
		{"an unknown stage", nil, []string{"provision"}},
		{"run without its script and stage", nil, []string{StageRun, "/nonexistent"}},
		{"run with a stage name gitlab-runner does not make", nil, []string{StageRun, "/etc/hosts", "build script; rm"}},
		{"run with a missing script", nil, []string{StageRun, "/nonexistent/script", "build_script"}},
		{"config without the VM's user", []string{EnvVMUser + "="}, []string{StageConfig}},
		{"config with a user that is not a name", []string{EnvVMUser + "=../root"}, []string{StageConfig}},
		{"prepare without the socket", []string{EnvSocket + "="}, []string{StagePrepare}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newExecutor(t, stageBinary, append(stageEnv(srv.Socket()), tc.env...))
			if o := e.stage(context.Background(), 10*time.Second, tc.args...); o.kind != "system" || o.stderr == "" {
				t.Fatalf("%+v", o)
			}
		})
	}
	// Positive control: config and prepare with what gitlab-runner sends.
	e := newExecutor(t, stageBinary, stageEnv(srv.Socket()))
	for _, s := range []string{StageConfig, StagePrepare} {
		if o := e.stage(context.Background(), 10*time.Second, s); o.kind != "ok" {
			t.Fatalf("%s: %+v", s, o)
		}
	}
}

func TestAStagePastItsTimeoutStopsOnSIGTERM(t *testing.T) {
	t.Run("run: the script in the VM is stopped", func(t *testing.T) {
		vm := newBashVM(t)
		e := newExecutor(t, stageBinary, stageEnv(newServer(t, vm).Socket()))
		o := e.run(context.Background(), 500*time.Millisecond, "build_script", "echo started; sleep 60")
		if !slices.Equal(o.signaled, []syscall.Signal{syscall.SIGTERM}) || o.kind != "system" || o.took > waitLimit {
			t.Fatalf("%+v", o)
		}
		deadline := time.Now().Add(waitLimit)
		for vm.canceledRuns() != 1 {
			if time.Now().After(deadline) {
				t.Fatal("the VM's script was not stopped")
			}
			time.Sleep(10 * time.Millisecond)
		}
	})
	t.Run("prepare: a VM that hangs", func(t *testing.T) {
		e := newExecutor(t, stageBinary, stageEnv(newServer(t, blockingProber{newBashVM(t)}).Socket()))
		o := e.stage(context.Background(), 500*time.Millisecond, StagePrepare)
		if !slices.Equal(o.signaled, []syscall.Signal{syscall.SIGTERM}) || o.kind != "system" {
			t.Fatalf("%+v", o)
		}
	})
	t.Run("positive control: a process that ignores SIGTERM is killed", func(t *testing.T) {
		e := newExecutor(t, "/bin/sh", os.Environ())
		e.graceful = 300 * time.Millisecond
		o := e.stage(context.Background(), 200*time.Millisecond, "-c", `trap "" TERM; sleep 30 & wait; sleep 30 & wait`)
		if !slices.Equal(o.signaled, []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL}) || o.kind != "killed" {
			t.Fatalf("%+v", o)
		}
	})
}

func TestTheHarnessRejectsConfigFieldsGitLabRunnerDoesNotKnow(t *testing.T) {
	if _, err := parseConfigOut([]byte(`{"builds_dir":"/b","buildsdir_shared":true}`)); err == nil {
		t.Fatal("an unknown field passed")
	}
	if _, err := parseConfigOut([]byte(`{"builds_dir":"/b","builds_dir_is_shared":true,"job_env":{"A":"b"}}`)); err != nil {
		t.Fatalf("positive control: %v", err)
	}
}
