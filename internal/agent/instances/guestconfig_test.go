package instances

import (
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	ctrl "sigs.k8s.io/controller-runtime"

	computev1alpha1 "github.com/boualleiguie/macrack-operator/api/compute/v1alpha1"
	"github.com/boualleiguie/macrack-operator/internal/agent/driver/sim"
	"github.com/boualleiguie/macrack-operator/internal/agent/jobs"
	"github.com/boualleiguie/macrack-operator/internal/agent/simguest"
	"github.com/boualleiguie/macrack-operator/internal/guest"
	"github.com/boualleiguie/macrack-operator/internal/sealing"
)

// runnerToken is the secret that must never leave the guest config: not
// into a log line, a status, an Event, or the agent's disk.
const runnerToken = "glrt-AGENT-MUST-NOT-LEAK-7f3a"

// logLines records every log line, V(1) included.
type logLines struct {
	mu    sync.Mutex
	lines []string
}

func (l *logLines) logger() logr.Logger {
	return funcr.New(func(prefix, args string) {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.lines = append(l.lines, prefix+" "+args)
	}, funcr.Options{Verbosity: 10})
}

func (l *logLines) all() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.lines...)
}

func (l *logLines) count(msg string) int {
	n := 0
	for _, line := range l.all() {
		if strings.Contains(line, `"msg"="`+msg+`"`) && strings.Contains(line, `"level"=0`) {
			n++
		}
	}
	return n
}

// bootWorkload is a VM's job loop on the host, for a test: it takes one
// config, and reports the job its test sets.
type bootWorkload struct {
	once   guest.OneConfig
	refuse bool
	mu     sync.Mutex
	job    *guest.JobReport
	// stops counts the guest's Stop calls: the agent asked it to shut down.
	stops int
}

func (w *bootWorkload) Configure(_ context.Context, c guest.Config) error {
	if w.refuse {
		return errors.New("cannot reach the CI system")
	}
	first, err := w.once.Set(c)
	if err == nil && first {
		w.setJob(guest.JobReport{Phase: guest.JobWaiting})
	}
	return err
}

func (w *bootWorkload) Status() (bool, *guest.JobReport) {
	_, ok := w.once.Get()
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.job == nil {
		return ok, nil
	}
	j := *w.job
	return ok, &j
}

func (w *bootWorkload) Stop(context.Context) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.stops++
	return nil
}

func (w *bootWorkload) stopped() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.stops
}

func (w *bootWorkload) setJob(j guest.JobReport) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.job = &j
}

// token is the runner token this boot took, if any.
func (w *bootWorkload) token() string {
	if c, ok := w.once.Get(); ok {
		return c.Runner.Token
	}
	return ""
}

// workloads are the job loops of the rig's VMs, on the host, per VM.
type workloads struct {
	mu     sync.Mutex
	refuse bool
	byVM   map[string][]*bootWorkload
}

func (ws *workloads) make(_ context.Context, vm jobs.VM, _ logr.Logger) guest.Workload {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	w := &bootWorkload{refuse: ws.refuse}
	key := vm.Namespace + "/" + vm.Name
	ws.byVM[key] = append(ws.byVM[key], w)
	return w
}

// boots are the job loops made for the instance name's VM, on the host,
// first first: one per run of the agent.
func (ws *workloads) boots(name string) []*bootWorkload {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	return append([]*bootWorkload(nil), ws.byVM[testNS+"/"+name]...)
}

func (ws *workloads) latest(t *testing.T, name string) *bootWorkload {
	t.Helper()
	b := ws.boots(name)
	if len(b) == 0 {
		t.Fatalf("%s's guest never booted", name)
	}
	return b[len(b)-1]
}

// configRig is a host whose guests run test workloads, whose agent has a
// guest key, and whose every log line is kept.
type configRig struct {
	*quarantineRig
	key       *sealing.Key
	workloads *workloads
	logs      *logLines
}

