package gitlab

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Endpoints, as errors name them (with the job id in place of :id).
const (
	EndpointVerify            = "POST /api/v4/runners/verify"
	EndpointUnregisterManager = "DELETE /api/v4/runners/managers"
	EndpointRequestJob        = "POST /api/v4/jobs/request"
	EndpointUpdateJob         = "PUT /api/v4/jobs/:id"
	EndpointPatchTrace        = "PATCH /api/v4/jobs/:id/trace"
)

// VerifyResult is what GitLab says of a valid runner token.
type VerifyResult struct {
	// ID is the runner's id; 0 from a GitLab too old to send it.
	ID int64
	// TokenExpiresAt is when the token expires; zero if it does not.
	TokenExpiresAt time.Time
}

// UpdateResult is GitLab's answer to a job update.
type UpdateResult struct {
	// Accepted is a 202: GitLab has the update but has not applied it yet
	// (it is still persisting the trace) and wants it sent again after
	// UpdateInterval, as gitlab-runner's finalUpdate loop does.
	Accepted bool
	// UpdateInterval is X-GitLab-Trace-Update-Interval; zero if absent.
	UpdateInterval time.Duration
	// JobStatus is the Job-Status header, the job's state after the update.
	JobStatus JobState
}

// TraceResult is GitLab's answer to a trace patch.
type TraceResult struct {
	// Offset is where the next patch starts: the end of what was sent.
	Offset int64
	// UpdateInterval is X-GitLab-Trace-Update-Interval, how often GitLab
	// wants patches; zero if absent.
	UpdateInterval time.Duration
	// JobStatus is the Job-Status header.
	JobStatus JobState
	// CancelRequested is a Job-Status of "canceling": the user cancelled
	// the job and GitLab waits for the runner to stop it
	// (network/remote_job_state_response.go IsCanceled).
	CancelRequested bool
}

// VerifyRunner checks a runner token and registers systemID as one of the
// runner's managers (POST /runners/verify). A revoked or wrong token
// answers 403, which wraps ErrForbidden.
func (cl *Client) VerifyRunner(ctx context.Context, token, systemID string) (VerifyResult, error) {
	c, err := jsonCall(http.MethodPost, "runners/verify", EndpointVerify, VerifyRunnerRequest{
		Token: token, SystemID: systemID,
	}, token)
	if err != nil {
		return VerifyResult{}, err
	}
	c.header.Set(headerRunnerToken, token)
	r, err := cl.do(ctx, c)
	if err != nil {
		return VerifyResult{}, err
	}
	if r.code != http.StatusOK {
		return VerifyResult{}, r.statusError(c)
	}
	// GitLab before 15.x answered a bare "200"; gitlab-runner accepts that
	// too and so does this.
	var v VerifyRunnerResponse
	if r.isJSON() && json.Unmarshal(r.body, &v) != nil {
		return VerifyResult{}, fmt.Errorf("%s: %d: %w: body is not a runner", c.endpoint, r.code, ErrBadResponse)
	}
	return VerifyResult{ID: v.ID, TokenExpiresAt: v.TokenExpiresAt}, nil
}

// UnregisterManager deletes the runner manager systemID of the runner
// whose token this is (DELETE /runners/managers), as gitlab-runner does
// when it stops for good. It wraps ErrNotFound if GitLab has no such
// manager.
func (cl *Client) UnregisterManager(ctx context.Context, token, systemID string) error {
	c, err := jsonCall(http.MethodDelete, "runners/managers", EndpointUnregisterManager, UnregisterRunnerManagerRequest{
		Token: token, SystemID: systemID,
	}, token)
	if err != nil {
		return err
	}
	c.header.Set(headerRunnerToken, token)
	r, err := cl.do(ctx, c)
	if err != nil {
		return err
	}
	if r.code != http.StatusNoContent {
		return r.statusError(c)
	}
	return nil
}

