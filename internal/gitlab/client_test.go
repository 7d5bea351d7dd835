package gitlab

import (
	"context"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// Tokens shaped like GitLab's, so that the pattern-based masking is
// exercised as well as the exact one.
const (
	runnerToken = "glrt-t1_RUNNERsecretRUNNERsecret"
	jobToken    = "glcbt-64_JOBsecretJOBsecretJOB"
)

// recorded is one request a test server saw.
type recorded struct {
	method, path, query string
	header              http.Header
	body                []byte
}

// stub is a GitLab whose every answer the test scripts.
type stub struct {
	mu   sync.Mutex
	reqs []recorded
	srv  *httptest.Server
}

func newStub(t *testing.T, answer func(w http.ResponseWriter, r *http.Request)) (*stub, *Client) {
	t.Helper()
	s := &stub{}
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		s.mu.Lock()
		s.reqs = append(s.reqs, recorded{r.Method, r.URL.Path, r.URL.RawQuery, r.Header.Clone(), body})
		s.mu.Unlock()
		answer(w, r)
	}))
	t.Cleanup(s.srv.Close)
	c, err := New(s.srv.URL+"/gitlab/", Options{AllowHTTP: true, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return s, c
}

func (s *stub) last(t *testing.T) recorded {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.reqs) == 0 {
		t.Fatal("the server saw no request")
	}
	return s.reqs[len(s.reqs)-1]
}

func (s *stub) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.reqs)
}

func answerJSON(code int, body string, headers ...string) func(http.ResponseWriter, *http.Request) {
	return func(w http.ResponseWriter, _ *http.Request) {
		for i := 0; i+1 < len(headers); i += 2 {
			w.Header().Set(headers[i], headers[i+1])
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		_, _ = io.WriteString(w, body)
	}
}

func ctx(t *testing.T) context.Context {
	t.Helper()
	c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return c
}

func TestNewAcceptsOnlyHTTPSURLsWithoutCredentials(t *testing.T) {
	for _, tc := range []struct {
		name string
		url  string
		o    Options
		ok   bool
	}{
		{"an https URL is accepted", "https://gitlab.example.com", Options{}, true},
		{"an https URL with a path is accepted", "https://example.com/gitlab/", Options{}, true},
		{"an http URL is refused by default", "http://gitlab.example.com", Options{}, false},
		{"an http URL is accepted when allowed", "http://127.0.0.1:8080", Options{AllowHTTP: true}, true},
		{"another scheme is refused even when http is allowed", "ftp://gitlab.example.com", Options{AllowHTTP: true}, false},
		{"a URL with credentials is refused", "https://user:" + runnerToken + "@gitlab.example.com", Options{}, false},
		{"a URL with a query is refused", "https://gitlab.example.com/?private_token=x", Options{}, false},
		{"a URL without a host is refused", "https:///api", Options{}, false},
		{"a CA bundle without a certificate is refused", "https://gitlab.example.com", Options{CABundle: []byte("not pem")}, false},
		{"a CA bundle and an HTTP client together are refused", "https://gitlab.example.com", Options{CABundle: []byte("x"), HTTPClient: &http.Client{}}, false},
		{"an HTTP client alone is accepted", "https://gitlab.example.com", Options{HTTPClient: &http.Client{}}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := New(tc.url, tc.o)
			switch {
			case tc.ok && err != nil:
				t.Fatalf("refused: %v", err)
			case !tc.ok && !errors.Is(err, ErrInvalidConfig):
				t.Fatalf("want ErrInvalidConfig, got %v", err)
			case err != nil && strings.Contains(err.Error(), runnerToken):
				t.Fatalf("the error quotes the URL's password: %v", err)
			}
		})
	}
}

func TestNewLeavesTheCallersHTTPClientUnchanged(t *testing.T) {
	hc := &http.Client{}
	if _, err := New("https://gitlab.example.com", Options{HTTPClient: hc}); err != nil {
		t.Fatal(err)
	}
	if hc.CheckRedirect != nil || hc.Timeout != 0 {
		t.Fatal("New changed the caller's http.Client")
	}
}

