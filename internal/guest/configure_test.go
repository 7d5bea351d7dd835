package guest

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"
)

// testWorkload is a Workload that takes one Config (OneConfig), reports
// the job its test sets, and records its calls in order.
type testWorkload struct {
	once OneConfig

	mu         sync.Mutex
	configures int
	job        *JobReport
	calls      *[]string
	stop       func(ctx context.Context) error
	configErr  error
}

func newTestWorkload() *testWorkload { return &testWorkload{calls: &[]string{}} }

func (w *testWorkload) record(call string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	*w.calls = append(*w.calls, call)
}

func (w *testWorkload) Configure(ctx context.Context, c Config) error {
	w.record("configure")
	if _, ok := ctx.Deadline(); !ok {
		return errors.New("configure without a deadline")
	}
	if w.configErr != nil {
		return w.configErr
	}
	first, err := w.once.Set(c)
	if err != nil {
		return err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if first {
		w.configures++
		w.job = &JobReport{Phase: JobWaiting}
	}
	return nil
}

func (w *testWorkload) Status() (bool, *JobReport) {
	_, ok := w.once.Get()
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.job == nil {
		return ok, nil
	}
	j := *w.job
	return ok, &j
}

func (w *testWorkload) Stop(ctx context.Context) error {
	w.record("stop")
	if w.stop != nil {
		return w.stop(ctx)
	}
	return nil
}

func (w *testWorkload) setJob(j JobReport) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.job = &j
}

func (w *testWorkload) started() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.configures
}

func (w *testWorkload) log() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), *w.calls...)
}

func TestAHostConfiguresTheGuestAndReadsItsJob(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			w := newTestWorkload()
			dial, logs, _ := startServer(t, tr, &stubReporter{report: testReport}, ServerOptions{Workload: w})
			c := dialClient(t, dial)

			rep, err := c.Report(callCtx(t))
			if err != nil || rep.Configured || rep.Job != nil {
				t.Fatalf("before Configure: %+v, %v; want a report of a guest not configured", rep, err)
			}
			if err := c.Configure(callCtx(t), rawConfig(t, testConfig())); err != nil {
				t.Fatalf("Configure: %v", err)
			}
			if got, ok := w.once.Get(); !ok || !got.Equal(testConfig()) {
				t.Fatalf("the workload took %v, want the config sent", got)
			}
			rep, err = c.Report(callCtx(t))
			if err != nil || !rep.Configured || rep.Job == nil || rep.Job.Phase != JobWaiting {
				t.Fatalf("after Configure: %+v, %v; want configured and a job Waiting", rep, err)
			}
			// The rest of the report is still the Reporter's.
			if !equalReports(rep, testReport) {
				t.Fatalf("report %+v lost the Reporter's fields", rep)
			}

			started := time.Date(2026, 6, 2, 13, 1, 0, 0, time.UTC)
			finished := started.Add(3 * time.Minute)
			job := JobReport{Phase: JobFailed, ID: 4242, StartedAt: &started, FinishedAt: &finished,
				QueuedSeconds: ptrTo(int64(12)), FailureReason: "script_failure", ExitCode: ptrTo(int32(1))}
			w.setJob(job)
			rep, err = c.Report(callCtx(t))
			if err != nil {
				t.Fatal(err)
			}
			if j := rep.Job; j == nil || j.Phase != job.Phase || j.ID != job.ID || !j.StartedAt.Equal(started) || !j.FinishedAt.Equal(finished) ||
				*j.QueuedSeconds != 12 || j.FailureReason != job.FailureReason || *j.ExitCode != 1 {
				t.Fatalf("job %+v, want %+v", rep.Job, job)
			}
			if l := logs.String(); strings.Contains(l, testToken) || !strings.Contains(l, "Configured the guest") {
				t.Fatalf("the guest's log shows the token, or not the configuration; logs:\n%s", l)
			}
		})
	}
}

// The host sends the config again when it lost an answer: the same config
// is no change; another is refused (one VM, one job), and the connection
// goes on, as after any configure-failed.
func TestTheSameConfigTwiceIsNoChangeAndAnotherIsRefused(t *testing.T) {
	w := newTestWorkload()
	dial, logs, _ := startServer(t, transports[0], &stubReporter{report: testReport}, ServerOptions{Workload: w})
	c := dialClient(t, dial)
	for range 2 {
		if err := c.Configure(callCtx(t), rawConfig(t, testConfig())); err != nil {
			t.Fatalf("Configure: %v", err)
		}
	}
	if n := w.started(); n != 1 {
		t.Fatalf("the workload started %d times for one config sent twice", n)
	}
	other := testConfig()
	other.Runner.Tags = []string{"linux"}
	err := c.Configure(callCtx(t), rawConfig(t, other))
	if !errors.Is(err, ErrRemote) || errors.Is(err, ErrClosed) || !strings.Contains(err.Error(), CodeConfigureFailed) ||
		!strings.Contains(err.Error(), "another configuration") {
		t.Fatalf("another config: got %v, want the guest's %s with the connection kept", err, CodeConfigureFailed)
	}
	if strings.Contains(err.Error(), testToken) || strings.Contains(logs.String(), testToken) {
		t.Fatal("the refusal quotes the token")
	}
	if got, _ := w.once.Get(); !got.Equal(testConfig()) {
		t.Fatal("the refused config replaced the first")
	}
	mustReport(t, c)
}

