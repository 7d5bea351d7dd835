package jobloop

import (
	"fmt"
	"runtime"
	"strings"
	"time"

	"github.com/boualleiguie/macrack-operator/internal/gitlab"
)

// Defaults.
const (
	// DefaultPollInterval is gitlab-runner's check_interval default
	// (common/consts.go CheckInterval).
	DefaultPollInterval = 3 * time.Second
	// DefaultTraceInterval is how often the trace is sent until GitLab's
	// X-GitLab-Trace-Update-Interval says otherwise.
	DefaultTraceInterval = time.Second
	// DefaultKeepAliveInterval is gitlab-runner's MinTraceForceSendInterval
	// (common/consts.go): a job that sent nothing for longer is touched
	// with a running update, since GitLab fails a running job untouched
	// for an hour as stuck_or_timeout_failure.
	DefaultKeepAliveInterval = 30 * time.Second
	// DefaultFinalUpdateTimeout bounds the last trace patches and the
	// final PUT once RunOne's ctx has ended: the VM is going away, so an
	// aborted job is reported, or given up on, in bounded time.
	DefaultFinalUpdateTimeout = 30 * time.Second
	// DefaultFinalUpdateRetries and DefaultFinalUpdateBackoffMax are
	// gitlab-runner's DefaultFinalUpdateRetryLimit and
	// DefaultfinalUpdateBackoffMax (common/consts.go): the final update is
	// tried 10 times, waiting 1 s, 2 s, 4 s… capped at 60 min between
	// tries (network/trace.go finishWithFinalUpdate).
	DefaultFinalUpdateRetries    = 10
	DefaultFinalUpdateBackoffMax = 60 * time.Minute
	// DefaultAbortGrace is how long a cancelled executor may take to stop
	// before the job is reported without it.
	DefaultAbortGrace = 5 * time.Second
	// DefaultJobTimeout is used when GitLab sends no timeout, GitLab's
	// default project timeout.
	DefaultJobTimeout = time.Hour
)

// Config is what the loop needs from the operator. It holds the runner
// token, so it prints without it.
type Config struct {
	// URL is GitLab's base URL, https://host[/path].
	URL string
	// Token is the runner authentication token (glrt-…).
	Token string
	// SystemID names this VM to GitLab as a runner manager; unique per VM.
	SystemID string
	// CABundle is PEM certificates to trust besides the system's roots.
	CABundle []byte
	// Tags are the runner's tags, for the log only: GitLab matches jobs
	// to a runner's tags on its side, a runner does not send them.
	Tags []string
	// MaxJobDuration caps the job's own timeout (runner_info.timeout)
	// when set.
	MaxJobDuration time.Duration
	// PollInterval is the wait between job requests; DefaultPollInterval
	// if zero.
	PollInterval time.Duration
	// WaitTimeout ends the loop with ErrNoJob when no job came in this
	// long (run-single's --wait-timeout); zero waits until ctx ends.
	WaitTimeout time.Duration
	// TraceInterval is how often the trace is sent while the job runs;
	// DefaultTraceInterval if zero. GitLab's X-GitLab-Trace-Update-Interval
	// replaces it once it answers, as in gitlab-runner.
	TraceInterval time.Duration
	// KeepAliveInterval is how long the job may send nothing before a
	// running update touches it; DefaultKeepAliveInterval if zero.
	KeepAliveInterval time.Duration
	// FinalUpdateTimeout bounds reporting the job's end once ctx has
	// ended; DefaultFinalUpdateTimeout if zero. Until then the final update
	// is retried as gitlab-runner retries it, with no overall bound.
	FinalUpdateTimeout time.Duration
	// FinalUpdateRetries is how many times the final update is tried;
	// DefaultFinalUpdateRetries if zero.
	FinalUpdateRetries int
	// FinalUpdateBackoffMax caps the doubling wait between final update
	// tries; DefaultFinalUpdateBackoffMax if zero.
	FinalUpdateBackoffMax time.Duration
	// AbortGrace bounds the wait for a cancelled executor to stop;
	// DefaultAbortGrace if zero.
	AbortGrace time.Duration
	// AllowHTTP accepts an http URL, for tests against a plain fake.
	AllowHTTP bool
}