func newConfigRig(t *testing.T, refuse bool, names ...string) *configRig {
	t.Helper()
	logs := &logLines{}
	ws := &workloads{refuse: refuse, byVM: map[string][]*bootWorkload{}}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	handler := simguest.Handler(ctx, simguest.Reporter{XcodeVersions: []string{"16.4"}, HeadroomBytes: 50 << 30, Clock: clockNow{}},
		logs.logger().WithName("guest"))
	qr := newQuarantineRig(t, []sim.Option{sim.WithGuestHandler(handler), sim.WithLogger(logs.logger().WithName("vm"))}, names...)
	key, err := sealing.LoadOrCreate(filepath.Join(qr.r.Disks.Root, "guest-key"))
	if err != nil {
		t.Fatal(err)
	}
	qr.r.GuestKey, qr.r.Log = key, logs.logger()
	qr.r.Jobs = &jobs.Runners{Parent: ctx, New: ws.make, Log: logs.logger()}
	qr.r.Scripts = func(*computev1alpha1.MacOSInstance) jobs.ScriptRunner { return nil }
	return &configRig{quarantineRig: qr, key: key, workloads: ws, logs: logs}
}

// clockNow is the real clock, passive.
type clockNow struct{}

func (clockNow) Now() time.Time                  { return time.Now() }
func (clockNow) Since(t time.Time) time.Duration { return time.Since(t) }

func runnerConfig(token string) []byte {
	b, err := json.Marshal(guest.Config{Version: guest.ConfigVersion, Runner: &guest.RunnerConfig{
		URL: "https://gitlab.example.com", Token: token, Tags: []string{"macos"}, MaxJobDuration: guest.Duration(time.Hour)}})
	if err != nil {
		panic(err)
	}
	return b
}

// seal seals the runner config for the instance ns/name on node, to key.
func (cr *configRig) seal(key *sealing.Key, ns, name, node string) *computev1alpha1.SealedGuestConfig {
	cr.t.Helper()
	c, err := sealing.Seal(key.Public(), sealing.Binding{Namespace: ns, Name: name, NodeName: node}, runnerConfig(runnerToken))
	if err != nil {
		cr.t.Fatal(err)
	}
	return c
}

// giveConfig sets the instance's spec.guestConfig, as the workload
// controller does at creation.
func (cr *configRig) giveConfig(name string, c *computev1alpha1.SealedGuestConfig) {
	cr.t.Helper()
	inst := cr.instance(name)
	inst.Spec.GuestConfig = c
	if err := cr.c.Update(context.Background(), inst); err != nil {
		cr.t.Fatal(err)
	}
}

// pass runs the instance loop once for name, with the rig's logger in ctx
// as the manager gives it.
func (cr *configRig) pass(name string) {
	cr.t.Helper()
	ctx := logr.NewContext(context.Background(), cr.logs.logger().WithName("instances"))
	if _, err := cr.r.Reconcile(ctx, ctrl.Request{NamespacedName: types.NamespacedName{Namespace: testNS, Name: name}}); err != nil {
		cr.t.Fatalf("reconciling %s: %v", name, err)
	}
}

// running reconciles name until its VM runs.
func (cr *configRig) running(name string) *computev1alpha1.RuntimeStatus {
	cr.t.Helper()
	for range 5 {
		cr.pass(name)
		if rt := cr.instance(name).Status.Runtime; rt != nil && rt.Phase == computev1alpha1.VMRunning {
			return rt
		}
	}
	cr.t.Fatalf("%s does not run: %+v", name, cr.instance(name).Status.Runtime)
	return nil
}

