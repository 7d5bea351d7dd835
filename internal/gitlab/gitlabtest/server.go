// Package gitlabtest is a fake GitLab that speaks the runner API's wire
// shapes, status codes and headers (lib/api/ci/runner.rb and the services
// behind it), for unit tests of runners and for envtest suites.
//
// It keeps runner tokens and the managers (system_ids) that used them, a
// queue of jobs matched to runners by tag, each job's state and trace, and
// GitLab's auto-retry rule: a job that fails for a reason its retry:when
// lists is re-enqueued as a new job id of the same build, at most retry:max
// times; and GitLab's stuck-jobs reaper: a running job untouched (no trace
// patch, no update) for StaleJobTimeout fails as stuck_or_timeout_failure,
// on the server's clock. It checks Content-Range offsets byte for byte as GitLab does and
// answers 416 with the length it holds.
//
// Its server also serves the fake's own admin API under AdminPrefix
// (admin.go): queue a job, list the jobs, read a trace, over HTTP, for
// `make run` and for a person trying a runner by hand.
//
// Everything is safe for concurrent use. Accessors return copies, and none
// of them returns a token.
package gitlabtest

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	stdlog "log"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/utils/clock"

	"github.com/boualleiguie/macrack-operator/internal/gitlab"
)

// DefaultJobTimeout is a job's timeout when its JobSpec sets none,
// GitLab's default project timeout.
const DefaultJobTimeout = time.Hour

// StaleJobTimeout is how long a running job may go untouched (no trace
// patch, no update) before GitLab drops it as stuck_or_timeout_failure
// (Ci::StuckBuilds::DropRunningService, BUILD_RUNNING_OUTDATED_TIMEOUT).
const StaleJobTimeout = time.Hour

// Cleanuper is what NewServer needs of a test to close the server at its
// end: testing.TB and Ginkgo's GinkgoT() both have it.
type Cleanuper interface {
	Cleanup(func())
}

// Option configures a Server.
type Option func(*Server)

// WithPlainHTTP serves http instead of https; clients then need AllowHTTP.
func WithPlainHTTP() Option { return func(s *Server) { s.plain = true } }

// WithClock sets the clock for queue times and first/last seen; the real
// clock by default.
func WithClock(c clock.PassiveClock) Option { return func(s *Server) { s.clk = c } }

// WithTraceUpdateInterval sets the X-GitLab-Trace-Update-Interval sent with
// each trace patch answer, in seconds: GitLab sends 60, or 3 while someone
// watches the job's page. Default 3.
func WithTraceUpdateInterval(seconds int) Option {
	return func(s *Server) { s.traceInterval = seconds }
}

// WithStaleJobTimeout sets how long a running job may go untouched
// before the reaper fails it; StaleJobTimeout by default, 0 for never.
func WithStaleJobTimeout(d time.Duration) Option { return func(s *Server) { s.staleAfter = d } }

// WithLogger logs each request the fake answers (method, path, status) at
// V(1), and its HTTP server's own errors (a client's failed TLS handshake)
// at info: make run's bin/logs/fake-gitlab.log.
func WithLogger(l logr.Logger) Option { return func(s *Server) { s.log = &l } }

// Server is a fake GitLab. Create it with NewServer.
type Server struct {
	srv           *httptest.Server
	plain         bool
	clk           clock.PassiveClock
	traceInterval int
	staleAfter    time.Duration
	closeOnce     sync.Once
	closed        chan struct{}

	mu           sync.Mutex
	runners      map[string]*runner // by token
	nextRunnerID int64
	managers     map[managerKey]*Manager
	deleted      []Manager
	jobs         map[int64]*job
	jobOrder     []int64
	builds       map[int64]*build
	buildOrder   []int64
	nextJobID    int64
	nextBuildID  int64
	queueVersion int64
	counts       map[string]int
	cachedNoJob  int
	faults       map[string]*faultState
	// log, if set, is WithLogger's.
	log *logr.Logger
}