func TestAGuestThatCannotTakeTheConfigSaysSoAndServesOn(t *testing.T) {
	broken := testConfig()
	broken.Runner.URL = "ftp://gitlab.example.com"
	for _, tc := range []struct {
		name     string
		workload Workload
		raw      []byte
		says     string
	}{
		{"a guest that runs no workloads", nil, nil, "this guest runs no workloads"},
		{"an invalid config", newTestWorkload(), rawConfig(t, broken), "not http or https"},
		{"a config that is not an object", newTestWorkload(), []byte(`"` + testToken + `"`), "not a JSON object"},
		{"a workload that fails", &testWorkload{calls: &[]string{}, configErr: errors.New("cannot reach gitlab.example.com")}, nil, "cannot reach"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			raw := tc.raw
			if raw == nil {
				raw = rawConfig(t, testConfig())
			}
			dial, logs, _ := startServer(t, transports[0], &stubReporter{report: testReport}, ServerOptions{Workload: tc.workload})
			c := dialClient(t, dial)
			err := c.Configure(callCtx(t), raw)
			if !errors.Is(err, ErrRemote) || errors.Is(err, ErrClosed) || !strings.Contains(err.Error(), CodeConfigureFailed) || !strings.Contains(err.Error(), tc.says) {
				t.Fatalf("got %v, want the guest's %s saying %q", err, CodeConfigureFailed, tc.says)
			}
			if strings.Contains(err.Error(), testToken) || strings.Contains(logs.String(), testToken) {
				t.Fatalf("the refusal or the guest's log quotes the token; logs:\n%s", logs.String())
			}
			// The positive control: the connection goes on.
			mustReport(t, c)
		})
	}
	// The host checks what it sends: nothing that is not JSON.
	dial, _, _ := startServer(t, transports[0], &stubReporter{report: testReport}, ServerOptions{Workload: newTestWorkload()})
	c := dialClient(t, dial)
	if err := c.Configure(callCtx(t), []byte("{"+testToken)); !errors.Is(err, ErrInvalidConfig) || strings.Contains(err.Error(), testToken) {
		t.Fatalf("a config that is not JSON: got %v, want ErrInvalidConfig quoting nothing", err)
	}
	mustReport(t, c)
}

// A guest agent older than 1.2 knows no Configure: the host does not send
// it one (it would close the connection on the unknown frame), and says so.
func TestAGuestOlderThanConfigureIsNotSentTheConfig(t *testing.T) {
	c, reqs, _ := fakeGuest(t, false, frameBytes(t, HelloAck{ProtocolVersion: "1.1", AgentVersion: "old"}))
	err := c.Configure(callCtx(t), rawConfig(t, testConfig()))
	if !errors.Is(err, ErrConfigureUnsupported) || !strings.Contains(err.Error(), "1.1") {
		t.Fatalf("Configure of a 1.1 guest: %v, want ErrConfigureUnsupported", err)
	}
	if hello := <-reqs; hello.Type != TypeHello {
		t.Fatalf("first frame %s, want Hello", hello.Type)
	}
	select {
	case f := <-reqs:
		t.Fatalf("the host sent a 1.1 guest a %s", f.Type)
	case <-time.After(20 * time.Millisecond):
	}
	// The positive control: a 1.2 guest is sent the config, as it is.
	raw := rawConfig(t, testConfig())
	c2, reqs2, _ := fakeGuest(t, true, frameBytes(t, HelloAck{ProtocolVersion: "1.2", AgentVersion: "new"}), frameBytes(t, ConfigureAck{}))
	if err := c2.Configure(callCtx(t), raw); err != nil {
		t.Fatalf("Configure of a 1.2 guest: %v", err)
	}
	<-reqs2
	f := <-reqs2
	m, err := f.Decode()
	if err != nil || f.Type != TypeConfigure || string(m.(Configure).Config) != string(raw) {
		t.Fatalf("second frame %s (%v), want Configure with the config as it is", f.Type, err)
	}
}