// assertNoLeak fails if the token is in any log line, any status or other
// write of the agent, any Event, or any file of the agent's state
// directory; the caller has proven that a guest received it.
func (cr *configRig) assertNoLeak() {
	cr.t.Helper()
	for _, l := range cr.logs.all() {
		if strings.Contains(l, runnerToken) {
			cr.t.Fatalf("a log line holds the token: %s", l)
		}
	}
	for _, w := range cr.recorded() {
		if strings.Contains(string(w.body), runnerToken) {
			cr.t.Fatalf("a %s of %s %s holds the token: %s", w.verb, w.kind, w.name, w.body)
		}
	}
	for _, e := range cr.drainEvents() {
		if strings.Contains(e, runnerToken) {
			cr.t.Fatalf("an Event holds the token: %s", e)
		}
	}
	for _, name := range []string{"ci-1", "ci-2"} {
		if inst, err := cr.tryInstance(name); err == nil {
			b, _ := json.Marshal(inst.Status)
			if strings.Contains(string(b), runnerToken) {
				cr.t.Fatalf("%s's status holds the token: %s", name, b)
			}
		}
	}
	err := filepath.WalkDir(cr.r.Disks.Root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || d.Type()&fs.ModeSocket != 0 {
			return err
		}
		if fi, err := d.Info(); err != nil || fi.Size() > 4<<20 {
			return err // the disks: sparse, and written by the VM, not the agent
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if strings.Contains(string(b), runnerToken) {
			cr.t.Fatalf("%s on the agent's disk holds the token", path)
		}
		return nil
	})
	if err != nil {
		cr.t.Fatal(err)
	}
}

func (cr *configRig) tryInstance(name string) (*computev1alpha1.MacOSInstance, error) {
	i := &computev1alpha1.MacOSInstance{}
	err := cr.c.Get(context.Background(), types.NamespacedName{Namespace: testNS, Name: name}, i)
	return i, err
}

// A config sealed for this instance on this node is opened, handed to the
// VM's job loop on the host, and reported Delivered, with the loop's job,
// in one write; and the token is nowhere but in the loop. The control:
// the loop did get the token, so the grep would have found it.
func TestASealedConfigIsDeliveredToItsJobLoopAndNowhereElse(t *testing.T) {
	cr := newConfigRig(t, false, "ci-1")
	cr.giveConfig("ci-1", cr.seal(cr.key, testNS, "ci-1", testNode))
	rt := cr.running("ci-1")
	if got := cr.workloads.latest(t, "ci-1").token(); got != runnerToken {
		t.Fatalf("the job loop took token %q, want the sealed one", got)
	}
	if rt.GuestConfig == nil || rt.GuestConfig.Phase != computev1alpha1.GuestConfigDelivered || rt.GuestConfig.Message != "" {
		t.Fatalf("guestConfig %+v, want Delivered", rt.GuestConfig)
	}
	if rt.Job == nil || rt.Job.Phase != computev1alpha1.JobWaiting {
		t.Fatalf("job %+v, want the guest's Waiting", rt.Job)
	}
	for _, w := range cr.recorded() {
		if strings.Contains(string(w.body), `"Delivered"`) && !strings.Contains(string(w.body), `"Waiting"`) {
			t.Fatalf("the config's delivery and the guest's job were two writes: %s", w.body)
		}
	}
	if n := cr.logs.count("Started the VM's job loop on the host"); n != 1 {
		t.Fatalf("the delivery was logged %d times, want once", n)
	}
	// Configured, the guest is not sent it again.
	cr.pass("ci-1")
	cr.pass("ci-1")
	if n := cr.logs.count("Started the VM's job loop on the host"); n != 1 || len(cr.workloads.boots("ci-1")) != 1 {
		t.Fatalf("delivered %d times to %d boots, want once to one", n, len(cr.workloads.boots("ci-1")))
	}
	cr.assertNoLeak()
}

