package gitlabtest_test

import (
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"net/http"
	"sync"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/boualleiguie/macrack-operator/internal/gitlab"
	"github.com/boualleiguie/macrack-operator/internal/gitlab/gitlabtest"
)

const token = "glrt-t1_fakeRUNNERtoken0001"

func ctx(t *testing.T) context.Context {
	t.Helper()
	c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return c
}

func newClient(t *testing.T, s *gitlabtest.Server) *gitlab.Client {
	t.Helper()
	c, err := s.NewClient()
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func checksum(b string) string { return fmt.Sprintf("crc32:%08x", crc32.ChecksumIEEE([]byte(b))) }

// take requests a job and fails the test if none comes.
func take(t *testing.T, c *gitlab.Client, tok, systemID string) *gitlab.JobResponse {
	t.Helper()
	j, _, err := c.RequestJob(ctx(t), tok, systemID, gitlab.RunnerInfo{}, "")
	if err != nil || j == nil {
		t.Fatalf("want a job, got %v %v", j, err)
	}
	return j
}

func TestAJobRunsEndToEndOverTLS(t *testing.T) {
	clk := clocktesting.NewFakePassiveClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	s := gitlabtest.NewServer(t, gitlabtest.WithClock(clk))
	runnerID := s.AddRunnerToken(token)
	buildID := s.EnqueueJob(gitlabtest.JobSpec{Name: "build", Script: []string{"echo hi"}, Timeout: 10 * time.Minute})
	clk.SetTime(clk.Now().Add(42 * time.Second))
	c := newClient(t, s)

	v, err := c.VerifyRunner(ctx(t), token, "s_vm1")
	if err != nil || v.ID != runnerID {
		t.Fatalf("verify: %+v %v", v, err)
	}
	j := take(t, c, token, "s_vm1")
	if j.JobInfo.Name != "build" || j.RunnerInfo.Timeout != 600 || j.JobInfo.TimeInQueueSeconds != 42 || j.JobInfo.PipelineID != buildID {
		t.Fatalf("job %+v %+v", j.JobInfo, j.RunnerInfo)
	}
	if len(j.Steps) != 1 || j.Steps[0].Name != gitlab.StepScript || j.Steps[0].Script[0] != "echo hi" {
		t.Fatalf("steps %+v", j.Steps)
	}
	res, err := c.PatchTrace(ctx(t), j.ID, j.Token, []byte("$ echo hi\n"), 0)
	if err != nil || res.Offset != 10 || res.JobStatus != gitlab.StateRunning || res.UpdateInterval != 3*time.Second {
		t.Fatalf("patch: %+v %v", res, err)
	}
	if res, err = c.PatchTrace(ctx(t), j.ID, j.Token, []byte("hi\n"), res.Offset); err != nil || res.Offset != 13 {
		t.Fatalf("patch: %+v %v", res, err)
	}
	trace := "$ echo hi\nhi\n"
	u, err := c.UpdateJob(ctx(t), j.ID, j.Token, gitlab.JobUpdate{
		State: gitlab.StateSuccess, Output: gitlab.JobTraceOutput{Checksum: checksum(trace), Bytesize: len(trace)},
	})
	if err != nil || u.Accepted || u.JobStatus != gitlab.StateSuccess {
		t.Fatalf("update: %+v %v", u, err)
	}

	got, _ := s.Job(j.ID)
	if got.State != gitlab.StateSuccess || got.Trace != trace || !got.TraceChecksumOK || got.SystemID != "s_vm1" || got.RunnerID != runnerID || got.Attempt != 1 {
		t.Fatalf("job %+v", got)
	}
	if b := s.Builds(); len(b) != 1 || b[0].State != gitlab.StateSuccess || b[0].Attempts() != 1 {
		t.Fatalf("builds %+v", b)
	}
	if m := s.Managers(); len(m) != 1 || m[0].SystemID != "s_vm1" || !m[0].FirstSeen.Equal(time.Date(2026, 1, 1, 0, 0, 42, 0, time.UTC)) {
		t.Fatalf("managers %+v", m)
	}
	for ep, n := range map[string]int{gitlab.EndpointVerify: 1, gitlab.EndpointRequestJob: 1, gitlab.EndpointPatchTrace: 2, gitlab.EndpointUpdateJob: 1} {
		if s.Requests(ep) != n {
			t.Fatalf("%s: %d requests, want %d", ep, s.Requests(ep), n)
		}
	}
}

func TestAClientWithoutTheCABundleDoesNotTrustTheFake(t *testing.T) {
	s := gitlabtest.NewServer(t)
	s.AddRunnerToken(token)
	c, err := gitlab.New(s.URL(), gitlab.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.VerifyRunner(ctx(t), token, "s"); !errors.Is(err, gitlab.ErrUnavailable) {
		t.Fatalf("want a TLS failure, got %v", err)
	}
	if _, err := newClient(t, s).VerifyRunner(ctx(t), token, "s"); err != nil {
		t.Fatalf("positive control: with the bundle: %v", err)
	}
}

func TestPlainHTTPNeedsAllowHTTP(t *testing.T) {
	s := gitlabtest.NewServer(t, gitlabtest.WithPlainHTTP())
	s.AddRunnerToken(token)
	if _, err := gitlab.New(s.URL(), gitlab.Options{}); !errors.Is(err, gitlab.ErrInvalidConfig) {
		t.Fatalf("want http refused, got %v", err)
	}
	if _, err := newClient(t, s).VerifyRunner(ctx(t), token, "s"); err != nil {
		t.Fatalf("positive control: %v", err)
	}
}

func TestLastUpdateShortCutsAnUnchangedQueue(t *testing.T) {
	s := gitlabtest.NewServer(t)
	s.AddRunnerToken(token)
	c := newClient(t, s)
	j, lu, err := c.RequestJob(ctx(t), token, "s", gitlab.RunnerInfo{}, "")
	if err != nil || j != nil || lu == "" {
		t.Fatalf("want 204 with X-GitLab-Last-Update, got %v %q %v", j, lu, err)
	}
	if s.LastUpdateHits() != 0 {
		t.Fatal("positive control: a request without last_update looks at the queue")
	}
	j, lu2, err := c.RequestJob(ctx(t), token, "s", gitlab.RunnerInfo{}, lu)
	if err != nil || j != nil || lu2 != lu || s.LastUpdateHits() != 1 {
		t.Fatalf("an unchanged queue: got %v %q %v", j, lu2, err)
	}
	s.EnqueueJob(gitlabtest.JobSpec{Script: []string{"true"}})
	if j, _, err = c.RequestJob(ctx(t), token, "s", gitlab.RunnerInfo{}, lu); err != nil || j == nil {
		t.Fatalf("a new job changes the queue: got %v %v", j, err)
	}
}

func TestRunnersPickJobsByTag(t *testing.T) {
	for _, tc := range []struct {
		name    string
		runner  []gitlabtest.RunnerOption
		jobTags []string
		picks   bool
	}{
		{"an untagged runner picks an untagged job", nil, nil, true},
		{"an untagged runner does not pick a tagged job", nil, []string{"macos"}, false},
		{"a runner with all the job's tags picks it", []gitlabtest.RunnerOption{gitlabtest.WithTags("macos", "arm64")}, []string{"macos"}, true},
		{"a runner missing one of the job's tags does not pick it", []gitlabtest.RunnerOption{gitlabtest.WithTags("macos")}, []string{"macos", "xcode16"}, false},
		{"a runner that runs untagged jobs picks an untagged job", []gitlabtest.RunnerOption{gitlabtest.WithTags("macos")}, nil, true},
		{"a runner that does not run untagged jobs leaves them", []gitlabtest.RunnerOption{gitlabtest.WithTags("macos"), gitlabtest.WithRunUntagged(false)}, nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := gitlabtest.NewServer(t)
			s.AddRunnerToken(token, tc.runner...)
			s.EnqueueJob(gitlabtest.JobSpec{Tags: tc.jobTags})
			j, _, err := newClient(t, s).RequestJob(ctx(t), token, "s", gitlab.RunnerInfo{}, "")
			if err != nil || (j != nil) != tc.picks {
				t.Fatalf("got %v %v", j, err)
			}
		})
	}
}

func TestARevokedTokenIsRefusedByEveryEndpoint(t *testing.T) {
	s := gitlabtest.NewServer(t)
	s.AddRunnerToken(token)
	s.EnqueueJob(gitlabtest.JobSpec{})
	s.EnqueueJob(gitlabtest.JobSpec{})
	c := newClient(t, s)
	if _, err := c.VerifyRunner(ctx(t), token, "s"); err != nil {
		t.Fatalf("positive control: %v", err)
	}
	taken := take(t, c, token, "s")

	s.RevokeRunnerToken(token)
	if _, err := c.VerifyRunner(ctx(t), token, "s"); !errors.Is(err, gitlab.ErrForbidden) {
		t.Fatalf("verify: %v", err)
	}
	if j, _, err := c.RequestJob(ctx(t), token, "s", gitlab.RunnerInfo{}, ""); !errors.Is(err, gitlab.ErrForbidden) || j != nil {
		t.Fatalf("request: %v %v", j, err)
	}
	if err := c.UnregisterManager(ctx(t), token, "s"); !errors.Is(err, gitlab.ErrForbidden) {
		t.Fatalf("unregister: %v", err)
	}
	if _, err := c.PatchTrace(ctx(t), taken.ID, taken.Token, []byte("x"), 0); err != nil {
		t.Fatalf("a job taken before the revocation keeps its job token: %v", err)
	}
	if jobs := s.Jobs(); jobs[1].State != gitlab.StatePending {
		t.Fatalf("the second job was handed out: %+v", jobs[1])
	}
	s.AddRunnerToken(token)
	if _, err := c.VerifyRunner(ctx(t), token, "s"); err != nil {
		t.Fatalf("adding the token again lifts the revocation: %v", err)
	}
}

func TestManagersAreRegisteredAndDeleted(t *testing.T) {
	s := gitlabtest.NewServer(t)
	s.AddRunnerToken(token)
	c := newClient(t, s)
	for _, id := range []string{"s_b", "s_a"} {
		if _, err := c.VerifyRunner(ctx(t), token, id); err != nil {
			t.Fatal(err)
		}
	}
	if m := s.Managers(); len(m) != 2 || m[0].SystemID != "s_a" {
		t.Fatalf("managers %+v", m)
	}
	if err := c.UnregisterManager(ctx(t), token, "s_a"); err != nil {
		t.Fatal(err)
	}
	if err := c.UnregisterManager(ctx(t), token, "s_a"); !errors.Is(err, gitlab.ErrNotFound) {
		t.Fatalf("deleting it again: %v", err)
	}
	if m, d := s.Managers(), s.DeletedManagers(); len(m) != 1 || m[0].SystemID != "s_b" || len(d) != 1 || d[0].SystemID != "s_a" {
		t.Fatalf("managers %+v, deleted %+v", m, d)
	}
}

func TestTraceOffsetsAreCheckedByteForByte(t *testing.T) {
	s := gitlabtest.NewServer(t)
	s.AddRunnerToken(token)
	s.EnqueueJob(gitlabtest.JobSpec{})
	c := newClient(t, s)
	j := take(t, c, token, "s")
	if _, err := c.PatchTrace(ctx(t), j.ID, j.Token, []byte("hello"), 0); err != nil {
		t.Fatal(err)
	}
	for _, off := range []int64{0, 4, 6} {
		_, err := c.PatchTrace(ctx(t), j.ID, j.Token, []byte("world"), off)
		var rm *gitlab.RangeMismatchError
		if !errors.As(err, &rm) || rm.Offset != 5 {
			t.Fatalf("offset %d: want a 416 at 5, got %v", off, err)
		}
	}
	if res, err := c.PatchTrace(ctx(t), j.ID, j.Token, []byte(" world"), 5); err != nil || res.Offset != 11 {
		t.Fatalf("resending from GitLab's offset: %+v %v", res, err)
	}
	if got, _ := s.Job(j.ID); got.Trace != "hello world" {
		t.Fatalf("trace %q", got.Trace)
	}
}

func TestJobEndpointsRefuseAWrongTokenAndAFinishedJob(t *testing.T) {
	s := gitlabtest.NewServer(t)
	s.AddRunnerToken(token)
	s.EnqueueJob(gitlabtest.JobSpec{})
	c := newClient(t, s)
	j := take(t, c, token, "s")
	for name, tok := range map[string]string{"a wrong token": "glcbt-wrongwrongwrong", "the runner's token": token} {
		_, err := c.UpdateJob(ctx(t), j.ID, tok, gitlab.JobUpdate{State: gitlab.StateRunning})
		var se *gitlab.StatusError
		if !errors.As(err, &se) || se.Code != http.StatusForbidden || se.JobStatus != "" {
			t.Fatalf("%s: %v", name, err)
		}
	}
	if _, err := c.UpdateJob(ctx(t), j.ID, j.Token, gitlab.JobUpdate{State: gitlab.StateRunning}); err != nil {
		t.Fatalf("positive control: a keep-alive: %v", err)
	}
	if _, err := c.UpdateJob(ctx(t), j.ID, j.Token, gitlab.JobUpdate{State: gitlab.StateSuccess}); err != nil {
		t.Fatal(err)
	}
	_, err := c.PatchTrace(ctx(t), j.ID, j.Token, []byte("late"), 0)
	var se *gitlab.StatusError
	if !errors.As(err, &se) || !errors.Is(err, gitlab.ErrForbidden) || se.JobStatus != string(gitlab.StateSuccess) {
		t.Fatalf("a finished job: %v", err)
	}
	if _, err := c.UpdateJob(ctx(t), j.ID, j.Token, gitlab.JobUpdate{State: "exploded"}); !errors.Is(err, gitlab.ErrForbidden) {
		t.Fatalf("a finished job, any state: %v", err)
	}
}

func TestAFailedJobIsRetriedAsGitLabWould(t *testing.T) {
	s := gitlabtest.NewServer(t)
	s.AddRunnerToken(token)
	systemFailures := s.EnqueueJob(gitlabtest.JobSpec{Name: "sys", Retry: gitlabtest.Retry{Max: 2, When: []string{"runner_system_failure"}}})
	c := newClient(t, s)

	var ids []int64
	for range 3 {
		j := take(t, c, token, "s")
		ids = append(ids, j.ID)
		if _, err := c.UpdateJob(ctx(t), j.ID, j.Token, gitlab.JobUpdate{State: gitlab.StateFailed, FailureReason: gitlab.FailureRunnerSystem}); err != nil {
			t.Fatal(err)
		}
	}
	if j, _, err := c.RequestJob(ctx(t), token, "s", gitlab.RunnerInfo{}, ""); err != nil || j != nil {
		t.Fatalf("after max retries nothing is left: %v %v", j, err)
	}
	b := s.Builds()[0]
	if b.ID != systemFailures || b.Attempts() != 3 || b.State != gitlab.StateFailed || b.FailureReason != gitlab.FailureRunnerSystem {
		t.Fatalf("build %+v", b)
	}
	for i, id := range ids {
		j, _ := s.Job(id)
		if j.BuildID != systemFailures || j.Attempt != i+1 || j.Retried != (i < 2) {
			t.Fatalf("job %d: %+v", i, j)
		}
	}

	scripts := s.EnqueueJob(gitlabtest.JobSpec{Name: "script", Retry: gitlabtest.Retry{Max: 2, When: []string{"runner_system_failure"}}})
	j := take(t, c, token, "s")
	if _, err := c.UpdateJob(ctx(t), j.ID, j.Token, gitlab.JobUpdate{State: gitlab.StateFailed, FailureReason: gitlab.FailureScript, ExitCode: 1}); err != nil {
		t.Fatal(err)
	}
	if b := s.Builds()[1]; b.ID != scripts || b.Attempts() != 1 || b.FailureReason != gitlab.FailureScript || b.ExitCode != 1 {
		t.Fatalf("a script failure is not retried: %+v", b)
	}
}

func TestAnUnknownFailureReasonIsStoredAsUnknownFailure(t *testing.T) {
	s := gitlabtest.NewServer(t)
	s.AddRunnerToken(token)
	s.EnqueueJob(gitlabtest.JobSpec{})
	c := newClient(t, s)
	j := take(t, c, token, "s")
	if _, err := c.UpdateJob(ctx(t), j.ID, j.Token, gitlab.JobUpdate{State: gitlab.StateFailed, FailureReason: "runner_interrupted"}); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.Job(j.ID); got.FailureReason != gitlab.FailureUnknown {
		t.Fatalf("got %q", got.FailureReason)
	}
}

func TestACanceledJobStopsTheRunnerAndIsNotRetried(t *testing.T) {
	s := gitlabtest.NewServer(t)
	s.AddRunnerToken(token)
	s.EnqueueJob(gitlabtest.JobSpec{Retry: gitlabtest.Retry{Max: 2}})
	c := newClient(t, s)
	j := take(t, c, token, "s")
	if !s.CancelJob(j.ID) || s.CancelJob(j.ID) {
		t.Fatal("cancel once, and only once")
	}
	_, err := c.PatchTrace(ctx(t), j.ID, j.Token, []byte("x"), 0)
	var se *gitlab.StatusError
	if !errors.As(err, &se) || se.JobStatus != string(gitlab.StateCanceled) {
		t.Fatalf("got %v", err)
	}
	if b := s.Builds()[0]; b.Attempts() != 1 || b.State != gitlab.StateCanceled {
		t.Fatalf("build %+v", b)
	}
}

func TestFaultsMakeAnEndpointMisbehave(t *testing.T) {
	s := gitlabtest.NewServer(t)
	s.AddRunnerToken(token)
	c := newClient(t, s)

	s.SetFault(gitlab.EndpointVerify, gitlabtest.Fault{Status: 500, Times: 1})
	if _, err := c.VerifyRunner(ctx(t), token, "s"); !errors.Is(err, gitlab.ErrUnavailable) {
		t.Fatalf("a 500: %v", err)
	}
	if _, err := c.VerifyRunner(ctx(t), token, "s"); err != nil {
		t.Fatalf("after one time: %v", err)
	}

	s.SetFault(gitlab.EndpointVerify, gitlabtest.Fault{Stall: time.Minute})
	short, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := c.VerifyRunner(short, token, "s"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a stall: %v", err)
	}
	s.ClearFault(gitlab.EndpointVerify)
	if _, err := c.VerifyRunner(ctx(t), token, "s"); err != nil {
		t.Fatalf("after clearing: %v", err)
	}

	s.EnqueueJob(gitlabtest.JobSpec{})
	j := take(t, c, token, "s")
	s.SetFault(gitlab.EndpointUpdateJob, gitlabtest.Fault{
		Status: http.StatusAccepted, Times: 1, Header: http.Header{"X-Gitlab-Trace-Update-Interval": {"2"}},
	})
	u, err := c.UpdateJob(ctx(t), j.ID, j.Token, gitlab.JobUpdate{State: gitlab.StateSuccess})
	if err != nil || !u.Accepted || u.UpdateInterval != 2*time.Second {
		t.Fatalf("a 202: %+v %v", u, err)
	}
	if got, _ := s.Job(j.ID); got.State != gitlab.StateRunning {
		t.Fatalf("a 202 applies nothing: %+v", got)
	}
	if u, err := c.UpdateJob(ctx(t), j.ID, j.Token, gitlab.JobUpdate{State: gitlab.StateSuccess}); err != nil || u.Accepted {
		t.Fatalf("sent again: %+v %v", u, err)
	}
	if s.Requests(gitlab.EndpointVerify) != 4 || s.Requests(gitlab.EndpointUpdateJob) != 2 {
		t.Fatalf("counts %d %d", s.Requests(gitlab.EndpointVerify), s.Requests(gitlab.EndpointUpdateJob))
	}
}

func TestEachJobGoesToExactlyOneOfManyRunners(t *testing.T) {
	s := gitlabtest.NewServer(t)
	s.AddRunnerToken(token)
	const jobs = 20
	for range jobs {
		s.EnqueueJob(gitlabtest.JobSpec{})
	}
	c := newClient(t, s)
	var mu sync.Mutex
	seen := map[int64]bool{}
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				j, _, err := c.RequestJob(context.Background(), token, fmt.Sprintf("s_%d", w), gitlab.RunnerInfo{}, "")
				if err != nil {
					t.Error(err)
					return
				}
				if j == nil {
					return
				}
				mu.Lock()
				if seen[j.ID] {
					t.Errorf("job %d handed out twice", j.ID)
				}
				seen[j.ID] = true
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if len(seen) != jobs {
		t.Fatalf("%d jobs handed out, want %d", len(seen), jobs)
	}
}

func TestALostAnswerLeavesTheWorkDone(t *testing.T) {
	s := gitlabtest.NewServer(t)
	s.AddRunnerToken(token)
	s.EnqueueJob(gitlabtest.JobSpec{})
	c := newClient(t, s)
	j := take(t, c, token, "s")
	s.SetFault(gitlab.EndpointPatchTrace, gitlabtest.Fault{Status: 502, AfterHandling: true, Times: 1})
	if _, err := c.PatchTrace(ctx(t), j.ID, j.Token, []byte("abc"), 0); !errors.Is(err, gitlab.ErrUnavailable) {
		t.Fatalf("the answer: %v", err)
	}
	_, err := c.PatchTrace(ctx(t), j.ID, j.Token, []byte("abc"), 0)
	var rm *gitlab.RangeMismatchError
	if !errors.As(err, &rm) || rm.Offset != 3 {
		t.Fatalf("GitLab kept the patch: %v", err)
	}
}

func TestEnqueueJobRefusesARetryGitLabWouldRefuse(t *testing.T) {
	s := gitlabtest.NewServer(t)
	defer func() {
		if recover() == nil {
			t.Fatal("want a panic for retry max 3")
		}
	}()
	s.EnqueueJob(gitlabtest.JobSpec{Retry: gitlabtest.Retry{Max: 3}})
}