// report11 is a Report as a 1.1 host decodes it.
type report11 struct {
	BootStage         string    `json:"bootStage"`
	XcodeVersions     []string  `json:"xcodeVersions"`
	DiskHeadroomBytes int64     `json:"diskHeadroomBytes"`
	ReadyForWork      bool      `json:"readyForWork"`
	Time              time.Time `json:"time"`
}

// A 1.1 host, which knows neither Configure nor a Report's job, is served
// by a 1.2 guest as before: handshake, reports, and a shutdown (before
// which the guest stops its workload all the same).
func TestAHostOfProtocol11IsServedAsBefore(t *testing.T) {
	w := newTestWorkload()
	w.setJob(JobReport{Phase: JobRunning, ID: 1})
	shutdown := make(chan struct{}, 1)
	dial, _, _ := startServer(t, transports[1], &stubReporter{report: testReport}, ServerOptions{Workload: w,
		Shutdown: func(context.Context) error { shutdown <- struct{}{}; return nil }})
	conn, err := dial()
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(waitLimit))
	if err := WriteMessage(conn, Hello{ProtocolVersion: "1.1"}); err != nil {
		t.Fatal(err)
	}
	if m, err := ReadMessage(conn); err != nil || m.Type() != TypeHelloAck {
		t.Fatalf("handshake: %v, %v", m, err)
	}
	if err := WriteMessage(conn, ReportRequest{}); err != nil {
		t.Fatal(err)
	}
	f, err := ReadFrame(conn)
	if err != nil || f.Type != TypeReport {
		t.Fatalf("report: %v, %v", f.Type, err)
	}
	var old report11
	if err := json.Unmarshal(f.Payload, &old); err != nil {
		t.Fatalf("a 1.1 host cannot read the 1.2 report %s: %v", f.Payload, err)
	}
	if old.BootStage != testReport.BootStage || !old.ReadyForWork || !old.Time.Equal(testReport.Time) {
		t.Fatalf("a 1.1 host reads %+v", old)
	}
	if err := WriteMessage(conn, ShutdownRequest{}); err != nil {
		t.Fatal(err)
	}
	if m, err := ReadMessage(conn); err != nil || m.Type() != TypeShutdownAck {
		t.Fatalf("shutdown: %v, %v", m, err)
	}
	<-shutdown
	if got := w.log(); len(got) != 1 || got[0] != "stop" {
		t.Fatalf("the workload saw %v, want one stop", got)
	}
}

// Asked to shut down, the guest stops its workload first (so that a job
// that runs is reported failed before the VM powers off), within
// StopTimeout; it shuts down whether Stop fails or hangs.
func TestTheWorkloadIsStoppedBeforeTheGuestShutsDown(t *testing.T) {
	for _, tc := range []struct {
		name string
		stop func(ctx context.Context) error
	}{
		{"a workload that stops", func(context.Context) error { return nil }},
		{"a workload whose stop fails", func(context.Context) error { return errors.New("gitlab unreachable") }},
		{"a workload whose stop hangs", func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newTestWorkload()
			var deadline time.Duration
			w.stop = func(ctx context.Context) error {
				d, ok := ctx.Deadline()
				if ok {
					deadline = time.Until(d)
				}
				return tc.stop(ctx)
			}
			const stopTimeout = 100 * time.Millisecond
			dial, _, _ := startServer(t, transports[0], &stubReporter{report: testReport}, ServerOptions{Workload: w, StopTimeout: stopTimeout,
				Shutdown: func(context.Context) error { w.record("shutdown"); return nil }})
			c := dialClient(t, dial)
			if err := c.Configure(callCtx(t), rawConfig(t, testConfig())); err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			if err := c.Shutdown(callCtx(t)); err != nil {
				t.Fatalf("Shutdown: %v", err)
			}
			if took := time.Since(start); took > 2*time.Second {
				t.Fatalf("the shutdown took %v with a stop bounded by %v", took, stopTimeout)
			}
			if got := strings.Join(w.log(), ","); got != "configure,stop,shutdown" {
				t.Fatalf("calls %s, want configure,stop,shutdown", got)
			}
			if deadline <= 0 || deadline > stopTimeout {
				t.Fatalf("Stop had %v left, want a deadline within %v", deadline, stopTimeout)
			}
		})
	}
	// The control: a guest without a workload shuts down as before.
	done := make(chan struct{}, 1)
	dial, _, _ := startServer(t, transports[0], &stubReporter{report: testReport}, ServerOptions{
		Shutdown: func(context.Context) error { done <- struct{}{}; return nil }})
	if err := dialClient(t, dial).Shutdown(callCtx(t)); err != nil {
		t.Fatal(err)
	}
	<-done
}