// A blob sealed for another node, another instance, or to another key
// does not open here: Unreadable, with the reason and the key ids, the
// guest gets nothing, and the VM runs all the same. The control, beside
// it on the same host: ci-1's own blob is delivered.
func TestAConfigSealedForElsewhereIsUnreadableAndTheGuestGetsNothing(t *testing.T) {
	other, err := sealing.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		sealed func(cr *configRig) *computev1alpha1.SealedGuestConfig
		says   string
	}{
		{"a blob sealed for this instance on another node", func(cr *configRig) *computev1alpha1.SealedGuestConfig {
			return cr.seal(cr.key, testNS, "ci-2", "c02test00002")
		}, "another instance, node or key"},
		{"a blob sealed for another instance on this node", func(cr *configRig) *computev1alpha1.SealedGuestConfig {
			return cr.seal(cr.key, testNS, "ci-1", testNode)
		}, "another instance, node or key"},
		{"a blob sealed for another namespace's instance", func(cr *configRig) *computev1alpha1.SealedGuestConfig {
			return cr.seal(cr.key, "tenant-b", "ci-2", testNode)
		}, "another instance, node or key"},
		{"a blob sealed to another chassis' key", func(cr *configRig) *computev1alpha1.SealedGuestConfig {
			return cr.seal(other, testNS, "ci-2", testNode)
		}, "not to this chassis' key " + "KEY"},
		{"a blob sealed to another key under this key's id", func(cr *configRig) *computev1alpha1.SealedGuestConfig {
			c := cr.seal(other, testNS, "ci-2", testNode)
			c.KeyID = cr.key.ID()
			return c
		}, "does not open"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cr := newConfigRig(t, false, "ci-1", "ci-2")
			cr.giveConfig("ci-1", cr.seal(cr.key, testNS, "ci-1", testNode))
			bad := tc.sealed(cr)
			cr.giveConfig("ci-2", bad)

			if rt := cr.running("ci-1"); rt.GuestConfig == nil || rt.GuestConfig.Phase != computev1alpha1.GuestConfigDelivered {
				t.Fatalf("control: ci-1's guestConfig %+v, want Delivered", rt.GuestConfig)
			}
			rt := cr.running("ci-2")
			if rt.GuestConfig == nil || rt.GuestConfig.Phase != computev1alpha1.GuestConfigUnreadable {
				t.Fatalf("ci-2's guestConfig %+v, want Unreadable", rt.GuestConfig)
			}
			says := strings.ReplaceAll(tc.says, "KEY", cr.key.ID())
			if msg := rt.GuestConfig.Message; !strings.Contains(msg, says) || !strings.Contains(msg, bad.KeyID) || len(msg) > maxGuestConfigMessage {
				t.Fatalf("message %q, want the reason %q and key id %s", msg, says, bad.KeyID)
			}
			if rt.Job != nil {
				t.Fatalf("a guest that got nothing has job %+v", rt.Job)
			}
			for _, w := range cr.workloads.boots("ci-2") {
				if tok := w.token(); tok != "" {
					t.Fatal("the guest of an unreadable config was configured")
				}
			}
			// Unreadable stands: not opened, logged or written again.
			writes := cr.runtimeWrites()
			cr.pass("ci-2")
			cr.pass("ci-2")
			if n := cr.logs.count("The sealed guest config does not open; the VM runs no job"); n != 1 {
				t.Fatalf("the unreadable config was logged %d times, want once", n)
			}
			if got := cr.runtimeWrites() - writes; got != 0 {
				t.Fatalf("%d runtime writes after Unreadable stood, want none", got)
			}
			cr.assertNoLeak()
		})
	}
}

// A VM that restarts (its VM stopped and started) keeps its one job loop,
// which is the host's: no second loop is made, and no second config
// handed over.
func TestARestartedVMKeepsItsOneJobLoop(t *testing.T) {
	cr := newConfigRig(t, false, "ci-1")
	cr.giveConfig("ci-1", cr.seal(cr.key, testNS, "ci-1", testNode))
	cr.running("ci-1")
	if _, err := cr.helperOf("ci-1").StopVM(context.Background(), 0); err != nil {
		t.Fatal(err)
	}
	cr.running("ci-1")
	if boots := cr.workloads.boots("ci-1"); len(boots) != 1 || boots[0].token() != runnerToken {
		t.Fatalf("%d loops after the VM restarted, want the one", len(boots))
	}
	if n := cr.logs.count("Started the VM's job loop on the host"); n != 1 {
		t.Fatalf("the loop was started %d times, want once", n)
	}
	cr.assertNoLeak()
}

