package custom

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/utils/clock"

	"github.com/boualleiguie/macrack-operator/internal/runner/jobloop"
)

// Defaults for Options' timeouts. gitlab-runner's own are an hour for
// each stage and ten minutes of grace after SIGTERM (executors/custom/
// consts.go, helpers/process/killer.go), far longer than a booted VM
// needs.
const (
	DefaultConfigTimeout       = time.Minute
	DefaultPrepareTimeout      = 5 * time.Minute
	DefaultCleanupTimeout      = 2 * time.Minute
	DefaultGracefulKillTimeout = 30 * time.Second
	DefaultForceKillTimeout    = 10 * time.Second
)

// DefaultStageBinary is where the agent's package installs
// macrack-runner-stage on a Mac.
const DefaultStageBinary = "/Library/MacRack/bin/macrack-runner-stage"

// Options are what RunJob needs besides the runner's Config.
type Options struct {
	// GitLabRunner is gitlab-runner's path, 18.1 or later.
	GitLabRunner string
	// StageBinary is macrack-runner-stage's path; DefaultStageBinary if
	// empty.
	StageBinary string
	// ConfigDir is the chassis's gitlab-runner directory, which the agent
	// owns: it holds .runner_system_id, and each job's config file while
	// the job runs.
	ConfigDir string
	// SocketDir is where the job's stage socket directory goes;
	// os.TempDir() if empty.
	SocketDir string
	// VM runs the job's scripts: a fresh VM, booted, its login user
	// LoginUser. The agent tears it down after RunJob.
	VM ScriptRunner
	// LoginUser is the VM's login user; the builds go in its home.
	LoginUser string
	// Hostname is the VM's name, reported as the job's hostname.
	Hostname string
	// Timeouts of gitlab-runner's custom executor; the defaults if zero.
	ConfigTimeout, PrepareTimeout, CleanupTimeout time.Duration
	GracefulKillTimeout, ForceKillTimeout         time.Duration
	// Clock stamps the job's state; the real clock if nil.
	Clock clock.PassiveClock
}

func (o Options) withDefaults() (Options, error) {
	if o.StageBinary == "" {
		o.StageBinary = DefaultStageBinary
	}
	switch {
	case o.GitLabRunner == "":
		return o, fmt.Errorf("%w: no gitlab-runner binary", ErrInvalidOptions)
	case !filepath.IsAbs(o.StageBinary):
		return o, fmt.Errorf("%w: the stage binary %q is not an absolute path", ErrInvalidOptions, o.StageBinary)
	case o.ConfigDir == "" || !filepath.IsAbs(o.ConfigDir):
		return o, fmt.Errorf("%w: the config directory %q is not an absolute path", ErrInvalidOptions, o.ConfigDir)
	case o.VM == nil:
		return o, fmt.Errorf("%w: no VM", ErrInvalidOptions)
	case !loginUserRe.MatchString(o.LoginUser):
		return o, fmt.Errorf("%w: %q is not a login user name", ErrInvalidOptions, o.LoginUser)
	case o.ConfigTimeout < 0 || o.PrepareTimeout < 0 || o.CleanupTimeout < 0 || o.GracefulKillTimeout < 0 || o.ForceKillTimeout < 0:
		return o, fmt.Errorf("%w: a negative timeout", ErrInvalidOptions)
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&o.ConfigTimeout, DefaultConfigTimeout)
	def(&o.PrepareTimeout, DefaultPrepareTimeout)
	def(&o.CleanupTimeout, DefaultCleanupTimeout)
	def(&o.GracefulKillTimeout, DefaultGracefulKillTimeout)
	def(&o.ForceKillTimeout, DefaultForceKillTimeout)
	return o, nil
}

// RunFunc is RunJob with opts, as the agent's job loop calls it.
func RunFunc(opts Options, log logr.Logger) jobloop.RunFunc {
	return func(ctx context.Context, cfg jobloop.Config, onState func(jobloop.State)) (jobloop.State, error) {
		return RunJob(ctx, cfg, opts, log, onState)
	}
}