// NewServer starts a fake GitLab, over TLS unless WithPlainHTTP. If c is
// not nil the server closes when the test ends; otherwise call Close.
func NewServer(c Cleanuper, opts ...Option) *Server {
	s := &Server{
		clk:           clock.RealClock{},
		traceInterval: 3,
		staleAfter:    StaleJobTimeout,
		closed:        make(chan struct{}),
		runners:       map[string]*runner{},
		managers:      map[managerKey]*Manager{},
		jobs:          map[int64]*job{},
		builds:        map[int64]*build{},
		nextJobID:     1000,
		nextBuildID:   1,
		counts:        map[string]int{},
		faults:        map[string]*faultState{},
	}
	for _, o := range opts {
		o(s)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /api/v4/runners/verify", s.endpoint(gitlab.EndpointVerify, s.verify))
	mux.HandleFunc("DELETE /api/v4/runners/managers", s.endpoint(gitlab.EndpointUnregisterManager, s.unregisterManager))
	mux.HandleFunc("POST /api/v4/jobs/request", s.endpoint(gitlab.EndpointRequestJob, s.requestJob))
	mux.HandleFunc("PUT /api/v4/jobs/{id}", s.endpoint(gitlab.EndpointUpdateJob, s.updateJob))
	mux.HandleFunc("PATCH /api/v4/jobs/{id}/trace", s.endpoint(gitlab.EndpointPatchTrace, s.patchTrace))
	s.adminRoutes(mux)
	mux.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) {
		writeMessage(w, http.StatusNotFound, "404 Not Found")
	})
	var h http.Handler = mux
	if s.log != nil {
		h = accessLog(*s.log, mux)
	}
	s.srv = httptest.NewUnstartedServer(h)
	if s.log != nil {
		s.srv.Config.ErrorLog = stdlog.New(serverErrors{*s.log}, "", 0)
	}
	if s.plain {
		s.srv.Start()
	} else {
		s.srv.StartTLS()
	}
	if c != nil {
		c.Cleanup(s.Close)
	}
	return s
}

// URL is the server's base URL, to give to gitlab.New.
func (s *Server) URL() string { return s.srv.URL }

// CABundle is the PEM of the server's certificate, for Options.CABundle;
// nil with WithPlainHTTP.
func (s *Server) CABundle() []byte {
	if s.plain {
		return nil
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: s.srv.Certificate().Raw})
}

// ClientOptions are gitlab.Options that reach this server.
func (s *Server) ClientOptions() gitlab.Options {
	return gitlab.Options{CABundle: s.CABundle(), AllowHTTP: s.plain}
}

// NewClient returns a gitlab.Client for this server.
func (s *Server) NewClient() (*gitlab.Client, error) {
	return gitlab.New(s.URL(), s.ClientOptions())
}

// Close stops the server, releasing any stalled request first.
func (s *Server) Close() {
	s.closeOnce.Do(func() {
		close(s.closed)
		s.srv.Close()
	})
}

// runner is a runner token and what it may pick.
type runner struct {
	id          int64
	tags        []string
	runUntagged bool
	revoked     bool
}

// RunnerOption configures a runner token.
type RunnerOption func(*runner)

// WithTags gives the runner tags: it picks jobs whose tags it all has.
func WithTags(tags ...string) RunnerOption {
	return func(r *runner) { r.tags = slices.Clone(tags) }
}

// WithRunUntagged sets whether the runner picks jobs without tags; true
// by default.
func WithRunUntagged(b bool) RunnerOption { return func(r *runner) { r.runUntagged = b } }

// AddRunnerToken registers a runner authentication token (glrt-…) and
// returns the runner's id. Adding a token again replaces its options and
// lifts a revocation.
func (s *Server) AddRunnerToken(token string, opts ...RunnerOption) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.runners[token]
	if !ok {
		s.nextRunnerID++
		r = &runner{id: s.nextRunnerID}
		s.runners[token] = r
	}
	r.tags, r.runUntagged, r.revoked = nil, true, false
	for _, o := range opts {
		o(r)
	}
	return r.id
}

// RevokeRunnerToken revokes a token: from then on every endpoint that
// takes it answers 403, as GitLab does for a token it cannot find. Job
// tokens of jobs it already took stay valid, as in GitLab.
func (s *Server) RevokeRunnerToken(token string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if r, ok := s.runners[token]; ok {
		r.revoked = true
	}
}

// liveRunner returns the runner of a token that is known and not revoked.
// Callers hold mu.
func (s *Server) liveRunner(token string) *runner {
	r, ok := s.runners[token]
	if !ok || r.revoked {
		return nil
	}
	return r
}

// Manager is a runner manager: one system_id that used a runner's token.
type Manager struct {
	RunnerID  int64
	SystemID  string
	FirstSeen time.Time
	LastSeen  time.Time
}

type managerKey struct {
	runnerID int64
	systemID string
}

// touchManager records that systemID used runner r. Callers hold mu.
func (s *Server) touchManager(r *runner, systemID string) {
	if systemID == "" {
		return
	}
	now := s.clk.Now()
	k := managerKey{r.id, systemID}
	m, ok := s.managers[k]
	if !ok {
		m = &Manager{RunnerID: r.id, SystemID: systemID, FirstSeen: now}
		s.managers[k] = m
	}
	m.LastSeen = now
}