// An agent that restarts under a VM's job holds no loop for it: the job
// ended with the old process. It is reported Failed as the system's
// failure, once, and the VM gets no other job. The control: the same
// restart after the job ended changes nothing.
func TestAnAgentRestartedUnderAJobReportsItLost(t *testing.T) {
	cr := newConfigRig(t, false, "ci-1", "ci-2")
	for _, n := range []string{"ci-1", "ci-2"} {
		cr.giveConfig(n, cr.seal(cr.key, testNS, n, testNode))
		cr.running(n)
	}
	now := time.Now().UTC()
	cr.workloads.latest(t, "ci-1").setJob(guest.JobReport{Phase: guest.JobRunning, ID: 9, StartedAt: &now})
	cr.workloads.latest(t, "ci-2").setJob(guest.JobReport{Phase: guest.JobSucceeded, ID: 10, StartedAt: &now, FinishedAt: &now, ExitCode: ptrInt32(0)})
	cr.pass("ci-1")
	cr.pass("ci-2")

	// The restart: a new process, no loops.
	cr.r.Jobs = &jobs.Runners{Parent: context.Background(), New: cr.workloads.make, Log: cr.logs.logger()}
	cr.pass("ci-1")
	cr.pass("ci-2")
	j := cr.instance("ci-1").Status.Runtime.Job
	if j == nil || j.Phase != computev1alpha1.JobFailed || j.ID != 9 || j.FailureReason != "runner_system_failure" || j.StartedAt == nil {
		t.Fatalf("job %+v, want job 9 Failed as runner_system_failure", j)
	}
	if j := cr.instance("ci-2").Status.Runtime.Job; j == nil || j.Phase != computev1alpha1.JobSucceeded || j.ID != 10 {
		t.Fatalf("control: job %+v, want the ended job's record to stand", j)
	}
	cr.pass("ci-1")
	if n := cr.logs.count("The agent restarted under the VM's job, which ended with it; the job is the system's failure"); n != 1 {
		t.Fatalf("the lost job was logged %d times, want once", n)
	}
	for _, n := range []string{"ci-1", "ci-2"} {
		if boots := cr.workloads.boots(n); len(boots) != 1 {
			t.Fatalf("%s: %d loops, want no new one: a VM takes one job", n, len(boots))
		}
	}
	cr.assertNoLeak()
}

// The guest's job reaches status.runtime.job, times as the API keeps them;
// a report that changes nothing is no write (as TestAnUnchangedGuestReport
// IsNoWriteUntilItsTimeIsStale for the rest), and one that changes the job
// is one.
func TestTheGuestsJobReachesTheStatusOnlyWhenItChanges(t *testing.T) {
	cr := newConfigRig(t, false, "ci-1")
	cr.giveConfig("ci-1", cr.seal(cr.key, testNS, "ci-1", testNode))
	cr.running("ci-1")
	w := cr.workloads.latest(t, "ci-1")
	started := time.Date(2026, 6, 2, 13, 1, 2, 345, time.UTC)
	w.setJob(guest.JobReport{Phase: guest.JobRunning, ID: 4242, StartedAt: &started, QueuedSeconds: ptrInt64(12)})
	clk := clocktesting.NewFakeClock(time.Now())
	cr.r.Clock = clk
	cr.pass("ci-1")
	j := cr.instance("ci-1").Status.Runtime.Job
	if j == nil || j.Phase != computev1alpha1.JobRunning || j.ID != 4242 || !j.StartedAt.Time.Equal(started.Truncate(time.Second)) ||
		j.QueuedSeconds == nil || *j.QueuedSeconds != 12 || j.FinishedAt != nil {
		t.Fatalf("job %+v, want the guest's Running job 4242", j)
	}

	before := cr.runtimeWrites()
	for range 3 {
		clk.Step(10 * time.Second)
		cr.pass("ci-1")
	}
	if got := cr.runtimeWrites() - before; got != 0 {
		t.Fatalf("%d runtime writes of an unchanged job, want none", got)
	}

	finished := started.Add(3 * time.Minute)
	w.setJob(guest.JobReport{Phase: guest.JobFailed, ID: 4242, StartedAt: &started, FinishedAt: &finished, QueuedSeconds: ptrInt64(12),
		FailureReason: "script_failure", ExitCode: ptrInt32(2)})
	clk.Step(10 * time.Second)
	cr.pass("ci-1")
	if got := cr.runtimeWrites() - before; got != 1 {
		t.Fatalf("%d runtime writes for one change of the job, want one", got)
	}
	j = cr.instance("ci-1").Status.Runtime.Job
	if j.Phase != computev1alpha1.JobFailed || j.FailureReason != "script_failure" || j.ExitCode == nil || *j.ExitCode != 2 || j.FinishedAt == nil {
		t.Fatalf("job %+v, want the guest's Failed job", j)
	}

	// A job the API would refuse is not written; the last one stands, and
	// the rest of the report is written as ever.
	w.setJob(guest.JobReport{Phase: "Exploded", ID: 4242})
	clk.Step(guestReportRefresh)
	cr.pass("ci-1")
	if j := cr.instance("ci-1").Status.Runtime.Job; j.Phase != computev1alpha1.JobFailed {
		t.Fatalf("job %+v after an unknown phase, want Failed to stand", j)
	}
	cr.assertNoLeak()
}