// String describes the Config without its token or CA bundle.
func (c Config) String() string {
	return fmt.Sprintf("GitLab %s as %s (tags %s)", c.URL, c.SystemID, strings.Join(c.Tags, ","))
}

// GoString is String, so that %#v hides the token too.
func (c Config) GoString() string { return c.String() }

// MarshalLog is what logr prints for a Config.
func (c Config) MarshalLog() any {
	return struct {
		URL      string   `json:"url"`
		SystemID string   `json:"systemID"`
		Tags     []string `json:"tags,omitempty"`
	}{c.URL, c.SystemID, c.Tags}
}

// withDefaults checks c and fills its zero durations.
func (c Config) withDefaults() (Config, error) {
	switch {
	case c.URL == "":
		return c, fmt.Errorf("%w: no GitLab URL", ErrInvalidConfig)
	case c.Token == "":
		return c, fmt.Errorf("%w: no runner token", ErrInvalidConfig)
	case c.SystemID == "":
		return c, fmt.Errorf("%w: no system id", ErrInvalidConfig)
	case c.MaxJobDuration < 0 || c.PollInterval < 0 || c.WaitTimeout < 0 || c.TraceInterval < 0 ||
		c.KeepAliveInterval < 0 || c.FinalUpdateTimeout < 0 || c.FinalUpdateRetries < 0 ||
		c.FinalUpdateBackoffMax < 0 || c.AbortGrace < 0:
		return c, fmt.Errorf("%w: a negative duration", ErrInvalidConfig)
	}
	if c.PollInterval == 0 {
		c.PollInterval = DefaultPollInterval
	}
	if c.TraceInterval == 0 {
		c.TraceInterval = DefaultTraceInterval
	}
	if c.KeepAliveInterval == 0 {
		c.KeepAliveInterval = DefaultKeepAliveInterval
	}
	if c.FinalUpdateTimeout == 0 {
		c.FinalUpdateTimeout = DefaultFinalUpdateTimeout
	}
	if c.FinalUpdateRetries == 0 {
		c.FinalUpdateRetries = DefaultFinalUpdateRetries
	}
	if c.FinalUpdateBackoffMax == 0 {
		c.FinalUpdateBackoffMax = DefaultFinalUpdateBackoffMax
	}
	if c.AbortGrace == 0 {
		c.AbortGrace = DefaultAbortGrace
	}
	return c, nil
}

// jobTimeout is the job's timeout from GitLab, bounded by MaxJobDuration.
func (c Config) jobTimeout(seconds int) time.Duration {
	d := time.Duration(seconds) * time.Second
	if d <= 0 {
		d = DefaultJobTimeout
	}
	if c.MaxJobDuration > 0 && d > c.MaxJobDuration {
		d = c.MaxJobDuration
	}
	return d
}

// runnerInfo is what the loop tells GitLab about itself. It declares only
// what it does. GitLab does not refuse a job for needing images,
// services, artifacts or caches: it checks only its own fixed list of
// required features (Ci::Build#supported_runner? over
// runner_required_feature_names, such as multi_build_steps or
// return_exit_code), and fails a job needing one the runner lacks with
// runner_unsupported; anything else the job asks is the runner's to do or
// to ignore, as a shell runner ignores image:. It leaves out
// two_phase_job_commit, so GitLab marks the job running when it hands it
// out.
func runnerInfo(executor string) gitlab.RunnerInfo {
	return gitlab.RunnerInfo{
		Name:         "macrack-jobloop",
		Version:      "1.0.0",
		Platform:     runtime.GOOS,
		Architecture: runtime.GOARCH,
		Executor:     executor,
		Shell:        "sh",
		Features: gitlab.FeaturesInfo{
			Variables:       true,
			RawVariables:    true,
			Masking:         true,
			MultiBuildSteps: true,
			ReturnExitCode:  true,
			TraceReset:      true,
			TraceChecksum:   true,
			TraceSize:       true,
			Cancelable:      true,
		},
	}
}