func TestVerifyRunnerSendsGitLabRunnersShape(t *testing.T) {
	s, c := newStub(t, answerJSON(200, `{"id":42,"token":"`+runnerToken+`","token_expires_at":"2030-01-02T03:04:05Z"}`))
	res, err := c.VerifyRunner(ctx(t), runnerToken, "s_0123456789ab")
	if err != nil {
		t.Fatal(err)
	}
	if res.ID != 42 || !res.TokenExpiresAt.Equal(time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)) {
		t.Fatalf("got %+v", res)
	}
	r := s.last(t)
	if r.method != http.MethodPost || r.path != "/gitlab/api/v4/runners/verify" {
		t.Fatalf("sent %s %s", r.method, r.path)
	}
	if r.header.Get("RUNNER-TOKEN") != runnerToken || r.header.Get("Content-Type") != "application/json" {
		t.Fatalf("headers %v", r.header)
	}
	var body map[string]any
	if err := json.Unmarshal(r.body, &body); err != nil {
		t.Fatal(err)
	}
	if body["token"] != runnerToken || body["system_id"] != "s_0123456789ab" || body["info"] == nil {
		t.Fatalf("body %s", r.body)
	}
}

func TestVerifyRunnerAcceptsALegacyBareAnswerAndANullExpiry(t *testing.T) {
	for _, tc := range []struct {
		name, ctype, body string
	}{
		{"an old GitLab's bare 200 is valid", "text/plain", "200"},
		{"a token that does not expire has a zero expiry", "application/json", `{"id":7,"token":"x","token_expires_at":null}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, c := newStub(t, func(w http.ResponseWriter, _ *http.Request) {
				w.Header().Set("Content-Type", tc.ctype)
				_, _ = io.WriteString(w, tc.body)
			})
			res, err := c.VerifyRunner(ctx(t), runnerToken, "s_1")
			if err != nil {
				t.Fatal(err)
			}
			if !res.TokenExpiresAt.IsZero() {
				t.Fatalf("expiry %v", res.TokenExpiresAt)
			}
		})
	}
}

func TestRequestJobDecodesAJobAndCarriesLastUpdate(t *testing.T) {
	job := `{"id":1234,"token":"` + jobToken + `","allow_git_fetch":true,
		"job_info":{"name":"build","stage":"test","project_id":7,"project_name":"p","time_in_queue_seconds":12.5},
		"git_info":{"repo_url":"https://gitlab-ci-token:` + jobToken + `@gitlab.example.com/g/p.git","ref":"main"},
		"runner_info":{"timeout":3600},
		"variables":[{"key":"CI_JOB_TOKEN","value":"` + jobToken + `","public":false,"masked":true}],
		"steps":[{"name":"script","script":["echo hi"],"timeout":3600,"when":"on_success","allow_failure":false}],
		"image":{"name":""},"services":[],"artifacts":[],"cache":[],"credentials":[],"dependencies":[],
		"features":{"trace_sections":true,"failure_reasons":["script_failure"]},
		"some_future_field":{"x":1}}`
	s, c := newStub(t, answerJSON(201, job))
	got, next, err := c.RequestJob(ctx(t), runnerToken, "s_1", RunnerInfo{Name: "macrack", Executor: "shell"}, "lu-1")
	if err != nil {
		t.Fatal(err)
	}
	if got.ID != 1234 || got.Token != jobToken || got.JobInfo.TimeInQueueSeconds != 12.5 || got.RunnerInfo.Timeout != 3600 {
		t.Fatalf("got %+v", got.MarshalLog())
	}
	if len(got.Steps) != 1 || got.Steps[0].Name != StepScript || got.Steps[0].Script[0] != "echo hi" || got.Steps[0].When != WhenOnSuccess {
		t.Fatalf("steps %+v", got.Steps)
	}
	if next != "lu-1" {
		t.Fatalf("without a header, last_update stays lu-1, got %q", next)
	}
	r := s.last(t)
	var body JobRequest
	if err := json.Unmarshal(r.body, &body); err != nil {
		t.Fatal(err)
	}
	if r.path != "/gitlab/api/v4/jobs/request" || body.Token != runnerToken || body.SystemID != "s_1" || body.LastUpdate != "lu-1" || body.Info.Executor != "shell" {
		t.Fatalf("sent %s %s", r.path, r.body)
	}
}

func TestRequestJobReturnsNoJobOn204WithGitLabsLastUpdate(t *testing.T) {
	_, c := newStub(t, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("X-GitLab-Last-Update", "lu-2")
		w.WriteHeader(http.StatusNoContent)
	})
	job, next, err := c.RequestJob(ctx(t), runnerToken, "s_1", RunnerInfo{}, "lu-1")
	if err != nil || job != nil || next != "lu-2" {
		t.Fatalf("got %v %q %v", job, next, err)
	}
}

func TestRequestJobRefusesAMalformedJob(t *testing.T) {
	big := `{"id":1,"token":"` + jobToken + `","variables":[{"key":"BIG","value":"` + strings.Repeat("x", 200<<10) + `"}]}`
	for _, tc := range []struct {
		name  string
		ctype string
		body  string
		want  error
	}{
		{"a job of more than 64 KiB is still read", "application/json", big, nil},
		{"a job that is not JSON is refused", "text/html", "<html>", ErrBadResponse},
		{"a job without a token is refused", "application/json", `{"id":5}`, ErrBadResponse},
		{"a job without an id is refused", "application/json", `{"token":"t"}`, ErrBadResponse},
		{"a job that does not decode is refused", "application/json", `{"id":"five"}`, ErrBadResponse},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, c := newStub(t, func(w http.ResponseWriter, _ *http.Request) {
				w.Header().Set("Content-Type", tc.ctype)
				w.WriteHeader(http.StatusCreated)
				_, _ = io.WriteString(w, tc.body)
			})
			_, _, err := c.RequestJob(ctx(t), runnerToken, "s", RunnerInfo{}, "")
			if !errors.Is(err, tc.want) && !(tc.want == nil && err == nil) {
				t.Fatalf("want %v, got %v", tc.want, err)
			}
		})
	}
}

func TestUpdateJobSendsTheStateAndReadsGitLabsAnswer(t *testing.T) {
	s, c := newStub(t, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Job-Status", "failed")
		w.Header().Set("X-GitLab-Trace-Update-Interval", "")
		w.WriteHeader(http.StatusOK)
		_, _ = io.WriteString(w, "200")
	})
	res, err := c.UpdateJob(ctx(t), 77, jobToken, JobUpdate{
		State: StateFailed, FailureReason: FailureScript, ExitCode: 3,
		Output: JobTraceOutput{Checksum: "crc32:0000abcd", Bytesize: 10},
	})
	if err != nil || res.Accepted || res.JobStatus != StateFailed {
		t.Fatalf("got %+v %v", res, err)
	}
	r := s.last(t)
	if r.method != http.MethodPut || r.path != "/gitlab/api/v4/jobs/77" || r.header.Get("JOB-TOKEN") != jobToken {
		t.Fatalf("sent %s %s %v", r.method, r.path, r.header)
	}
	var body map[string]any
	_ = json.Unmarshal(r.body, &body)
	out, _ := body["output"].(map[string]any)
	if body["token"] != jobToken || body["state"] != "failed" || body["failure_reason"] != "script_failure" ||
		body["exit_code"] != 3.0 || body["checksum"] != "crc32:0000abcd" || out["bytesize"] != 10.0 {
		t.Fatalf("body %s", r.body)
	}
}

func TestUpdateJobOmitsExitCodeZero(t *testing.T) {
	s, c := newStub(t, answerJSON(200, "200"))
	if _, err := c.UpdateJob(ctx(t), 1, jobToken, JobUpdate{State: StateSuccess}); err != nil {
		t.Fatal(err)
	}
	var body map[string]any
	if err := json.Unmarshal(s.last(t).body, &body); err != nil {
		t.Fatal(err)
	}
	if _, ok := body["exit_code"]; ok {
		t.Fatalf("body %s", s.last(t).body)
	}
	if _, ok := body["failure_reason"]; ok {
		t.Fatalf("body %s", s.last(t).body)
	}
}

func TestUpdateJobReportsA202AsAcceptedWithItsInterval(t *testing.T) {
	_, c := newStub(t, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("X-GitLab-Trace-Update-Interval", "7")
		w.WriteHeader(http.StatusAccepted)
	})
	res, err := c.UpdateJob(ctx(t), 1, jobToken, JobUpdate{State: StateSuccess})
	if err != nil || !res.Accepted || res.UpdateInterval != 7*time.Second {
		t.Fatalf("got %+v %v", res, err)
	}
}

func TestPatchTraceSendsGitLabRunnersContentRange(t *testing.T) {
	s, c := newStub(t, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Range", "0-15")
		w.Header().Set("Job-Status", "running")
		w.Header().Set("X-GitLab-Trace-Update-Interval", "3")
		w.WriteHeader(http.StatusAccepted)
	})
	res, err := c.PatchTrace(ctx(t), 9, jobToken, []byte("0123456789"), 5)
	if err != nil || res.Offset != 15 || res.UpdateInterval != 3*time.Second || res.JobStatus != StateRunning || res.CancelRequested {
		t.Fatalf("got %+v %v", res, err)
	}
	r := s.last(t)
	if r.method != http.MethodPatch || r.path != "/gitlab/api/v4/jobs/9/trace" || r.query != "debug_trace=false" {
		t.Fatalf("sent %s %s?%s", r.method, r.path, r.query)
	}
	if r.header.Get("Content-Range") != "5-14" || r.header.Get("JOB-TOKEN") != jobToken || r.header.Get("Content-Type") != "text/plain" {
		t.Fatalf("headers %v", r.header)
	}
	if string(r.body) != "0123456789" {
		t.Fatalf("body %q", r.body)
	}
}

func TestPatchTraceSendsNothingWhenThereIsNothingToSend(t *testing.T) {
	s, c := newStub(t, answerJSON(202, ""))
	res, err := c.PatchTrace(ctx(t), 9, jobToken, nil, 5)
	if err != nil || res.Offset != 5 || s.count() != 0 {
		t.Fatalf("got %+v %v after %d requests", res, err, s.count())
	}
}

func TestPatchTraceReports416WithGitLabsOffset(t *testing.T) {
	for _, tc := range []struct {
		name  string
		rng   string
		wants int64
	}{
		{"the offset is the size in GitLab's Range", "0-3", 3},
		{"a missing Range means resend from 0, as gitlab-runner reads it", "", 0},
		{"a Range that does not parse means resend from 0", "bytes=oops", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, c := newStub(t, func(w http.ResponseWriter, _ *http.Request) {
				if tc.rng != "" {
					w.Header().Set("Range", tc.rng)
				}
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusRequestedRangeNotSatisfiable)
				_, _ = io.WriteString(w, `{"message":"416 Range Not Satisfiable"}`)
			})
			_, err := c.PatchTrace(ctx(t), 9, jobToken, []byte("abc"), 10)
			var rm *RangeMismatchError
			if !errors.As(err, &rm) || !errors.Is(err, ErrRangeMismatch) {
				t.Fatalf("want a RangeMismatchError, got %v", err)
			}
			if rm.Offset != tc.wants || rm.Sent != "10-12" {
				t.Fatalf("got %+v", rm)
			}
		})
	}
}

func TestPatchTraceSaysWhenGitLabAsksToCancel(t *testing.T) {
	_, c := newStub(t, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Job-Status", "canceling")
		w.WriteHeader(http.StatusAccepted)
	})
	res, err := c.PatchTrace(ctx(t), 9, jobToken, []byte("x"), 0)
	if err != nil || !res.CancelRequested {
		t.Fatalf("got %+v %v", res, err)
	}
}

func TestStatusesMapToSentinels(t *testing.T) {
	calls := map[string]func(c *Client) error{
		"verify": func(c *Client) error { _, err := c.VerifyRunner(context.Background(), runnerToken, "s"); return err },
		"unregister": func(c *Client) error {
			return c.UnregisterManager(context.Background(), runnerToken, "s")
		},
		"request": func(c *Client) error {
			_, _, err := c.RequestJob(context.Background(), runnerToken, "s", RunnerInfo{}, "")
			return err
		},
		"update": func(c *Client) error {
			_, err := c.UpdateJob(context.Background(), 5, jobToken, JobUpdate{State: StateSuccess})
			return err
		},
		"patch": func(c *Client) error {
			_, err := c.PatchTrace(context.Background(), 5, jobToken, []byte("x"), 0)
			return err
		},
	}
	success := map[string]int{"verify": 200, "unregister": 204, "request": 204, "update": 200, "patch": 202}
	for _, tc := range []struct {
		name string
		code int
		want error
	}{
		{"a 401 is forbidden", 401, ErrForbidden},
		{"a 403 is forbidden", 403, ErrForbidden},
		{"a 404 is not found", 404, ErrNotFound},
		{"a 409 is a conflict", 409, ErrConflict},
		{"a 412 is a trace validation failure", 412, ErrTraceValidation},
		{"a 429 is unavailable", 429, ErrUnavailable},
		{"a 500 is unavailable", 500, ErrUnavailable},
		{"a 503 is unavailable", 503, ErrUnavailable},
		{"a 400 is unexpected", 400, ErrUnexpectedStatus},
		{"a 422 is unexpected", 422, ErrUnexpectedStatus},
		{"a redirect is unexpected", 302, ErrUnexpectedStatus},
	} {
		for name, call := range calls {
			t.Run(tc.name+" on "+name, func(t *testing.T) {
				if name == "patch" && tc.code == 412 {
					t.Skip("412 is a job update's answer")
				}
				_, c := newStub(t, answerJSON(tc.code, `{"message":"nope"}`, "Location", "https://elsewhere.example.com/"))
				err := call(c)
				if !errors.Is(err, tc.want) {
					t.Fatalf("want %v, got %v", tc.want, err)
				}
				var se *StatusError
				if !errors.As(err, &se) || se.Code != tc.code || !strings.Contains(err.Error(), fmt.Sprint(tc.code)) {
					t.Fatalf("the error does not carry the status: %v", err)
				}
			})
		}
	}
	for name, call := range calls {
		t.Run("the endpoint's success status is no error on "+name, func(t *testing.T) {
			_, c := newStub(t, answerJSON(success[name], `{}`))
			if err := call(c); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestNoErrorQuotesAToken(t *testing.T) {
	// GitLab, a proxy or a broken server may echo what it was sent.
	echo := `{"message":"bad token ` + runnerToken + ` and ` + jobToken + ` and glpat-UNKNOWNsecretUNKNOWN"}`
	bodies := []struct {
		name, ctype, body string
	}{
		{"a JSON message quoting the tokens", "application/json", echo},
		{"a JSON error quoting the tokens", "application/json", `{"error":"` + runnerToken + jobToken + `"}`},
		{"a field map quoting the tokens", "application/json", `{"message":{"token":["` + runnerToken + `","` + jobToken + `"]}}`},
		{"a plain-text body quoting the tokens", "text/plain", "token=" + runnerToken + "\x00\x1b[31m" + jobToken},
		{"an HTML page quoting the tokens", "text/html", "<p>" + runnerToken + jobToken + "</p>"},
		{"a huge body ending in the tokens", "application/json", `{"message":"` + strings.Repeat("a", 100<<10) + runnerToken + `"}`},
	}
	codes := []int{400, 403, 404, 409, 412, 416, 422, 500}
	for _, b := range bodies {
		for _, code := range codes {
			t.Run(fmt.Sprintf("%s in a %d", b.name, code), func(t *testing.T) {
				_, c := newStub(t, func(w http.ResponseWriter, _ *http.Request) {
					w.Header().Set("Content-Type", b.ctype)
					w.Header().Set("Job-Status", jobToken)
					w.Header().Set("Range", "0-"+jobToken)
					w.WriteHeader(code)
					_, _ = io.WriteString(w, b.body)
				})
				var errs []error
				_, err := c.VerifyRunner(ctx(t), runnerToken, "s")
				errs = append(errs, err)
				errs = append(errs, c.UnregisterManager(ctx(t), runnerToken, "s"))
				_, _, err = c.RequestJob(ctx(t), runnerToken, "s", RunnerInfo{}, "")
				errs = append(errs, err)
				_, err = c.UpdateJob(ctx(t), 3, jobToken, JobUpdate{State: StateSuccess})
				errs = append(errs, err)
				_, err = c.PatchTrace(ctx(t), 3, jobToken, []byte("x"), 0)
				errs = append(errs, err)
				for _, err := range errs {
					assertNoSecret(t, err)
				}
			})
		}
	}
}

func TestATransportErrorQuotesNoToken(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close()
	c, err := New(url, Options{AllowHTTP: true, Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.VerifyRunner(ctx(t), runnerToken, "s")
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("want ErrUnavailable, got %v", err)
	}
	assertNoSecret(t, err)
	_, err = c.PatchTrace(ctx(t), 3, jobToken, []byte("x"), 0)
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("want ErrUnavailable, got %v", err)
	}
	assertNoSecret(t, err)
}

func TestACancelledCallIsNotUnavailability(t *testing.T) {
	_, c := newStub(t, func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() })
	cctx, cancel := context.WithCancel(context.Background())
	go func() { time.Sleep(20 * time.Millisecond); cancel() }()
	_, _, err := c.RequestJob(cctx, runnerToken, "s", RunnerInfo{}, "")
	if !errors.Is(err, context.Canceled) || errors.Is(err, ErrUnavailable) {
		t.Fatalf("want context.Canceled alone, got %v", err)
	}
}

func TestAnErrorCarriesAShortExcerptOfGitLabsMessage(t *testing.T) {
	long := strings.Repeat("word ", 200)
	for _, tc := range []struct {
		name, body, want string
	}{
		{"GitLab's message is kept", `{"message":"403 Forbidden - Job is not running"}`, "403 Forbidden - Job is not running"},
		{"a validation map is flattened", `{"message":{"tag_list":["is invalid"]}}`, "tag_list: is invalid"},
		{"a long message is cut", `{"message":"` + long + `"}`, "word word"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, c := newStub(t, answerJSON(403, tc.body, "Job-Status", "canceled"))
			_, err := c.UpdateJob(ctx(t), 3, jobToken, JobUpdate{State: StateSuccess})
			var se *StatusError
			if !errors.As(err, &se) || !strings.Contains(se.Message, tc.want) || len([]rune(se.Message)) > maxMessage+1 {
				t.Fatalf("got %v", err)
			}
			if se.JobStatus != "canceled" || se.Endpoint != "PUT /api/v4/jobs/3" {
				t.Fatalf("got %+v", se)
			}
		})
	}
}

func TestRedirectsAreNeverFollowedWithAToken(t *testing.T) {
	var hits int
	var mu sync.Mutex
	elsewhere := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		mu.Lock()
		hits++
		mu.Unlock()
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(elsewhere.Close)
	for _, code := range []int{301, 302, 303, 307, 308} {
		t.Run(fmt.Sprintf("a %d is not followed", code), func(t *testing.T) {
			_, c := newStub(t, func(w http.ResponseWriter, r *http.Request) {
				http.Redirect(w, r, elsewhere.URL+"/steal", code)
			})
			_, err := c.VerifyRunner(ctx(t), runnerToken, "s")
			if !errors.Is(err, ErrUnexpectedStatus) {
				t.Fatalf("want ErrUnexpectedStatus, got %v", err)
			}
			_, err = c.PatchTrace(ctx(t), 3, jobToken, []byte("x"), 0)
			if !errors.Is(err, ErrUnexpectedStatus) {
				t.Fatalf("want ErrUnexpectedStatus, got %v", err)
			}
		})
	}
	if hits != 0 {
		t.Fatalf("the redirect target got %d requests", hits)
	}
}

func TestAJobNeverPrintsItsSecrets(t *testing.T) {
	j := &JobResponse{
		ID: 5, Token: jobToken, JobInfo: JobInfo{Name: "build"},
		GitInfo:      GitInfo{RepoURL: "https://gitlab-ci-token:" + jobToken + "@h/p.git"},
		Variables:    []Variable{{Key: "CI_JOB_TOKEN", Value: jobToken, Masked: true}},
		Credentials:  []Credentials{{Type: "registry", Username: "u", Password: jobToken}},
		Dependencies: []Dependency{{ID: 4, Token: jobToken}},
	}
	for _, s := range []string{
		fmt.Sprint(j), fmt.Sprintf("%v", j), fmt.Sprintf("%+v", j), fmt.Sprintf("%#v", j), j.String(),
		fmt.Sprintf("%+v", *j), fmt.Sprintf("%#v", *j), fmt.Sprint([]*JobResponse{j}),
		fmt.Sprint(j.MarshalLog()), fmt.Sprint(j.Variables), fmt.Sprint(j.Credentials), fmt.Sprint(j.Dependencies),
	} {
		if strings.Contains(s, jobToken) || strings.Contains(s, "JOBsecret") {
			t.Fatalf("printed the token: %s", s)
		}
	}
	if fmt.Sprint(j) != "job 5 (build)" {
		t.Fatalf("positive control: got %q", fmt.Sprint(j))
	}
	if v := (Variable{Key: "A", Value: "b", Public: true}); v.String() != "A=b" {
		t.Fatalf("positive control: a public variable prints %q", v.String())
	}
}

func TestTheClientIsSafeForConcurrentUse(t *testing.T) {
	_, c := newStub(t, answerJSON(202, "", "Range", "0-1"))
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := c.PatchTrace(context.Background(), int64(i+1), jobToken, []byte("x"), 0); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
}

// assertNoSecret fails if err says anything token-like.
func assertNoSecret(t *testing.T, err error) {
	t.Helper()
	if err == nil {
		t.Fatal("want an error")
	}
	s := err.Error()
	for _, secret := range []string{runnerToken, jobToken, "RUNNERsecret", "JOBsecret", "UNKNOWNsecret"} {
		if strings.Contains(s, secret) {
			t.Fatalf("the error quotes a token: %s", s)
		}
	}
	if len(s) > 600 {
		t.Fatalf("the error reflects too much: %d bytes", len(s))
	}
}

// tlsServer is a GitLab over real TLS, and the PEM of its certificate for
// a client's CA bundle.
func tlsServer(t *testing.T, h http.HandlerFunc) (*httptest.Server, []byte) {
	t.Helper()
	srv := httptest.NewTLSServer(h)
	t.Cleanup(srv.Close)
	return srv, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
}

// A redirect to a host that is not the GitLab the client was made for is
// never followed, over real TLS, even where the other host's certificate
// is trusted (both servers share httptest's): with a token (any POST) or
// without (a GET, which may follow only the same host).
func TestARedirectToAnotherHostIsNotFollowed(t *testing.T) {
	var mu sync.Mutex
	var stolen []string
	elsewhere, _ := tlsServer(t, func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		stolen = append(stolen, r.Method+" "+r.URL.Path+" "+string(body))
		mu.Unlock()
		w.WriteHeader(http.StatusOK)
	})
	gl, ca := tlsServer(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/api/v4/here":
			w.WriteHeader(http.StatusNoContent)
		case "/api/v4/same-host":
			http.Redirect(w, r, "/api/v4/here", http.StatusFound)
		default:
			http.Redirect(w, r, elsewhere.URL+"/steal", http.StatusTemporaryRedirect)
		}
	})
	c, err := New(gl.URL, Options{CABundle: ca, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.VerifyRunner(ctx(t), runnerToken, "s"); !errors.Is(err, ErrUnexpectedStatus) {
		t.Fatalf("VerifyRunner redirected: want ErrUnexpectedStatus, got %v", err)
	}
	req, err := http.NewRequestWithContext(ctx(t), http.MethodGet, gl.URL+"/api/v4/elsewhere", nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.hc.Do(req); !errors.Is(err, errRedirect) {
		t.Fatalf("a GET redirected to another host: want errRedirect, got %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(stolen) != 0 {
		t.Fatalf("the other host got %q", stolen)
	}
	// The positive control: the same client, over the same TLS, follows a
	// GET's redirect on its own host.
	req, err = http.NewRequestWithContext(ctx(t), http.MethodGet, gl.URL+"/api/v4/same-host", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent || resp.Request.URL.Path != "/api/v4/here" {
		t.Fatalf("same-host redirect: %d at %s", resp.StatusCode, resp.Request.URL)
	}
}
