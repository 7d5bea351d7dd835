package custom

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/boualleiguie/macrack-operator/internal/runner/jobloop"
)

// fakeGitLabRunner copies testdata/fake-gitlab-runner.sh to an
// executable, and returns it with the file it records to.
func fakeGitLabRunner(t *testing.T) (binary, record string) {
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
	// Inherited settings that must not reach gitlab-runner or the stages.
	t.Setenv("CI_SERVER_TOKEN", "glrt-stale-token-from-the-agent")
	t.Setenv("RUNNER_EXECUTOR", "shell")
	t.Setenv("CUSTOM_RUN_EXEC", "/bin/false")
	t.Setenv(EnvSocket, "/somewhere/else")
	return binary, record
}

func jobOptions(t *testing.T, binary, configDir string, vm ScriptRunner) Options {
	return Options{
		GitLabRunner: binary, StageBinary: stageBinary, ConfigDir: configDir, VM: vm,
		LoginUser: "runner", Hostname: "mini-7-vm-1",
	}
}

func jobConfig() jobloop.Config {
	return jobloop.Config{
		URL: "https://gitlab.example.com", Token: runnerToken, SystemID: "s_ignored", CABundle: []byte("-----BEGIN CERTIFICATE-----\nMIIfake\n-----END CERTIFICATE-----\n"),
		AbortGrace: time.Second, FinalUpdateTimeout: time.Second,
	}
}

// record is what the fake gitlab-runner saw.
type record struct {
	argv     string
	env      map[string]string
	mode     string
	systemID string
	config   string
}

func readRecord(t *testing.T, path string) record {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	r := record{env: map[string]string{}}
	lines := strings.Split(string(b), "\n")
	r.argv = lines[0]
	inConfig := false
	var cfg strings.Builder
	for _, l := range lines[1:] {
		switch {
		case inConfig:
			cfg.WriteString(l + "\n")
		case strings.HasPrefix(l, "config-mode: "):
			r.mode = strings.TrimPrefix(l, "config-mode: ")
		case strings.HasPrefix(l, "system-id: "):
			r.systemID = strings.TrimPrefix(l, "system-id: ")
			inConfig = true
		default:
			if k, v, ok := strings.Cut(l, "="); ok {
				r.env[k] = v
			}
		}
	}
	r.config = cfg.String()
	return r
}

func TestRunJobStartsGitLabRunnerWithTheCustomExecutor(t *testing.T) {
	binary, recordPath := fakeGitLabRunner(t)
	configDir := filepath.Join(t.TempDir(), "mini-7")
	vm := newBashVM(t)
	logs := &logBuffer{}
	t.Setenv("FAKE_JOB_SCRIPT", `echo "job $CI_JOB_ID"`)
	var mu sync.Mutex
	var phases []string
	st, err := RunJob(context.Background(), jobConfig(), jobOptions(t, binary, configDir, vm), logs.logger(), func(s jobloop.State) {
		mu.Lock()
		defer mu.Unlock()
		phases = append(phases, string(s.Phase))
	})
	if err != nil {
		t.Fatal(err)
	}
	if st.Phase != jobloop.PhaseSucceeded || st.JobID != 5151 || strings.Join(phases, ",") != "Waiting,Running,Succeeded" {
		t.Fatalf("state %+v, phases %v", st, phases)
	}
	r := readRecord(t, recordPath)

	// The token: in the 0600 config file only, never in argv or env.
	if strings.Contains(r.argv, runnerToken) {
		t.Fatalf("the token is in argv: %s", r.argv)
	}
	for k, v := range r.env {
		if strings.Contains(v, runnerToken) || strings.Contains(v, "glrt-stale") {
			t.Fatalf("a token is in the environment: %s", k)
		}
	}
	if r.mode != "600" || !strings.Contains(r.config, `token = "`+runnerToken+`"`) {
		t.Fatalf("config file mode %s:\n%s", r.mode, r.config)
	}
	if !regexp.MustCompile(`^argv: run-single --config ` + regexp.QuoteMeta(configDir) + `/job-\d+\.toml --runner macrack --max-builds 1$`).MatchString(r.argv) {
		t.Fatalf("argv %q", r.argv)
	}

	// The stages: one binary, the stage its first argument, all four.
	for _, s := range []string{"config", "prepare", "run", "cleanup"} {
		if !strings.Contains(r.config, s+`_exec = "`+stageBinary+`"`) || !strings.Contains(r.config, s+`_args = ["`+s+`"]`) {
			t.Fatalf("stage %s is not configured:\n%s", s, r.config)
		}
	}
	for _, want := range []string{`executor = "custom"`, `url = "https://gitlab.example.com"`, `builds_dir = "/Users/runner/builds"`,
		`shell = "bash"`, `config_exec_timeout = 60`, `graceful_kill_timeout = 30`, `tls-ca-file = "` + configDir + `/job-`} {
		if !strings.Contains(r.config, want) {
			t.Fatalf("config lacks %s:\n%s", want, r.config)
		}
	}

	// The environment: the agent's variables, nothing inherited that
	// would configure gitlab-runner or the stages.
	if r.env[EnvVMUser] != "runner" || r.env[EnvVMHostname] != "mini-7-vm-1" || !strings.HasSuffix(r.env[EnvSocket], "/"+socketName) {
		t.Fatalf("environment %v", r.env)
	}
	for _, k := range []string{"CI_SERVER_TOKEN", "RUNNER_EXECUTOR", "CUSTOM_RUN_EXEC"} {
		if _, ok := r.env[k]; ok {
			t.Fatalf("%s was passed on", k)
		}
	}
	if r.env["PATH"] == "" {
		t.Fatal("positive control: the rest of the environment is inherited")
	}

	// The job ran in the VM through the stages, without the token.
	got := vm.got()
	if len(got) != 2 || !strings.Contains(got[1], `echo "job $CI_JOB_ID"`) {
		t.Fatalf("the VM got %q", got)
	}
	for _, s := range got {
		if strings.Contains(s, runnerToken) {
			t.Fatal("the token reached the VM")
		}
	}

	// Nothing of the job is left: config, CA bundle, socket.
	left, _ := filepath.Glob(filepath.Join(configDir, "job-*"))
	if len(left) != 0 {
		t.Fatalf("left behind: %v", left)
	}
	if _, err := os.Stat(filepath.Dir(r.env[EnvSocket])); !os.IsNotExist(err) {
		t.Fatalf("the socket's directory was left: %v", err)
	}
	if log := logs.String(); strings.Contains(log, runnerToken) || strings.Contains(log, "customRUN") {
		t.Fatalf("the log holds the token:\n%s", log)
	}
}

