package gitlabtest

import (
	"crypto/subtle"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/boualleiguie/macrack-operator/internal/gitlab"
)

// Request body limits: GitLab's own are far larger, these only keep a
// broken client from filling the test's memory.
const (
	maxJSONBody  = 1 << 20
	maxTraceBody = 4 << 20
)

// POST /runners/verify: 400 without a token, 403 for an unknown or
// revoked one, else 200 with the runner (Entities::Ci::
// RunnerRegistrationDetails), registering system_id as a manager.
func (s *Server) verify(w http.ResponseWriter, r *http.Request) {
	var req gitlab.VerifyRunnerRequest
	if !decode(w, r, &req) {
		return
	}
	if req.Token == "" {
		writeError(w, http.StatusBadRequest, "token is missing")
		return
	}
	s.mu.Lock()
	rn := s.liveRunner(req.Token)
	if rn != nil {
		s.touchManager(rn, req.SystemID)
	}
	s.mu.Unlock()
	if rn == nil {
		writeMessage(w, http.StatusForbidden, "403 Forbidden")
		return
	}
	writeJSON(w, http.StatusOK, struct {
		ID             int64      `json:"id"`
		Token          string     `json:"token"`
		TokenExpiresAt *time.Time `json:"token_expires_at"`
	}{rn.id, req.Token, nil})
}

// DELETE /runners/managers: 400 without token or system_id, 403 for a bad
// token, 404 for a manager the runner does not have, else 204.
func (s *Server) unregisterManager(w http.ResponseWriter, r *http.Request) {
	var req gitlab.UnregisterRunnerManagerRequest
	if !decode(w, r, &req) {
		return
	}
	switch {
	case req.Token == "":
		writeError(w, http.StatusBadRequest, "token is missing")
		return
	case req.SystemID == "":
		writeError(w, http.StatusBadRequest, "system_id is missing")
		return
	}
	s.mu.Lock()
	rn := s.liveRunner(req.Token)
	var m *Manager
	if rn != nil {
		k := managerKey{rn.id, req.SystemID}
		if m = s.managers[k]; m != nil {
			delete(s.managers, k)
			s.deleted = append(s.deleted, *m)
		}
	}
	s.mu.Unlock()
	switch {
	case rn == nil:
		writeMessage(w, http.StatusForbidden, "403 Forbidden")
	case m == nil:
		writeMessage(w, http.StatusNotFound, "404 Runner manager not found Not Found")
	default:
		w.WriteHeader(http.StatusNoContent)
	}
}

// POST /jobs/request, as lib/api/ci/helpers/job_request.rb runs it: 403
// for a bad token; 204 with the same X-GitLab-Last-Update when the
// runner's last_update is still the queue's; else the oldest pending job
// the runner may take as a 201, or 204 with the queue's current value.
func (s *Server) requestJob(w http.ResponseWriter, r *http.Request) {
	var req gitlab.JobRequest
	if !decode(w, r, &req) {
		return
	}
	if req.Token == "" {
		writeError(w, http.StatusBadRequest, "token is missing")
		return
	}
	s.mu.Lock()
	rn := s.liveRunner(req.Token)
	if rn == nil {
		s.mu.Unlock()
		writeMessage(w, http.StatusForbidden, "403 Forbidden")
		return
	}
	s.touchManager(rn, req.SystemID)
	current := strconv.FormatInt(s.queueVersion, 10)
	if req.LastUpdate != "" && req.LastUpdate == current {
		s.cachedNoJob++
		s.mu.Unlock()
		w.Header().Set("X-GitLab-Last-Update", req.LastUpdate)
		w.WriteHeader(http.StatusNoContent)
		return
	}
	j := s.pick(rn, req.SystemID)
	if j == nil {
		s.mu.Unlock()
		w.Header().Set("X-GitLab-Last-Update", current)
		w.WriteHeader(http.StatusNoContent)
		return
	}
	body := s.payload(j)
	s.mu.Unlock()
	writeJSON(w, http.StatusCreated, body)
}

// PUT /jobs/:id, as Ci::UpdateBuildStateService answers: 400 without a
// token; 403 for an unknown job or a wrong token; 403 with Job-Status when
// the job no longer runs; 200 for running (a keep-alive), success or
// failed, applying the auto-retry rule to a failure; 400 for any other
// state.
func (s *Server) updateJob(w http.ResponseWriter, r *http.Request) {
	var req gitlab.UpdateJobRequest
	if !decode(w, r, &req) {
		return
	}
	if req.Token == "" {
		writeError(w, http.StatusBadRequest, "token is missing")
		return
	}
	s.mu.Lock()
	j, denied := s.authenticateJob(r, req.Token)
	if denied != nil {
		s.mu.Unlock()
		denied(w)
		return
	}
	switch req.State {
	case gitlab.StateRunning:
		j.touchedAt = s.clk.Now()
	case gitlab.StateSuccess, gitlab.StateFailed:
		s.finish(j, req.State, req.FailureReason, req.ExitCode, req.Output)
	default:
		s.mu.Unlock()
		writeMessage(w, http.StatusBadRequest, "400 Bad request")
		return
	}
	state := j.state
	s.mu.Unlock()
	w.Header().Set("Job-Status", string(state))
	writeText(w, http.StatusOK, "200")
}