// RunJob runs one job of cfg's runner on the host, in opts.VM:
//
//	gitlab-runner run-single --config <ConfigDir>/job-….toml --runner macrack --max-builds 1 [--wait-timeout N]
//
// The config file (0600, removed after) holds the URL, the token and the
// custom executor's four stages, macrack-runner-stage config|prepare|
// run|cleanup; the token is never in argv, and gitlab-runner reads the
// system id from ConfigDir's .runner_system_id, one per chassis. The
// stages reach opts.VM through a StageServer whose socket is in
// gitlab-runner's environment (EnvSocket), as are EnvVMUser and
// EnvVMHostname; CI_*, RUNNER_*, CUSTOM_* and MACRACK_* variables of this
// process are not passed on.
//
// It reports the job's state and ends as jobloop.RunProcess does: a
// refused token is jobloop.ErrRunnerForbidden, no job in cfg.WaitTimeout
// jobloop.ErrNoJob, and a ctx that ends stops gitlab-runner with SIGTERM,
// which fails the job and sends the running stage SIGTERM in turn.
// cfg.SystemID is replaced by the chassis's.
func RunJob(ctx context.Context, cfg jobloop.Config, opts Options, log logr.Logger, onState func(jobloop.State)) (jobloop.State, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return jobloop.State{}, err
	}
	if cfg.URL == "" || cfg.Token == "" {
		return jobloop.State{}, fmt.Errorf("%w: no GitLab URL or token", jobloop.ErrInvalidConfig)
	}
	if cfg.SystemID, err = EnsureSystemID(opts.ConfigDir); err != nil {
		return jobloop.State{}, err
	}
	srv, err := NewStageServer(opts.VM, ServerOptions{Dir: opts.SocketDir, Log: log.WithName("stages")})
	if err != nil {
		return jobloop.State{}, err
	}
	defer srv.Close()

	files, err := writeJobFiles(cfg, opts)
	defer files.remove()
	if err != nil {
		return jobloop.State{}, fmt.Errorf("%w: %w", jobloop.ErrProcess, err)
	}
	args := append([]string{"run-single", "--config", files.config, "--runner", runnerName, "--max-builds", "1"},
		jobloop.WaitTimeoutArgs(cfg)...)
	env := append(hostEnv(os.Environ()),
		EnvSocket+"="+srv.Socket(), EnvVMUser+"="+opts.LoginUser, EnvVMHostname+"="+opts.Hostname)
	log = log.WithValues("vm", opts.Hostname)
	return jobloop.RunCommand(ctx, cfg, jobloop.Command{Binary: opts.GitLabRunner, Args: args, Env: env}, opts.Clock, log, onState)
}

// runnerName names the one runner in the job's config file.
const runnerName = "macrack"

// jobFiles are a job's files in the config directory.
type jobFiles struct{ config, ca string }

func (f jobFiles) remove() {
	for _, p := range []string{f.config, f.ca} {
		if p != "" {
			os.Remove(p)
		}
	}
}

// writeJobFiles writes the job's config file and CA bundle, both 0600
// (CreateTemp's mode), into opts.ConfigDir.
func writeJobFiles(cfg jobloop.Config, opts Options) (jobFiles, error) {
	var f jobFiles
	write := func(pattern string, data []byte, to *string) error {
		file, err := os.CreateTemp(opts.ConfigDir, pattern)
		if err != nil {
			return err
		}
		*to = file.Name()
		_, werr := file.Write(data)
		return errors.Join(werr, file.Close())
	}
	if len(cfg.CABundle) > 0 {
		if err := write("job-*.pem", cfg.CABundle, &f.ca); err != nil {
			return f, fmt.Errorf("writing the CA bundle: %w", err)
		}
	}
	out := configOutput(opts.LoginUser, opts.Hostname)
	rc := runnerConfig{
		Name: runnerName, URL: cfg.URL, Token: cfg.Token, CAFile: f.ca,
		BuildsDir: out.BuildsDir, CacheDir: out.CacheDir, Stage: opts.StageBinary,
		ConfigTimeout: opts.ConfigTimeout, PrepareTimeout: opts.PrepareTimeout, CleanupTimeout: opts.CleanupTimeout,
		GracefulKillTimeout: opts.GracefulKillTimeout, ForceKillTimeout: opts.ForceKillTimeout,
	}
	if err := write("job-*.toml", []byte(rc.toml()), &f.config); err != nil {
		return f, fmt.Errorf("writing gitlab-runner's config file: %w", err)
	}
	return f, nil
}

// hostEnv is this process's environment without variables that would
// configure gitlab-runner (CI_*, RUNNER_*, CONFIG_FILE), its custom
// executor (CUSTOM_*), or the stages (MACRACK_*) behind RunJob's back.
func hostEnv(base []string) []string {
	env := make([]string, 0, len(base)+3)
	for _, kv := range base {
		switch {
		case strings.HasPrefix(kv, "CI_"), strings.HasPrefix(kv, "RUNNER_"), strings.HasPrefix(kv, "CUSTOM_"),
			strings.HasPrefix(kv, "MACRACK_"), strings.HasPrefix(kv, "CONFIG_FILE="):
		default:
			env = append(env, kv)
		}
	}
	return env
}
