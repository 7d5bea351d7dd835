package gitlab

import (
	"errors"
	"fmt"
	"net/http"
)

// Sentinel errors. Every error a Client returns wraps one of them (or, for
// a call whose ctx ended, the context's error), so callers decide with
// errors.Is whether to retry, give up, or drop the job.
var (
	// ErrInvalidConfig means New was given a URL or Options it refuses: a
	// scheme other than https (http only with AllowHTTP), credentials in the
	// URL, or a CA bundle with no certificate in it.
	ErrInvalidConfig = errors.New("invalid GitLab client configuration")
	// ErrForbidden means a 401 or 403: the runner token is revoked or wrong,
	// or, on a job endpoint, the job token is wrong or the job no longer
	// runs (StatusError.JobStatus then says what it became). Retrying with
	// the same token cannot help.
	ErrForbidden = errors.New("forbidden: the token is revoked or wrong, or the job is no longer running")
	// ErrNotFound means a 404, such as a runner manager that does not exist.
	ErrNotFound = errors.New("not found")
	// ErrConflict means a 409: GitLab lost a race assigning the job; ask again.
	ErrConflict = errors.New("conflict")
	// ErrRangeMismatch means a 416 on a trace patch: GitLab holds a trace of
	// another length. The RangeMismatchError that wraps it says which, so
	// the caller resends from there, as gitlab-runner does.
	ErrRangeMismatch = errors.New("trace range mismatch")
	// ErrTraceValidation means a 412 on a job update: GitLab refused the
	// trace's checksum, and gitlab-runner then resends the trace from 0.
	ErrTraceValidation = errors.New("trace validation failed")
	// ErrUnavailable means GitLab could not be reached or is overloaded: a
	// transport error, a timeout, a 429 or a 5xx. Retrying later may help.
	ErrUnavailable = errors.New("GitLab unavailable")
	// ErrBadResponse means an answer of the right status that is not what
	// the API promises: not JSON, too large, or a job without id or token.
	ErrBadResponse = errors.New("malformed GitLab response")
	// ErrUnexpectedStatus means any other status, such as a 400 or a 422
	// (an orphaned runner), or a redirect, which this client never follows.
	ErrUnexpectedStatus = errors.New("unexpected GitLab status")
)

// StatusError is an answer with a status the endpoint does not succeed
// with. It unwraps to the sentinel for its code.
type StatusError struct {
	// Endpoint is the method and path, such as "PUT /api/v4/jobs/12".
	Endpoint string
	// Code is the HTTP status code.
	Code int
	// Message is a short, sanitised excerpt of GitLab's "message" or
	// "error", with anything token-shaped masked; empty when it sent none.
	Message string
	// JobStatus is GitLab's Job-Status header, sent with a 403 on a job
	// endpoint when the job is no longer running (such as "canceled").
	JobStatus string
}

func (e *StatusError) Error() string {
	s := fmt.Sprintf("%s: %d %s", e.Endpoint, e.Code, http.StatusText(e.Code))
	if e.Message != "" {
		s += ": " + e.Message
	}
	if e.JobStatus != "" {
		s += " (job status " + e.JobStatus + ")"
	}
	return s
}

// Unwrap returns the sentinel for the code.
func (e *StatusError) Unwrap() error { return sentinelFor(e.Code) }

// RangeMismatchError is a 416 on a trace patch. Offset is where GitLab's
// copy of the trace ends (the <size> of its "Range: 0-<size>" header, or 0
// when the header is missing, as gitlab-runner reads it); the caller sends
// again from there.
type RangeMismatchError struct {
	// Endpoint is the method and path, such as "PATCH /api/v4/jobs/12/trace".
	Endpoint string
	// Sent is the Content-Range that was refused, such as "10-19".
	Sent string
	// Offset is the length of the trace GitLab holds.
	Offset int64
}

func (e *RangeMismatchError) Error() string {
	return fmt.Sprintf("%s: 416 %s: sent bytes %s, GitLab holds %d bytes",
		e.Endpoint, http.StatusText(http.StatusRequestedRangeNotSatisfiable), e.Sent, e.Offset)
}

// Unwrap returns ErrRangeMismatch.
func (e *RangeMismatchError) Unwrap() error { return ErrRangeMismatch }

// sentinelFor maps a status code to its sentinel.
func sentinelFor(code int) error {
	switch {
	case code == http.StatusUnauthorized || code == http.StatusForbidden:
		return ErrForbidden
	case code == http.StatusNotFound:
		return ErrNotFound
	case code == http.StatusConflict:
		return ErrConflict
	case code == http.StatusPreconditionFailed:
		return ErrTraceValidation
	case code == http.StatusRequestedRangeNotSatisfiable:
		return ErrRangeMismatch
	case code == http.StatusTooManyRequests || code >= 500:
		return ErrUnavailable
	default:
		return ErrUnexpectedStatus
	}
}

// transportError is a request that got no answer. Its text is redacted
// like any message; it unwraps to the transport's error and, unless the
// caller's ctx ended, to ErrUnavailable.
type transportError struct {
	endpoint  string
	msg       string
	err       error
	cancelled bool
}

func (e *transportError) Error() string { return e.endpoint + ": " + e.msg }

func (e *transportError) Unwrap() []error {
	if e.cancelled {
		return []error{e.err}
	}
	return []error{ErrUnavailable, e.err}
}