// Managers returns the live managers, by runner id then system id.
func (s *Server) Managers() []Manager {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Manager, 0, len(s.managers))
	for _, m := range s.managers {
		out = append(out, *m)
	}
	slices.SortFunc(out, func(a, b Manager) int {
		return cmp.Or(cmp.Compare(a.RunnerID, b.RunnerID), cmp.Compare(a.SystemID, b.SystemID))
	})
	return out
}

// DeletedManagers returns the managers deleted through DELETE
// /runners/managers, in the order they were deleted.
func (s *Server) DeletedManagers() []Manager {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.deleted)
}

// Requests counts the requests an endpoint received, faulted ones
// included. endpoint is one of the gitlab.Endpoint constants.
func (s *Server) Requests(endpoint string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.counts[endpoint]
}

// LastUpdateHits counts job requests answered 204 from their last_update
// alone, without looking at the queue (GitLab's build_not_found_cached):
// how a test sees that a runner sends X-GitLab-Last-Update back.
func (s *Server) LastUpdateHits() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cachedNoJob
}

// Fault makes an endpoint misbehave, for fault tests.
type Fault struct {
	// Stall holds each request this long first (real time), or until the
	// client gives up or the server closes.
	Stall time.Duration
	// Status, if not 0, answers it instead of handling the request: a
	// GitLab-style {"message": "500 Internal Server Error"} for an error,
	// or the bare code as text for a 2xx, as GitLab answers a 202 to a
	// job update it has not applied yet (with Header carrying
	// X-GitLab-Trace-Update-Interval). With Status 0 the request is
	// handled normally after the stall.
	Status int
	// Header is added to a faulted answer.
	Header http.Header
	// AfterHandling handles the request first and then answers Status in
	// place of the real answer: the answer was lost on the way, as behind
	// a proxy that timed out after GitLab did the work.
	AfterHandling bool
	// Times is how many requests the fault affects; 0 means all, until
	// ClearFault.
	Times int
}

type faultState struct {
	Fault
	left int
}

// SetFault makes endpoint (a gitlab.Endpoint constant) misbehave.
func (s *Server) SetFault(endpoint string, f Fault) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults[endpoint] = &faultState{Fault: f, left: f.Times}
}

// ClearFault makes endpoint behave again.
func (s *Server) ClearFault(endpoint string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.faults, endpoint)
}

// endpoint wraps a handler with the request count and any fault.
func (s *Server) endpoint(name string, h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.reap()
		s.counts[name]++
		var f *Fault
		if fs := s.faults[name]; fs != nil {
			cp := fs.Fault
			f = &cp
			if fs.Times > 0 {
				if fs.left--; fs.left <= 0 {
					delete(s.faults, name)
				}
			}
		}
		s.mu.Unlock()
		if f != nil {
			if f.Stall > 0 && !s.stall(r.Context(), f.Stall) {
				return
			}
			if f.Status != 0 {
				if f.AfterHandling {
					h(httptest.NewRecorder(), r)
				}
				for k, vs := range f.Header {
					w.Header()[k] = vs
				}
				switch {
				case f.Status == http.StatusNoContent:
					w.WriteHeader(f.Status)
				case f.Status < 300:
					writeText(w, f.Status, fmt.Sprint(f.Status))
				default:
					writeMessage(w, f.Status, fmt.Sprintf("%d %s", f.Status, http.StatusText(f.Status)))
				}
				return
			}
		}
		h(w, r)
	}
}

// stall waits d, and says whether to go on answering.
func (s *Server) stall(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
	case <-s.closed:
	}
	return false
}

// newJobToken makes a job token, prefixed as GitLab's are (Ci::Build
// TOKEN_PREFIX "glcbt-").
func newJobToken() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return "glcbt-" + hex.EncodeToString(b)
}

// accessLog logs each request after h answers it.
func accessLog(l logr.Logger, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := &statusRecorder{ResponseWriter: w, status: http.StatusOK}
		h.ServeHTTP(rec, r)
		l.V(1).Info("Request", "method", r.Method, "path", r.URL.Path, "status", rec.status)
	})
}

type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (s *statusRecorder) WriteHeader(code int) {
	s.status = code
	s.ResponseWriter.WriteHeader(code)
}

// Unwrap lets http.ResponseController reach the writer's own methods.
func (s *statusRecorder) Unwrap() http.ResponseWriter { return s.ResponseWriter }

// serverErrors is the HTTP server's ErrorLog, into the logger.
type serverErrors struct{ log logr.Logger }

func (e serverErrors) Write(p []byte) (int, error) {
	e.log.Info("HTTP server error", "detail", strings.TrimSpace(string(p)))
	return len(p), nil
}
