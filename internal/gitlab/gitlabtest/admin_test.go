package gitlabtest_test

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/boualleiguie/macrack-operator/internal/gitlab"
	"github.com/boualleiguie/macrack-operator/internal/gitlab/gitlabtest"
)

// admin calls the fake's admin API as curl --cacert would, and returns the
// status and the body.
func admin(t *testing.T, s *gitlabtest.Server, method, path, body string) (int, string) {
	t.Helper()
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(s.CABundle()) {
		t.Fatal("the fake's CA bundle does not parse")
	}
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	req, err := http.NewRequestWithContext(ctx(t), method, s.URL()+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

func TestTheAdminAPIQueuesAJobListsItAndReturnsItsTrace(t *testing.T) {
	s := gitlabtest.NewServer(t)
	s.AddRunnerToken(token, gitlabtest.WithTags("macos"))
	code, body := admin(t, s, http.MethodPost, "/-/fake/jobs",
		`{"name":"build","tags":["macos"],"script":["echo hi"],"retry":{"max":1,"when":["runner_system_failure"]},"timeout":"10m"}`)
	if code != http.StatusCreated {
		t.Fatalf("POST: %d %s", code, body)
	}
	var queued gitlabtest.AdminQueued
	if err := json.Unmarshal([]byte(body), &queued); err != nil || queued.BuildID == 0 || queued.JobID == 0 {
		t.Fatalf("POST answer %q: %+v %v", body, queued, err)
	}

	// A runner takes it over the runner API, as queued.
	c := newClient(t, s)
	j := take(t, c, token, "s_vm1")
	if j.ID != queued.JobID || j.JobInfo.PipelineID != queued.BuildID || j.JobInfo.Name != "build" ||
		j.RunnerInfo.Timeout != 600 || j.Steps[0].Script[0] != "echo hi" {
		t.Fatalf("the runner got %d %+v %+v %+v", j.ID, j.JobInfo, j.RunnerInfo, j.Steps)
	}
	trace := "$ echo hi\nhi\n"
	if _, err := c.PatchTrace(ctx(t), j.ID, j.Token, []byte(trace), 0); err != nil {
		t.Fatal(err)
	}
	if _, err := c.UpdateJob(ctx(t), j.ID, j.Token, gitlab.JobUpdate{State: gitlab.StateFailed,
		FailureReason: gitlab.FailureRunnerSystem, Output: gitlab.JobTraceOutput{Checksum: checksum(trace), Bytesize: len(trace)}}); err != nil {
		t.Fatal(err)
	}

	code, body = admin(t, s, http.MethodGet, "/-/fake/jobs", "")
	var jobs []gitlabtest.AdminJobStatus
	if err := json.Unmarshal([]byte(body), &jobs); code != http.StatusOK || err != nil {
		t.Fatalf("GET jobs: %d %q %v", code, body, err)
	}
	if len(jobs) != 2 {
		t.Fatalf("want the job and its retry, got %s", body)
	}
	first, retry := jobs[0], jobs[1]
	if first.ID != queued.JobID || first.BuildID != queued.BuildID || first.Attempt != 1 || first.State != gitlab.StateFailed ||
		first.FailureReason != gitlab.FailureRunnerSystem || first.SystemID != "s_vm1" || !first.Retried ||
		first.QueuedAt.IsZero() || first.StartedAt.IsZero() || first.FinishedAt.IsZero() {
		t.Fatalf("first attempt %+v", first)
	}
	if retry.BuildID != queued.BuildID || retry.Attempt != 2 || retry.State != gitlab.StatePending || !retry.StartedAt.IsZero() {
		t.Fatalf("retry %+v", retry)
	}
	if strings.Contains(body, token) || strings.Contains(body, j.Token) || strings.Contains(body, "glcbt-") {
		t.Fatalf("the job list holds a token: %s", body)
	}

	code, body = admin(t, s, http.MethodGet, "/-/fake/jobs/"+strconv.FormatInt(queued.JobID, 10)+"/trace", "")
	if code != http.StatusOK || body != trace {
		t.Fatalf("GET trace: %d %q", code, body)
	}
}

func TestTheAdminAPIRefusesABadJobAndAnUnknownTrace(t *testing.T) {
	s := gitlabtest.NewServer(t)
	for _, tc := range []struct {
		name, body, want string
	}{
		{"a body that is not JSON is refused", `{"script": [`, "malformed job"},
		{"a field the API does not know is refused", `{"scripts": ["echo hi"]}`, `unknown field "scripts"`},
		{"a job without a script is refused", `{"name": "build"}`, "script is missing"},
		{"a retry max over 2 is refused", `{"script": ["true"], "retry": {"max": 3}}`, "retry max 3"},
		{"a retry when GitLab does not know is refused", `{"script": ["true"], "retry": {"max": 1, "when": ["flaky"]}}`, `retry when "flaky"`},
		{"a negative timeout is refused", `{"script": ["true"], "timeout": -5}`, "negative"},
		{"a timeout that is not a duration is refused", `{"script": ["true"], "timeout": "soon"}`, `timeout "soon"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, body := admin(t, s, http.MethodPost, "/-/fake/jobs", tc.body)
			var answer struct{ Error string }
			if err := json.Unmarshal([]byte(body), &answer); err != nil || code != http.StatusBadRequest || !strings.Contains(answer.Error, tc.want) {
				t.Fatalf("want 400 with an error saying %q, got %d %s", tc.want, code, body)
			}
		})
	}
	if jobs := s.Jobs(); len(jobs) != 0 {
		t.Fatalf("a refused job was queued: %+v", jobs)
	}
	if code, body := admin(t, s, http.MethodGet, "/-/fake/jobs/1000/trace", ""); code != http.StatusNotFound {
		t.Fatalf("trace of a job the fake does not have: %d %s", code, body)
	}
	if code, body := admin(t, s, http.MethodGet, "/-/fake/jobs/latest/trace", ""); code != http.StatusBadRequest {
		t.Fatalf("trace of a job id that is not a number: %d %s", code, body)
	}

	// Positive control: the same server queues a good job, timeout in seconds.
	code, body := admin(t, s, http.MethodPost, "/-/fake/jobs", `{"script": ["true"], "timeout": 90}`)
	if code != http.StatusCreated {
		t.Fatalf("positive control: %d %s", code, body)
	}
	if jobs := s.Jobs(); len(jobs) != 1 || jobs[0].Name != "job" {
		t.Fatalf("positive control: %+v", jobs)
	}
	if code, body := admin(t, s, http.MethodGet, "/-/fake/jobs/"+strconv.FormatInt(s.Jobs()[0].ID, 10)+"/trace", ""); code != http.StatusOK || body != "" {
		t.Fatalf("positive control: the trace of a pending job is empty: %d %q", code, body)
	}
}
