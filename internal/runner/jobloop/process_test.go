package jobloop

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// fakeRunner copies testdata/fake-gitlab-runner.sh to an executable in a
// temp dir, and returns it with the file it records its argv and
// environment to.
func fakeRunner(t *testing.T, outcome string) (binary, record string) {
	t.Helper()
	src, err := os.ReadFile(filepath.Join("testdata", "fake-gitlab-runner.sh"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	binary = filepath.Join(dir, "gitlab-runner")
	if err := os.WriteFile(binary, src, 0o755); err != nil {
		t.Fatal(err)
	}
	record = filepath.Join(dir, "record")
	t.Setenv("FAKE_RUNNER_RECORD", record)
	t.Setenv("FAKE_RUNNER_OUTCOME", outcome)
	// Inherited settings that must not reach gitlab-runner.
	t.Setenv("RUNNER_BUILDS_DIR", "/somewhere/else")
	t.Setenv("CI_SERVER_TOKEN", "glrt-stale-token-from-the-agent")
	return binary, record
}

func processConfig() Config {
	return Config{
		URL: "https://gitlab.example.com", Token: runnerToken, SystemID: "s_vm1",
		WaitTimeout: 1500 * time.Millisecond, AbortGrace: time.Second, FinalUpdateTimeout: time.Second,
	}
}

func TestRunProcessPassesTheTokenOnlyThroughTheEnvironment(t *testing.T) {
	binary, record := fakeRunner(t, "success")
	logs := &logBuffer{}
	cfg := processConfig()
	cfg.CABundle = []byte("-----BEGIN CERTIFICATE-----\nMIIfake\n-----END CERTIFICATE-----")
	var phases []Phase
	st, err := RunProcess(context.Background(), cfg, binary, nil, logs.logger(), func(s State) { phases = append(phases, s.Phase) })
	if err != nil {
		t.Fatal(err)
	}
	if st.Phase != PhaseSucceeded || st.JobID != 4242 || st.ExitCode == nil || *st.ExitCode != 0 || st.StartedAt.IsZero() || st.FinishedAt.IsZero() {
		t.Fatalf("state %+v", st)
	}
	if strings.Join(phaseStrings(phases), ",") != "Waiting,Running,Succeeded" {
		t.Fatalf("phases %v", phases)
	}

	rec, err := os.ReadFile(record)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(rec), "\n")
	argv := lines[0]
	if argv != "argv: run-single --max-builds 1 --executor shell --url https://gitlab.example.com --wait-timeout 2" {
		t.Fatalf("argv %q", argv)
	}
	if strings.Contains(argv, runnerToken) {
		t.Fatal("the token is in argv")
	}
	envs := map[string]string{}
	for _, l := range lines[1:] {
		if k, v, ok := strings.Cut(l, "="); ok {
			envs[k] = v
		}
	}
	if envs["CI_SERVER_TOKEN"] != runnerToken || envs["CI_SERVER_URL"] != "https://gitlab.example.com" || envs["RUNNER_EXECUTOR"] != "shell" {
		t.Fatalf("environment %v", envs)
	}
	if _, ok := envs["RUNNER_BUILDS_DIR"]; ok {
		t.Fatal("an inherited RUNNER_ setting reached gitlab-runner")
	}
	if envs["PATH"] == "" {
		t.Fatal("positive control: the rest of the environment is inherited")
	}
	if !strings.Contains(string(rec), "ca-file-content:"+string(cfg.CABundle)) {
		t.Fatalf("the CA bundle did not reach CI_SERVER_TLS_CA_FILE:\n%s", rec)
	}
	if _, err := os.Stat(envs["CI_SERVER_TLS_CA_FILE"]); !os.IsNotExist(err) {
		t.Fatalf("the CA file was left behind: %v", err)
	}

	log := logs.String()
	for _, secret := range []string{runnerToken, "jobloopRU"} {
		if strings.Contains(log, secret) {
			t.Fatalf("the log holds the token or its short form:\n%s", log)
		}
	}
	if !strings.Contains(log, "job=4242") || !strings.Contains(log, "runner=[MASKED]") {
		t.Fatalf("positive control: gitlab-runner's lines are logged, masked:\n%s", log)
	}
}

func TestRunProcessReadsTheOutcomeFromGitLabRunnersLog(t *testing.T) {
	for _, tc := range []struct {
		name    string
		outcome string
		want    State
		err     error
	}{
		{"a failed job is a script failure with its exit code", "failed", State{Phase: PhaseFailed, JobID: 4243, FailureReason: "script_failure", ExitCode: new(int32(3))}, nil},
		{"no job before the wait timeout is ErrNoJob", "none", State{Phase: PhaseWaiting}, ErrNoJob},
		{"a refused token stops gitlab-runner at once", "forbidden", State{Phase: PhaseWaiting}, ErrRunnerForbidden},
	} {
		t.Run(tc.name, func(t *testing.T) {
			binary, _ := fakeRunner(t, tc.outcome)
			began := time.Now()
			st, err := RunProcess(context.Background(), processConfig(), binary, nil, (&logBuffer{}).logger(), nil)
			if !errors.Is(err, tc.err) && !(tc.err == nil && err == nil) {
				t.Fatalf("want %v, got %v", tc.err, err)
			}
			if st.Phase != tc.want.Phase || st.JobID != tc.want.JobID || st.FailureReason != tc.want.FailureReason ||
				(st.ExitCode == nil) != (tc.want.ExitCode == nil) || (st.ExitCode != nil && *st.ExitCode != *tc.want.ExitCode) {
				t.Fatalf("state %+v", st)
			}
			if time.Since(began) > 5*time.Second {
				t.Fatalf("took %s", time.Since(began))
			}
		})
	}
}

func TestRunProcessStopsGitLabRunnerOnAbort(t *testing.T) {
	binary, _ := fakeRunner(t, "hang")
	ctx, abort := context.WithCancelCause(context.Background())
	defer abort(nil)
	st, err := RunProcess(ctx, processConfig(), binary, nil, (&logBuffer{}).logger(), func(s State) {
		if s.Phase == PhaseRunning {
			abort(ErrSystemShutdown)
		}
	})
	if !errors.Is(err, ErrSystemShutdown) {
		t.Fatalf("want the abort's cause, got %v", err)
	}
	if st.Phase != PhaseFailed || st.JobID != 4244 || st.FailureReason != "runner_system_failure" {
		t.Fatalf("state %+v", st)
	}
}

func TestRunProcessWithoutABinaryFails(t *testing.T) {
	_, err := RunProcess(context.Background(), processConfig(), filepath.Join(t.TempDir(), "missing"), nil, (&logBuffer{}).logger(), nil)
	if !errors.Is(err, ErrProcess) || strings.Contains(err.Error(), runnerToken) {
		t.Fatalf("got %v", err)
	}
	if _, err := RunProcess(context.Background(), processConfig(), "", nil, (&logBuffer{}).logger(), nil); !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("no binary: %v", err)
	}
}

func phaseStrings(ps []Phase) []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = string(p)
	}
	return out
}

func TestRunCommandRefusesTheTokenInArgv(t *testing.T) {
	binary, record := fakeRunner(t, "success")
	cmd := Command{Binary: binary, Args: []string{"run-single", "--token", runnerToken}, Env: []string{"FAKE_RUNNER_RECORD=" + record, "FAKE_RUNNER_OUTCOME=success"}}
	if _, err := RunCommand(context.Background(), processConfig(), cmd, nil, (&logBuffer{}).logger(), nil); !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("want ErrInvalidConfig, got %v", err)
	}
	if _, err := os.Stat(record); !os.IsNotExist(err) {
		t.Fatalf("gitlab-runner was started: %v", err)
	}
	// Positive control: the same command without the token runs.
	cmd.Args = []string{"run-single"}
	if st, err := RunCommand(context.Background(), processConfig(), cmd, nil, (&logBuffer{}).logger(), nil); err != nil || st.Phase != PhaseSucceeded {
		t.Fatalf("state %+v, err %v", st, err)
	}
}
