package kubelet

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"

	"github.com/go-logr/logr"
)

// serveLogs streams the VM's log: GET /containerLogs/{ns}/{pod}/{container}
// with the kubelet's query (follow, tailLines, timestamps, limitBytes,
// sinceSeconds, sinceTime, previous). A followed log is flushed at every
// write, and ends when the request's context does.
func (s *Server) serveLogs(w http.ResponseWriter, r *http.Request) {
	o, err := parseLogOptions(r.URL.Query(), time.Now())
	if err != nil {
		refuse(w, r, err)
		return
	}
	inst, err := s.target(r.Context(), r.PathValue("namespace"), r.PathValue("pod"), "", r.PathValue("container"), opLogs)
	if err != nil {
		var ref *Refusal
		if errors.As(err, &ref) && ref.Code == http.StatusNotFound {
			// The API server replaces a 404's text with "could not find
			// the requested resource"; kubectl logs shows a 400's as it is.
			err = &Refusal{Code: http.StatusBadRequest, Message: ref.Message}
		}
		refuse(w, r, err)
		return
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	lw := &logStream{w: w, limit: -1, cut: cancel}
	if o.LimitBytes != nil {
		lw.limit = *o.LimitBytes
	}
	if o.Follow {
		lw.flusher, _ = w.(http.Flusher)
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	err = s.Guests.Logs(ctx, inst, o, lw)
	wrote, cut := lw.done()
	switch {
	case err == nil, cut, r.Context().Err() != nil:
		// Ended, reached limitBytes, or the client went.
	case !wrote:
		refuse(w, r, err)
	default:
		// Too late for a status: the client has a 200 and some log.
		logr.FromContextOrDiscard(r.Context()).Error(err, "The VM's log ended early")
	}
}

// logStream writes a log to the response: it cuts it at limit bytes (no
// limit if negative), then cancels the guest's read, and flushes at every
// write when following.
type logStream struct {
	mu      sync.Mutex
	w       http.ResponseWriter
	flusher http.Flusher
	limit   int64
	cut     context.CancelFunc
	wrote   bool
	limited bool
}

// errLimitBytes is a write past limitBytes.
var errLimitBytes = errors.New("limitBytes reached")

func (l *logStream) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.limited {
		return 0, errLimitBytes
	}
	last := l.limit >= 0 && int64(len(p)) >= l.limit
	if last {
		p = p[:l.limit]
	}
	n, err := 0, error(nil)
	if len(p) > 0 {
		l.wrote = true
		n, err = l.w.Write(p)
		if l.limit >= 0 {
			l.limit -= int64(n)
		}
		if err == nil && l.flusher != nil {
			l.flusher.Flush()
		}
	}
	if err != nil {
		return n, err
	}
	if last {
		l.limited = true
		l.cut()
		return n, errLimitBytes
	}
	return n, nil
}

func (l *logStream) done() (wrote, limited bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.wrote, l.limited
}

// parseLogOptions reads a containerLogs query as the kubelet does
// (k8s.io/api/core/v1.PodLogOptions, and the old tail=), and checks it as
// the API server does, with a message for each mistake.
func parseLogOptions(q url.Values, now time.Time) (LogOptions, error) {
	var o LogOptions
	bad := func(format string, args ...any) (LogOptions, error) {
		return LogOptions{}, refusef(http.StatusBadRequest, format, args...)
	}
	boolean := func(name string) (bool, error) {
		v := q.Get(name)
		if v == "" {
			return false, nil
		}
		b, err := strconv.ParseBool(v)
		if err != nil {
			return false, refusef(http.StatusBadRequest, "%s=%q is not true or false", name, v)
		}
		return b, nil
	}
	integer := func(name, v string) (*int64, error) {
		if v == "" {
			return nil, nil
		}
		i, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return nil, refusef(http.StatusBadRequest, "%s=%q is not an integer", name, v)
		}
		return &i, nil
	}
	previous, err := boolean("previous")
	if err != nil {
		return LogOptions{}, err
	}
	if previous {
		return bad("no previous VM log kept: a MacRack VM has one log, of its current boot")
	}
	if o.Follow, err = boolean("follow"); err != nil {
		return LogOptions{}, err
	}
	if o.Timestamps, err = boolean("timestamps"); err != nil {
		return LogOptions{}, err
	}
	tail := q.Get("tailLines")
	if t := q.Get("tail"); t != "" {
		// The kubelet's old name; "all" is no limit.
		tail = t
		if t == "all" {
			tail = ""
		}
	}
	if o.TailLines, err = integer("tailLines", tail); err != nil {
		return LogOptions{}, err
	}
	if o.TailLines != nil && *o.TailLines < 0 {
		return bad("tailLines must be 0 or more, not %d", *o.TailLines)
	}
	if o.LimitBytes, err = integer("limitBytes", q.Get("limitBytes")); err != nil {
		return LogOptions{}, err
	}
	if o.LimitBytes != nil && *o.LimitBytes < 1 {
		return bad("limitBytes must be greater than 0, not %d", *o.LimitBytes)
	}
	sinceSeconds, err := integer("sinceSeconds", q.Get("sinceSeconds"))
	if err != nil {
		return LogOptions{}, err
	}
	sinceTime := q.Get("sinceTime")
	switch {
	case sinceSeconds != nil && sinceTime != "":
		return bad("at most one of sinceTime or sinceSeconds may be given")
	case sinceSeconds != nil:
		if *sinceSeconds < 1 {
			return bad("sinceSeconds must be greater than 0, not %d", *sinceSeconds)
		}
		t := now.Add(-time.Duration(*sinceSeconds) * time.Second)
		o.SinceTime = &t
	case sinceTime != "":
		t, err := time.Parse(time.RFC3339, sinceTime)
		if err != nil {
			return bad("sinceTime=%q is not an RFC 3339 time", sinceTime)
		}
		o.SinceTime = &t
	}
	switch stream := q.Get("stream"); stream {
	case "", "All":
	default:
		return bad("a MacRack VM has one log: stream=%s is not served, only All", stream)
	}
	return o, nil
}