// RequestJob asks for a job (POST /jobs/request). It returns a nil job on
// 204, when there is none. nextLastUpdate is the X-GitLab-Last-Update to
// send next time, or lastUpdate again if GitLab sent none; with it GitLab
// answers 204 at once while the runner's queue is unchanged. A 409 (GitLab
// lost a race handing the job out) wraps ErrConflict: ask again.
func (cl *Client) RequestJob(ctx context.Context, token, systemID string, info RunnerInfo, lastUpdate string) (job *JobResponse, nextLastUpdate string, err error) {
	c, err := jsonCall(http.MethodPost, "jobs/request", EndpointRequestJob, JobRequest{
		Info: info, Token: token, SystemID: systemID, LastUpdate: lastUpdate,
	}, token)
	if err != nil {
		return nil, lastUpdate, err
	}
	c.header.Set(headerRunnerToken, token)
	c.maxBody = maxJobBody
	r, err := cl.do(ctx, c)
	if err != nil {
		return nil, lastUpdate, err
	}
	next := lastUpdate
	if lu := r.header.Get(headerLastUpdate); lu != "" {
		next = lu
	}
	switch r.code {
	case http.StatusCreated:
	case http.StatusNoContent:
		return nil, next, nil
	default:
		return nil, next, r.statusError(c)
	}
	switch {
	case r.truncated:
		return nil, next, fmt.Errorf("%s: %d: %w: job payload over %d bytes", c.endpoint, r.code, ErrBadResponse, maxJobBody)
	case !r.isJSON():
		return nil, next, fmt.Errorf("%s: %d: %w: job payload is not application/json", c.endpoint, r.code, ErrBadResponse)
	}
	job = new(JobResponse)
	if err := json.Unmarshal(r.body, job); err != nil {
		return nil, next, fmt.Errorf("%s: %d: %w: job payload does not decode", c.endpoint, r.code, ErrBadResponse)
	}
	if job.ID <= 0 || job.Token == "" {
		return nil, next, fmt.Errorf("%s: %d: %w: job payload without id or token", c.endpoint, r.code, ErrBadResponse)
	}
	return job, next, nil
}

// JobUpdate is a job's state for UpdateJob.
type JobUpdate struct {
	// Info is the runner's metadata, sent as gitlab-runner sends it.
	Info RunnerInfo
	// State is running (a keep-alive), success or failed.
	State JobState
	// FailureReason says why a failed job failed.
	FailureReason FailureReason
	// ExitCode is the script's exit code; 0 is not sent.
	ExitCode int
	// Output describes the whole trace, for GitLab to check it has it all.
	Output JobTraceOutput
}

// UpdateJob reports a job's state (PUT /jobs/:id). A 202 is not an error:
// the result says Accepted, and the caller sends the same update again
// after UpdateInterval. A 403 (the job no longer runs, or the token is
// wrong) wraps ErrForbidden and carries GitLab's Job-Status; a 412 wraps
// ErrTraceValidation.
func (cl *Client) UpdateJob(ctx context.Context, jobID int64, jobToken string, u JobUpdate) (UpdateResult, error) {
	if jobID <= 0 {
		return UpdateResult{}, fmt.Errorf("%s: %w: job id %d", EndpointUpdateJob, ErrInvalidConfig, jobID)
	}
	path := "jobs/" + strconv.FormatInt(jobID, 10)
	c, err := jsonCall(http.MethodPut, path, "PUT /api/v4/"+path, UpdateJobRequest{
		Info:          u.Info,
		Token:         jobToken,
		State:         u.State,
		FailureReason: u.FailureReason,
		Checksum:      u.Output.Checksum,
		Output:        u.Output,
		ExitCode:      u.ExitCode,
	}, jobToken)
	if err != nil {
		return UpdateResult{}, err
	}
	c.header.Set(headerJobToken, jobToken)
	r, err := cl.do(ctx, c)
	if err != nil {
		return UpdateResult{}, err
	}
	res := UpdateResult{
		UpdateInterval: interval(r.header),
		JobStatus:      JobState(sanitise(r.header.Get(headerJobStatus))),
	}
	switch r.code {
	case http.StatusOK:
		return res, nil
	case http.StatusAccepted:
		res.Accepted = true
		return res, nil
	default:
		return res, r.statusError(c)
	}
}

