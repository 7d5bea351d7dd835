package jobloop

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"k8s.io/utils/clock"

	"github.com/boualleiguie/macrack-operator/internal/gitlab"
	"github.com/boualleiguie/macrack-operator/internal/gitlab/gitlabtest"
	"github.com/boualleiguie/macrack-operator/internal/guest"
)

func guestConfig(e *env) guest.Config {
	return guest.Config{Version: guest.ConfigVersion, Runner: &guest.RunnerConfig{
		URL: e.cfg.URL, Token: runnerToken, SystemID: "s_slot0", CABundle: string(e.gl.CABundle()),
	}}
}

func waitStatus(t *testing.T, w *Workload, ok func(*guest.JobReport) bool) *guest.JobReport {
	t.Helper()
	deadline := time.Now().Add(waitLimit)
	for time.Now().Before(deadline) {
		if _, r := w.Status(); r != nil && ok(r) {
			return r
		}
		time.Sleep(10 * time.Millisecond)
	}
	_, r := w.Status()
	t.Fatalf("the workload's job never got there: %+v", r)
	return nil
}

func TestAWorkloadRunsOneJobAndReportsIt(t *testing.T) {
	e := newEnv(t)
	w := NewSimWorkload(context.Background(), clock.RealClock{}, 20*time.Millisecond, e.logs.logger())
	if configured, _ := w.Status(); configured {
		t.Fatal("configured before Configure")
	}
	build := e.gl.EnqueueJob(gitlabtest.JobSpec{Script: []string{"echo hi"}})
	if err := w.Configure(context.Background(), guestConfig(e)); err != nil {
		t.Fatal(err)
	}
	// The same config again is no change; another is refused: one VM, one job.
	if err := w.Configure(context.Background(), guestConfig(e)); err != nil {
		t.Errorf("the same config again: %v", err)
	}
	other := guestConfig(e)
	other.Runner.SystemID = "s_other"
	if err := w.Configure(context.Background(), other); !errors.Is(err, guest.ErrAlreadyConfigured) {
		t.Errorf("another config: %v, want ErrAlreadyConfigured", err)
	}
	r := waitStatus(t, w, func(r *guest.JobReport) bool { return r.Phase == guest.JobSucceeded })
	if r.ID == 0 || r.StartedAt == nil || r.FinishedAt == nil || r.QueuedSeconds == nil {
		t.Errorf("report %+v", r)
	}
	if b := e.gl.Builds(); len(b) != 1 || b[0].ID != build || b[0].State != gitlab.StateSuccess {
		t.Errorf("builds %+v", b)
	}
	if strings.Contains(e.logs.String(), runnerToken) {
		t.Error("the token was logged")
	}
}

func TestStoppingAWorkloadMidJobReportsASystemFailure(t *testing.T) {
	e := newEnv(t)
	w := NewSimWorkload(context.Background(), clock.RealClock{}, 20*time.Millisecond, e.logs.logger())
	e.gl.EnqueueJob(gitlabtest.JobSpec{Script: []string{"sleep 1m"}})
	if err := w.Configure(context.Background(), guestConfig(e)); err != nil {
		t.Fatal(err)
	}
	waitStatus(t, w, func(r *guest.JobReport) bool { return r.Phase == guest.JobRunning })
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	if err := w.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	_, r := w.Status()
	if r.Phase != guest.JobFailed || r.FailureReason != string(gitlab.FailureRunnerSystem) {
		t.Errorf("after Stop: %+v", r)
	}
	if j := e.gl.Jobs(); len(j) != 1 || j[0].FailureReason != gitlab.FailureRunnerSystem {
		t.Errorf("GitLab holds %+v, want runner_system_failure", j)
	}
}

func TestAWorkloadWhoseTokenIsRefusedEndsWithoutAJobAndSaysWhy(t *testing.T) {
	e := newEnv(t)
	w := NewSimWorkload(context.Background(), clock.RealClock{}, 20*time.Millisecond, e.logs.logger())
	e.gl.RevokeRunnerToken(runnerToken)
	if err := w.Configure(context.Background(), guestConfig(e)); err != nil {
		t.Fatal(err)
	}
	r := waitStatus(t, w, func(r *guest.JobReport) bool { return r.Phase == guest.JobFailed })
	if r.ID != 0 || r.FailureReason != FailureTokenRejected {
		t.Errorf("report %+v, want no job and %s", r, FailureTokenRejected)
	}
}

func TestAWorkloadEndsWithItsVM(t *testing.T) {
	e := newEnv(t)
	vm, off := context.WithCancel(context.Background())
	w := NewSimWorkload(vm, clock.RealClock{}, 20*time.Millisecond, e.logs.logger())
	if err := w.Configure(context.Background(), guestConfig(e)); err != nil {
		t.Fatal(err)
	}
	waitStatus(t, w, func(r *guest.JobReport) bool { return r.Phase == guest.JobWaiting })
	off()
	r := waitStatus(t, w, func(r *guest.JobReport) bool { return r.Phase == guest.JobFailed })
	if r.ID != 0 {
		t.Errorf("a job was taken by a VM that went: %+v", r)
	}
	if n := len(e.gl.Jobs()); n != 0 {
		t.Errorf("GitLab handed out %d jobs", n)
	}
}