// A job loop that refuses the config is offered it again at every poll,
// with the refusal logged once and told in status.runtime.message. The
// control is the delivering rig above.
func TestAJobLoopThatRefusesItsConfigIsToldAgainAndLoggedOnce(t *testing.T) {
	cr := newConfigRig(t, true, "ci-1")
	cr.giveConfig("ci-1", cr.seal(cr.key, testNS, "ci-1", testNode))
	cr.running("ci-1")
	cr.pass("ci-1")
	cr.pass("ci-1")
	if rt := cr.instance("ci-1").Status.Runtime; rt.GuestConfig != nil || !strings.Contains(rt.Message, "could not start the VM's job") {
		t.Fatalf("guestConfig %+v message %q, want no phase and the refusal", rt.GuestConfig, rt.Message)
	}
	if n := cr.logs.count("Starting the VM's job failed"); n != 1 {
		t.Fatalf("the refusal was logged %d times at level 0, want once", n)
	}
	cr.assertNoLeak()
}

// oldGuest plays a 1.1 guest agent: it answers Hello and reports, and
// closes the connection on a frame type it does not know, as a 1.1 agent
// does; seen records any such frame.
func oldGuest(seen chan<- guest.MessageType) sim.GuestHandler {
	return func(ctx context.Context, _ uint32, conn net.Conn) {
		defer conn.Close()
		for {
			f, err := guest.ReadFrame(conn)
			if err != nil {
				return
			}
			var answer guest.Message
			switch f.Type {
			case guest.TypeHello:
				answer = guest.HelloAck{ProtocolVersion: "1.1", AgentVersion: "old"}
			case guest.TypeReportRequest:
				answer = guest.Report{BootStage: "ready", XcodeVersions: []string{"16.4"}, DiskHeadroomBytes: 1 << 30, ReadyForWork: true, Time: time.Now()}
			default:
				seen <- f.Type
				_ = guest.WriteMessage(conn, guest.Error{Code: guest.CodeMalformed, Message: "unknown message type"})
				return
			}
			if err := guest.WriteMessage(conn, answer); err != nil {
				return
			}
		}
	}
}

// A guest agent of protocol 1.1 has no exec channel for a job's scripts:
// its VM's config is not opened, no loop starts, and the status says why.
func TestAGuestTooOldForSessionsRunsNoJob(t *testing.T) {
	seen := make(chan guest.MessageType, 8)
	logs := &logLines{}
	qr := newQuarantineRig(t, []sim.Option{sim.WithGuestHandler(oldGuest(seen))}, "ci-1")
	key, err := sealing.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	qr.r.GuestKey, qr.r.Log = key, logs.logger()
	ws := &workloads{byVM: map[string][]*bootWorkload{}}
	qr.r.Jobs = &jobs.Runners{Parent: context.Background(), New: ws.make, Log: logs.logger()}
	cr := &configRig{quarantineRig: qr, key: key, workloads: ws, logs: logs}
	cr.giveConfig("ci-1", cr.seal(key, testNS, "ci-1", testNode))
	rt := cr.running("ci-1")
	if len(ws.boots("ci-1")) != 0 {
		t.Fatal("a job loop started for a guest that cannot run its scripts")
	}
	if rt.LastReportAt == nil || !strings.Contains(rt.Message, "protocol 1.1") || rt.GuestConfig != nil {
		t.Fatalf("runtime %+v, want the old guest's report and a message naming its protocol", rt)
	}
	select {
	case ty := <-seen:
		t.Fatalf("the agent sent a 1.1 guest a %s", ty)
	default:
	}
	cr.assertNoLeak()
}