// PatchTrace appends content to the job's trace at offset (PATCH
// /jobs/:id/trace, Content-Range "<offset>-<last byte>", as gitlab-runner
// writes it). Empty content sends nothing. A 416 returns a
// *RangeMismatchError (errors.As) whose Offset is the length of GitLab's
// copy: send again from there, as gitlab-runner's sendPatch does.
func (cl *Client) PatchTrace(ctx context.Context, jobID int64, jobToken string, content []byte, offset int64) (TraceResult, error) {
	if jobID <= 0 || offset < 0 {
		return TraceResult{}, fmt.Errorf("%s: %w: job id %d, offset %d", EndpointPatchTrace, ErrInvalidConfig, jobID, offset)
	}
	if len(content) == 0 {
		return TraceResult{Offset: offset}, nil
	}
	end := offset + int64(len(content))
	path := "jobs/" + strconv.FormatInt(jobID, 10) + "/trace"
	c := call{
		method:   http.MethodPatch,
		path:     path,
		query:    url.Values{"debug_trace": {"false"}},
		endpoint: "PATCH /api/v4/" + path,
		header:   http.Header{},
		body:     content,
		ctype:    "text/plain",
		secrets:  []string{jobToken},
	}
	sent := fmt.Sprintf("%d-%d", offset, end-1)
	c.header.Set(headerJobToken, jobToken)
	c.header.Set(headerContentRange, sent)
	r, err := cl.do(ctx, c)
	if err != nil {
		return TraceResult{}, err
	}
	res := TraceResult{
		Offset:         offset,
		UpdateInterval: interval(r.header),
		JobStatus:      JobState(sanitise(r.header.Get(headerJobStatus))),
	}
	res.CancelRequested = res.JobStatus == StateCanceling
	switch r.code {
	case http.StatusAccepted:
		res.Offset = end
		return res, nil
	case http.StatusRequestedRangeNotSatisfiable:
		return res, &RangeMismatchError{Endpoint: c.endpoint, Sent: sent, Offset: rangeEnd(r.header.Get(headerRange))}
	default:
		return res, r.statusError(c)
	}
}

// jsonCall builds a call with a JSON body.
func jsonCall(method, path, endpoint string, body any, secrets ...string) (call, error) {
	b, err := json.Marshal(body)
	if err != nil {
		return call{}, fmt.Errorf("%s: encoding request: %w", endpoint, err)
	}
	h := http.Header{}
	h.Set("Accept", "application/json")
	return call{
		method:   method,
		path:     path,
		endpoint: endpoint,
		header:   h,
		body:     b,
		ctype:    "application/json",
		secrets:  secrets,
	}, nil
}

// maxInterval bounds what X-GitLab-Trace-Update-Interval may ask for,
// gitlab-runner's MaxUpdateInterval (common/consts.go).
const maxInterval = 15 * time.Minute

// interval reads X-GitLab-Trace-Update-Interval, whole seconds, capped at
// maxInterval.
func interval(h http.Header) time.Duration {
	n, err := strconv.ParseInt(strings.TrimSpace(h.Get(headerUpdateInterval)), 10, 64)
	switch {
	case err != nil || n <= 0:
		return 0
	case n > int64(maxInterval/time.Second):
		return maxInterval
	}
	return time.Duration(n) * time.Second
}

// rangeEnd reads the <size> of "Range: 0-<size>", or 0 when it does not
// parse, as network/patch_response.go NewOffset does.
func rangeEnd(v string) int64 {
	parts := strings.Split(v, "-")
	if len(parts) != 2 {
		return 0
	}
	n, err := strconv.ParseInt(strings.TrimSpace(parts[1]), 10, 64)
	if err != nil || n < 0 {
		return 0
	}
	return n
}