func TestRunJobKeepsOneSystemIDPerChassis(t *testing.T) {
	binary, recordPath := fakeGitLabRunner(t)
	root := t.TempDir()
	run := func(chassis string) string {
		t.Helper()
		dir := filepath.Join(root, chassis)
		if _, err := RunJob(context.Background(), jobConfig(), jobOptions(t, binary, dir, newBashVM(t)), (&logBuffer{}).logger(), nil); err != nil {
			t.Fatal(err)
		}
		id := readRecord(t, recordPath).systemID
		b, err := os.ReadFile(filepath.Join(dir, SystemIDFile))
		if err != nil || strings.TrimSpace(string(b)) != id {
			t.Fatalf("file %q, gitlab-runner saw %q: %v", b, id, err)
		}
		if fi, err := os.Stat(filepath.Join(dir, SystemIDFile)); err != nil || fi.Mode().Perm() != 0o600 {
			t.Fatalf("mode: %v %v", fi.Mode(), err)
		}
		return id
	}
	first := run("mini-1")
	if !regexp.MustCompile(`^s_[0-9a-f]{12}$`).MatchString(first) {
		t.Fatalf("system id %q", first)
	}
	if again := run("mini-1"); again != first {
		t.Fatalf("the chassis's id changed: %s, then %s", first, again)
	}
	if other := run("mini-2"); other == first {
		t.Fatalf("two chassis share %s", first)
	}
}

func TestEnsureSystemIDReplacesAnInvalidFileAndAgreesUnderRaces(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, SystemIDFile), []byte("not-an-id\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	ids := make([]string, 8)
	for i := range ids {
		wg.Go(func() {
			id, err := EnsureSystemID(dir)
			if err != nil {
				t.Error(err)
			}
			ids[i] = id
		})
	}
	wg.Wait()
	for _, id := range ids {
		if id != ids[0] || !systemIDRe.MatchString(id) {
			t.Fatalf("ids %v", ids)
		}
	}
	// Positive control: gitlab-runner's own ids are kept as they are.
	dir = t.TempDir()
	os.WriteFile(filepath.Join(dir, SystemIDFile), []byte("r_AbCdEf123456"), 0o600)
	if id, err := EnsureSystemID(dir); err != nil || id != "r_AbCdEf123456" {
		t.Fatalf("%q, %v", id, err)
	}
}

func TestRunJobReportsAFailedScript(t *testing.T) {
	binary, _ := fakeGitLabRunner(t)
	t.Setenv("FAKE_JOB_SCRIPT", "exit 4")
	st, err := RunJob(context.Background(), jobConfig(), jobOptions(t, binary, t.TempDir(), newBashVM(t)), (&logBuffer{}).logger(), nil)
	if err != nil || st.Phase != jobloop.PhaseFailed || st.FailureReason != "script_failure" {
		t.Fatalf("state %+v, %v", st, err)
	}
}

func TestRunJobRefusesOptionsThatCannotWork(t *testing.T) {
	binary, _ := fakeGitLabRunner(t)
	good := jobOptions(t, binary, t.TempDir(), newBashVM(t))
	for _, tc := range []struct {
		name string
		mod  func(*Options)
	}{
		{"no gitlab-runner", func(o *Options) { o.GitLabRunner = "" }},
		{"a relative stage binary", func(o *Options) { o.StageBinary = "macrack-runner-stage" }},
		{"no config directory", func(o *Options) { o.ConfigDir = "" }},
		{"no VM", func(o *Options) { o.VM = nil }},
		{"a login user that is a path", func(o *Options) { o.LoginUser = "../admin" }},
		{"a negative timeout", func(o *Options) { o.PrepareTimeout = -time.Second }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := good
			tc.mod(&o)
			if _, err := RunJob(context.Background(), jobConfig(), o, (&logBuffer{}).logger(), nil); !errors.Is(err, ErrInvalidOptions) {
				t.Fatalf("got %v", err)
			}
		})
	}
	if _, err := RunJob(context.Background(), jobConfig(), good, (&logBuffer{}).logger(), nil); err != nil {
		t.Fatalf("positive control: %v", err)
	}
}

func TestTOMLStringsEscapeWhatTOMLNeeds(t *testing.T) {
	for in, want := range map[string]string{
		`plain`:         `"plain"`,
		`a"b\c`:         `"a\"b\\c"`,
		"new\nline\x7f": `"new\u000aline\u007f"`,
		"ünïcode":       `"ünïcode"`,
	} {
		if got := tomlString(in); got != want {
			t.Errorf("%q: got %s, want %s", in, got, want)
		}
	}
}