// The guest's job report is taken as the API holds it; a report the
// schema would refuse, which would fail the whole status write, is not.
func TestAGuestsJobIsTakenOnlyAsTheAPIWouldAcceptIt(t *testing.T) {
	at := time.Date(2026, 6, 2, 13, 1, 2, 999, time.FixedZone("CEST", 7200))
	far := time.Date(12026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name string
		in   *guest.JobReport
		ok   bool
		want func(*computev1alpha1.GuestJob) bool
	}{
		{"a running job is taken, its time in UTC to the second", &guest.JobReport{Phase: guest.JobRunning, ID: 1, StartedAt: &at}, true,
			func(j *computev1alpha1.GuestJob) bool {
				return j.StartedAt.Time.Equal(at.Truncate(time.Second)) && j.StartedAt.Location() == time.UTC
			}},
		{"a failure reason over 64 characters is cut", &guest.JobReport{Phase: guest.JobFailed, FailureReason: strings.Repeat("x", 100)}, true,
			func(j *computev1alpha1.GuestJob) bool { return len([]rune(j.FailureReason)) == maxFailureReason }},
		{"a negative queue time is left out", &guest.JobReport{Phase: guest.JobRunning, QueuedSeconds: ptrInt64(-1)}, true,
			func(j *computev1alpha1.GuestJob) bool { return j.QueuedSeconds == nil }},
		{"a time past year 9999 is left out", &guest.JobReport{Phase: guest.JobSucceeded, FinishedAt: &far}, true,
			func(j *computev1alpha1.GuestJob) bool { return j.FinishedAt == nil }},
		{"an unknown phase is not taken", &guest.JobReport{Phase: "Exploded"}, false, nil},
		{"a negative job id is not taken", &guest.JobReport{Phase: guest.JobRunning, ID: -1}, false, nil},
		{"no job is not taken", nil, false, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			j, ok := jobStatus(tc.in)
			if ok != tc.ok || (ok && !tc.want(j)) {
				t.Fatalf("got %+v, %v", j, ok)
			}
		})
	}
}

func ptrInt32(v int32) *int32 { return &v }
func ptrInt64(v int64) *int64 { return &v }

// A deleted instance's job loop is stopped before its VM, as a quarantine
// stops it: the loop gets to report its job before the VM goes, and the
// stop is on record.
func TestADeletedInstancesJobIsStoppedBeforeItsVM(t *testing.T) {
	cr := newConfigRig(t, false, "ci-1")
	cr.giveConfig("ci-1", cr.seal(cr.key, testNS, "ci-1", testNode))
	cr.running("ci-1")
	w := cr.workloads.latest(t, "ci-1")
	if w.stopped() != 0 {
		t.Fatal("stopped before the delete")
	}
	if err := cr.c.Delete(context.Background(), cr.instance("ci-1")); err != nil {
		t.Fatal(err)
	}
	cr.pass("ci-1")
	if n := w.stopped(); n < 1 {
		t.Fatalf("the job loop was stopped %d times, want at least once, before the VM", n)
	}
	recorded := false
	for _, wr := range cr.recorded() {
		recorded = recorded || strings.Contains(string(wr.body), `"reason":"InstanceDeleted"`)
	}
	if !recorded {
		t.Fatal("no status write recorded the stop of the deleted instance")
	}
}