// PATCH /jobs/:id/trace, as Ci::AppendBuildTraceService answers: 403 as
// for a job update; 400 without Content-Range; 416 with "Range: 0-<size>"
// unless the range starts exactly where the trace ends (only its start is
// read, as GitLab reads it); else 202 with Job-Status, Range and
// X-GitLab-Trace-Update-Interval.
func (s *Server) patchTrace(w http.ResponseWriter, r *http.Request) {
	token := r.URL.Query().Get("token")
	if token == "" {
		token = r.Header.Get("JOB-TOKEN")
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxTraceBody+1))
	if err != nil {
		writeMessage(w, http.StatusBadRequest, "400 Bad request")
		return
	}
	if len(body) > maxTraceBody {
		writeMessage(w, http.StatusRequestEntityTooLarge, "413 Request Entity Too Large")
		return
	}
	s.mu.Lock()
	j, denied := s.authenticateJob(r, token)
	if denied != nil {
		s.mu.Unlock()
		denied(w)
		return
	}
	cr, ok := r.Header["Content-Range"]
	if !ok {
		s.mu.Unlock()
		writeMessage(w, http.StatusBadRequest, "400 Missing header Content-Range")
		return
	}
	start := rubyToI(strings.SplitN(strings.Join(cr, ","), "-", 2)[0])
	size := int64(len(j.trace))
	if start != size {
		s.mu.Unlock()
		w.Header().Set("Range", "0-"+strconv.FormatInt(size, 10))
		writeMessage(w, http.StatusRequestedRangeNotSatisfiable, "416 Range Not Satisfiable")
		return
	}
	j.trace = append(j.trace, body...)
	j.touchedAt = s.clk.Now()
	size, state, interval := int64(len(j.trace)), j.state, s.traceInterval
	s.mu.Unlock()
	w.Header().Set("Job-Status", string(state))
	w.Header().Set("Range", "0-"+strconv.FormatInt(size, 10))
	w.Header().Set("X-GitLab-Trace-Update-Interval", strconv.Itoa(interval))
	w.WriteHeader(http.StatusAccepted)
}

// authenticateJob is lib/api/ci/helpers/runner.rb authenticate_job!: the
// job must exist, the token must be its token, and it must be running.
// It returns the job, or how to deny the request. Callers hold mu.
func (s *Server) authenticateJob(r *http.Request, token string) (*job, func(http.ResponseWriter)) {
	forbidden := func(w http.ResponseWriter) { writeMessage(w, http.StatusForbidden, "403 Forbidden") }
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil {
		return nil, forbidden
	}
	j, ok := s.jobs[id]
	if !ok || j.token == "" || subtle.ConstantTimeCompare([]byte(j.token), []byte(token)) != 1 {
		return nil, forbidden
	}
	if j.state != gitlab.StateRunning {
		state := j.state
		return nil, func(w http.ResponseWriter) {
			w.Header().Set("Job-Status", string(state))
			writeMessage(w, http.StatusForbidden, "403 Forbidden - Job is not running")
		}
	}
	return j, nil
}

// rubyToI is Ruby's String#to_i: leading digits, else 0.
func rubyToI(s string) int64 {
	s = strings.TrimSpace(s)
	end := 0
	for end < len(s) && s[end] >= '0' && s[end] <= '9' {
		end++
	}
	n, err := strconv.ParseInt(s[:end], 10, 64)
	if err != nil {
		return 0
	}
	return n
}

// decode reads a JSON body, answering 400 if it does not parse.
func decode(w http.ResponseWriter, r *http.Request, v any) bool {
	if err := json.NewDecoder(io.LimitReader(r.Body, maxJSONBody)).Decode(v); err != nil {
		writeMessage(w, http.StatusBadRequest, "400 Bad request - malformed JSON")
		return false
	}
	return true
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

// writeMessage answers as Grape's error! does: {"message": "..."}.
func writeMessage(w http.ResponseWriter, code int, msg string) {
	writeJSON(w, code, map[string]string{"message": msg})
}

// writeError answers as Grape's parameter validation does: {"error": "..."}.
func writeError(w http.ResponseWriter, code int, msg string) {
	writeJSON(w, code, map[string]string{"error": msg})
}

func writeText(w http.ResponseWriter, code int, body string) {
	w.Header().Set("Content-Type", "text/plain")
	w.WriteHeader(code)
	_, _ = io.WriteString(w, body)
}
