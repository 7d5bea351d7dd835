package gitlabtest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/boualleiguie/macrack-operator/internal/gitlab"
)

// AdminPrefix is where the fake's own admin API lives: a test and dev
// surface, not GitLab's API, and spoken by no runner. It lets a person or a
// script drive the fake over HTTP as tests drive it through EnqueueJob and
// Jobs: `make run` serves it, so that a GitLabRunner can be watched taking
// jobs without a GitLab. GitLab never serves this path (its own /-/ paths
// are health, readiness and metrics).
//
//	POST /-/fake/jobs              queue a job: {"name", "stage", "script",
//	                               "tags", "retry": {"max", "when",
//	                               "exit_codes"}, "timeout"}; 201 with
//	                               {"build_id", "job_id"}, 400 for a job
//	                               GitLab would refuse to create
//	GET  /-/fake/jobs              every job, oldest first, one a line: its
//	                               id, build, attempt, state, failure reason,
//	                               exit code, runner, system_id and times
//	GET  /-/fake/jobs/{id}/trace   a job's trace, as text
//
// It has no authentication: whoever reaches the server may queue jobs and
// read traces. It never answers a runner token or a job token.
const AdminPrefix = "/-/fake/"

// AdminJob is the body of POST /-/fake/jobs: a JobSpec in JSON.
type AdminJob struct {
	Name   string     `json:"name,omitempty"`
	Stage  string     `json:"stage,omitempty"`
	Script []string   `json:"script"`
	Tags   []string   `json:"tags,omitempty"`
	Retry  AdminRetry `json:"retry,omitzero"`
	// Timeout is a Go duration ("10m") or a number of seconds; 0 or unset
	// is DefaultJobTimeout.
	Timeout AdminDuration `json:"timeout,omitzero"`
}

// AdminRetry is a job's retry: keyword in JSON.
type AdminRetry struct {
	Max       int      `json:"max,omitempty"`
	When      []string `json:"when,omitempty"`
	ExitCodes []int    `json:"exit_codes,omitempty"`
}

// AdminDuration reads a Go duration string ("90s", "10m") or a number of
// seconds, and writes a Go duration string.
type AdminDuration time.Duration

// UnmarshalJSON reads "10m" or 600.
func (d *AdminDuration) UnmarshalJSON(b []byte) error {
	var secs float64
	if err := json.Unmarshal(b, &secs); err == nil {
		*d = AdminDuration(secs * float64(time.Second))
		return nil
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("timeout %s: want a duration such as \"10m\", or seconds", b)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("timeout %q: want a duration such as \"10m\", or seconds", s)
	}
	*d = AdminDuration(v)
	return nil
}

// MarshalJSON writes "10m0s".
func (d AdminDuration) MarshalJSON() ([]byte, error) {
	return json.Marshal(time.Duration(d).String())
}

// AdminQueued is the answer to POST /-/fake/jobs.
type AdminQueued struct {
	// BuildID is the build, which retries of the job share.
	BuildID int64 `json:"build_id"`
	// JobID is the build's first job: the id a runner sees, and the one
	// whose trace /-/fake/jobs/{id}/trace returns.
	JobID int64 `json:"job_id"`
}

// AdminJobStatus is one job in GET /-/fake/jobs: a Job without its trace.
type AdminJobStatus struct {
	ID            int64                `json:"id"`
	BuildID       int64                `json:"build_id"`
	Name          string               `json:"name"`
	Attempt       int                  `json:"attempt"`
	State         gitlab.JobState      `json:"state"`
	FailureReason gitlab.FailureReason `json:"failure_reason,omitempty"`
	ExitCode      int                  `json:"exit_code,omitempty"`
	RunnerID      int64                `json:"runner_id,omitempty"`
	SystemID      string               `json:"system_id,omitempty"`
	Retried       bool                 `json:"retried,omitempty"`
	QueuedAt      time.Time            `json:"queued_at"`
	StartedAt     time.Time            `json:"started_at,omitzero"`
	FinishedAt    time.Time            `json:"finished_at,omitzero"`
}

// adminRoutes adds the admin API to mux.
func (s *Server) adminRoutes(mux *http.ServeMux) {
	mux.HandleFunc("POST "+AdminPrefix+"jobs", s.adminEnqueue)
	mux.HandleFunc("GET "+AdminPrefix+"jobs", s.adminJobs)
	mux.HandleFunc("GET "+AdminPrefix+"jobs/{id}/trace", s.adminTrace)
}

// spec checks the job as GitLab checks a .gitlab-ci.yml job, and makes it
// a JobSpec.
func (a AdminJob) spec() (JobSpec, error) {
	spec := JobSpec{
		Name: a.Name, Stage: a.Stage, Script: a.Script, Tags: a.Tags, Timeout: time.Duration(a.Timeout),
		Retry: Retry{Max: a.Retry.Max, When: a.Retry.When, ExitCodes: a.Retry.ExitCodes},
	}
	if len(spec.Script) == 0 {
		return spec, errors.New("script is missing: a job needs at least one line")
	}
	if spec.Timeout < 0 {
		return spec, fmt.Errorf("timeout %s is negative", spec.Timeout)
	}
	return spec, spec.Retry.validate()
}

// POST /-/fake/jobs: 400 {"error": …} for a body that does not parse, has
// a field the API does not know, or is a job GitLab would refuse; else 201
// with the build and job ids.
func (s *Server) adminEnqueue(w http.ResponseWriter, r *http.Request) {
	var req AdminJob
	dec := json.NewDecoder(io.LimitReader(r.Body, maxJSONBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		writeError(w, http.StatusBadRequest, "malformed job: "+err.Error())
		return
	}
	spec, err := req.spec()
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	buildID := s.EnqueueJob(spec)
	s.mu.Lock()
	jobID := s.builds[buildID].jobs[0]
	s.mu.Unlock()
	writeJSON(w, http.StatusCreated, AdminQueued{BuildID: buildID, JobID: jobID})
}

// GET /-/fake/jobs: every job, oldest first, as a JSON array with one job
// a line, for a terminal.
func (s *Server) adminJobs(w http.ResponseWriter, _ *http.Request) {
	var b bytes.Buffer
	b.WriteString("[")
	for i, j := range s.Jobs() {
		line, err := json.Marshal(AdminJobStatus{
			ID: j.ID, BuildID: j.BuildID, Name: j.Name, Attempt: j.Attempt, State: j.State,
			FailureReason: j.FailureReason, ExitCode: j.ExitCode, RunnerID: j.RunnerID, SystemID: j.SystemID,
			Retried: j.Retried, QueuedAt: j.QueuedAt, StartedAt: j.StartedAt, FinishedAt: j.FinishedAt,
		})
		if err != nil {
			writeMessage(w, http.StatusInternalServerError, "500 Internal Server Error")
			return
		}
		if i > 0 {
			b.WriteString(",")
		}
		b.WriteString("\n")
		b.Write(line)
	}
	b.WriteString("\n]\n")
	w.Header().Set("Content-Type", "application/json")
	_, _ = b.WriteTo(w)
}

// GET /-/fake/jobs/{id}/trace: 400 for an id that is not a number, 404 for
// a job the fake does not have, else 200 with the trace as text.
func (s *Server) adminTrace(w http.ResponseWriter, r *http.Request) {
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil {
		writeError(w, http.StatusBadRequest, "job id "+strconv.Quote(r.PathValue("id"))+" is not a number")
		return
	}
	j, ok := s.Job(id)
	if !ok {
		writeMessage(w, http.StatusNotFound, "404 Job Not Found")
		return
	}
	writeText(w, http.StatusOK, j.Trace)
}
