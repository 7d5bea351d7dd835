package gitlabrunner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	computev1alpha1 "github.com/boualleiguie/macrack-operator/api/compute/v1alpha1"
	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
	leasingv1alpha1 "github.com/boualleiguie/macrack-operator/api/leasing/v1alpha1"
	workloadsv1alpha1 "github.com/boualleiguie/macrack-operator/api/workloads/v1alpha1"
	"github.com/boualleiguie/macrack-operator/internal/gitlab"
	"github.com/boualleiguie/macrack-operator/internal/guest"
	"github.com/boualleiguie/macrack-operator/internal/sealing"
)

var t0 = time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)

const (
	ns    = "tenant-a"
	token = "glrt-unit-test-token-0123456789"
	node  = "c02xl0ghjgh5"
)

// stubGitLab answers verify and unregister as told, and counts the calls.
// A unit fake: the envtest suite runs the controller against gitlabtest,
// which speaks GitLab's wire shapes.
type stubGitLab struct {
	mu         sync.Mutex
	verifyErr  error
	verified   []string
	unregister []string
}

func (g *stubGitLab) VerifyRunner(_ context.Context, tok, id string) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if tok != token {
		return fmt.Errorf("wrong token")
	}
	g.verified = append(g.verified, id)
	return g.verifyErr
}

func (g *stubGitLab) UnregisterManager(_ context.Context, _, id string) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.unregister = append(g.unregister, id)
	return nil
}

// oneClient is TenantClients over one client: the fake has no identities.
type oneClient struct{ c client.Client }

func (o oneClient) For(string) (client.Client, error) { return o.c, nil }

type fixture struct {
	r   *Reconciler
	c   client.Client
	gl  *stubGitLab
	key *sealing.Key
}

func newFixture(t *testing.T, capacity int32, objs ...client.Object) *fixture {
	t.Helper()
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{corev1.AddToScheme, fleetv1alpha1.AddToScheme, leasingv1alpha1.AddToScheme,
		computev1alpha1.AddToScheme, workloadsv1alpha1.AddToScheme} {
		if err := add(s); err != nil {
			t.Fatal(err)
		}
	}
	key, err := sealing.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	pub := key.Public()
	base := []client.Object{
		&fleetv1alpha1.MacNodeClass{ObjectMeta: metav1.ObjectMeta{Name: "m4"}, Spec: fleetv1alpha1.MacNodeClassSpec{VMCapacity: capacity}},
		&leasingv1alpha1.MacNodeLease{ObjectMeta: metav1.ObjectMeta{Name: "build", Namespace: ns},
			Spec:   leasingv1alpha1.MacNodeLeaseSpec{NodeClassName: "m4", MinimumDuration: "24h"},
			Status: leasingv1alpha1.MacNodeLeaseStatus{Phase: leasingv1alpha1.LeaseBound, NodeName: node}},
		&fleetv1alpha1.MacNode{ObjectMeta: metav1.ObjectMeta{Name: node}, Spec: fleetv1alpha1.MacNodeSpec{Serial: strings.ToUpper(node), NodeClassName: "m4"},
			Status: fleetv1alpha1.MacNodeStatus{Phase: fleetv1alpha1.MacNodeLeased, Reported: &fleetv1alpha1.ReportedFacts{GuestKey: &pub}}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "runner-token", Namespace: ns}, Data: map[string][]byte{"token": []byte(token + "\n")}},
	}
	c := fake.NewClientBuilder().WithScheme(s).WithObjects(append(base, objs...)...).
		WithStatusSubresource(&workloadsv1alpha1.GitLabRunner{}, &computev1alpha1.MacOSInstance{}, &leasingv1alpha1.MacNodeLease{}, &fleetv1alpha1.MacNode{}).
		Build()
	gl := &stubGitLab{}
	return &fixture{c: c, gl: gl, key: key, r: &Reconciler{
		Client: c, Tenants: oneClient{c}, Clock: clocktesting.NewFakeClock(t0),
		GitLab:   func(string, []byte) (GitLab, error) { return gl, nil },
		Recorder: events.NewFakeRecorder(100),
	}}
}

func runner(concurrency int32) *workloadsv1alpha1.GitLabRunner {
	return &workloadsv1alpha1.GitLabRunner{
		ObjectMeta: metav1.ObjectMeta{Name: "ios", Namespace: ns, UID: "runner-uid", Finalizers: []string{workloadsv1alpha1.RunnerFinalizer}},
		Spec: workloadsv1alpha1.GitLabRunnerSpec{LeaseName: "build", ImageName: "sequoia", Concurrency: concurrency,
			Template: workloadsv1alpha1.InstanceTemplate{CPU: 4, Memory: resource.MustParse("8Gi"), Disk: resource.MustParse("200Gi")},
			GitLab: workloadsv1alpha1.GitLabSpec{URL: "https://gitlab.example.com",
				TokenSecretRef: workloadsv1alpha1.SecretKeyRef{Name: "runner-token", Key: "token"}},
			MaxJobDuration: metav1.Duration{Duration: time.Hour}},
	}
}

func (f *fixture) reconcile(t *testing.T) {
	t.Helper()
	if _, err := f.r.Reconcile(context.Background(), ctrl.Request{NamespacedName: types.NamespacedName{Namespace: ns, Name: "ios"}}); err != nil {
		t.Fatalf("Reconcile: %v", err)
	}
}

func (f *fixture) instances(t *testing.T) []computev1alpha1.MacOSInstance {
	t.Helper()
	list := &computev1alpha1.MacOSInstanceList{}
	if err := f.c.List(context.Background(), list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	return list.Items
}

func (f *fixture) runner(t *testing.T) *workloadsv1alpha1.GitLabRunner {
	t.Helper()
	r := &workloadsv1alpha1.GitLabRunner{}
	if err := f.c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: "ios"}, r); err != nil {
		t.Fatal(err)
	}
	return r
}

func TestAVerifiedRunnerFillsItsPoolWithVMsWhoseConfigOnlyTheirChassisOpens(t *testing.T) {
	f := newFixture(t, 2, runner(2))
	f.reconcile(t)
	insts := f.instances(t)
	if len(insts) != 2 {
		t.Fatalf("want 2 VMs, got %d", len(insts))
	}
	for _, inst := range insts {
		slot := slotOf(&inst)
		if want := InstanceName("ios", slot, 1); inst.Name != want {
			t.Errorf("VM %s, want %s", inst.Name, want)
		}
		if ref := metav1.GetControllerOf(&inst); ref == nil || ref.UID != "runner-uid" || ref.BlockOwnerDeletion != nil {
			t.Errorf("VM %s owner %+v, want the runner, not blocking its deletion", inst.Name, ref)
		}
		if inst.Spec.GuestConfig == nil {
			t.Fatalf("VM %s has no sealed config", inst.Name)
		}
		if strings.Contains(inst.Spec.GuestConfig.Sealed, "glrt-") {
			t.Fatal("the sealed config shows the token")
		}
		plain, err := f.key.Open(*inst.Spec.GuestConfig, sealing.Binding{Namespace: ns, Name: inst.Name, NodeName: node})
		if err != nil {
			t.Fatalf("the chassis cannot open VM %s's config: %v", inst.Name, err)
		}
		cfg, err := guest.ParseConfig(plain)
		if err != nil {
			t.Fatal(err)
		}
		if cfg.Runner.Token != token || cfg.Runner.SystemID != SystemID("runner-uid", slot) || time.Duration(cfg.Runner.MaxJobDuration) != time.Hour {
			t.Errorf("VM %s's config: %v (system id %s)", inst.Name, cfg, cfg.Runner.SystemID)
		}
		// Bound to the instance: another name does not open it.
		if _, err := f.key.Open(*inst.Spec.GuestConfig, sealing.Binding{Namespace: ns, Name: "other", NodeName: node}); !errors.Is(err, sealing.ErrUnreadable) {
			t.Errorf("another instance opened VM %s's config: %v", inst.Name, err)
		}
	}
	r := f.runner(t)
	if c := meta.FindStatusCondition(r.Status.Conditions, workloadsv1alpha1.ConditionRegistered); c == nil || c.Status != metav1.ConditionTrue {
		t.Errorf("Registered %+v", c)
	}
	if len(f.gl.verified) != 2 {
		t.Errorf("verified %v, want one per slot", f.gl.verified)
	}
	// A second pass on a steady pool creates nothing and asks GitLab nothing.
	f.reconcile(t)
	if n := len(f.instances(t)); n != 2 || len(f.gl.verified) != 2 {
		t.Errorf("after a steady pass: %d VMs, %d verifications", n, len(f.gl.verified))
	}
}

func TestARefusedTokenFillsNoSlot(t *testing.T) {
	f := newFixture(t, 2, runner(1))
	f.gl.verifyErr = fmt.Errorf("verify: %w", gitlab.ErrForbidden)
	f.reconcile(t)
	if n := len(f.instances(t)); n != 0 {
		t.Fatalf("%d VMs for a refused token", n)
	}
	c := meta.FindStatusCondition(f.runner(t).Status.Conditions, workloadsv1alpha1.ConditionRegistered)
	if c == nil || c.Status != metav1.ConditionFalse || c.Reason != workloadsv1alpha1.ReasonTokenRejected || strings.Contains(c.Message, token) {
		t.Fatalf("Registered %+v", c)
	}
	// The positive control: the token accepted, the slot fills.
	f.gl.verifyErr = nil
	f.reconcile(t)
	if n := len(f.instances(t)); n != 1 {
		t.Fatalf("%d VMs once the token is accepted", n)
	}
}

// The schema refuses any key but "token"; a runner stored before it did
// still never sends another of the Secret's values to GitLab.
func TestARunnerNamingAnotherKeyOfItsSecretSendsNothing(t *testing.T) {
	r := runner(1)
	r.Spec.GitLab.TokenSecretRef.Key = "password"
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: ns}, Data: map[string][]byte{"password": []byte(token)}}
	r.Spec.GitLab.TokenSecretRef.Name = secret.Name
	f := newFixture(t, 2, r, secret)
	f.reconcile(t)
	if len(f.gl.verified) != 0 || len(f.instances(t)) != 0 {
		t.Fatalf("verified %v with %d VMs for key password", f.gl.verified, len(f.instances(t)))
	}
	c := meta.FindStatusCondition(f.runner(t).Status.Conditions, workloadsv1alpha1.ConditionRegistered)
	if c == nil || c.Status != metav1.ConditionFalse || !strings.Contains(c.Message, `only "token" is read`) {
		t.Fatalf("Registered %+v", c)
	}
	// The positive control: the documented key, the slot fills.
	live := f.runner(t)
	live.Spec.GitLab.TokenSecretRef = workloadsv1alpha1.SecretKeyRef{Name: "runner-token", Key: workloadsv1alpha1.RunnerTokenKey}
	if err := f.c.Update(context.Background(), live); err != nil {
		t.Fatal(err)
	}
	f.reconcile(t)
	if n := len(f.instances(t)); n != 1 {
		t.Fatalf("%d VMs with the documented key", n)
	}
}

func TestThePoolKeepsWithinTheClassAndTheLeasesOtherVMs(t *testing.T) {
	other := &computev1alpha1.MacOSInstance{ObjectMeta: metav1.ObjectMeta{Name: "by-hand", Namespace: ns},
		Spec: computev1alpha1.MacOSInstanceSpec{LeaseName: "build"}}
	f := newFixture(t, 2, runner(2), other)
	f.reconcile(t)
	if n := len(f.instances(t)); n != 2 {
		t.Fatalf("want the tenant's VM and one of the runner's, got %d VMs", n)
	}
	r := f.runner(t)
	if c := meta.FindStatusCondition(r.Status.Conditions, workloadsv1alpha1.ConditionReady); c == nil || !strings.Contains(c.Message, "of 1 VMs") {
		t.Errorf("Ready %+v, want a pool of 1", c)
	}
}

func TestAFinishedJobIsRecordedBeforeItsVMGoes(t *testing.T) {
	f := newFixture(t, 2, runner(1))
	f.reconcile(t)
	insts := f.instances(t)
	if len(insts) != 1 {
		t.Fatalf("want 1 VM, got %d", len(insts))
	}
	inst := insts[0]
	started, finished := metav1.NewTime(t0), metav1.NewTime(t0.Add(90*time.Second))
	queued := int64(7)
	inst.Status.Runtime = &computev1alpha1.RuntimeStatus{Phase: computev1alpha1.VMRunning, ReadyForWork: true,
		GuestConfig: &computev1alpha1.GuestConfigStatus{Phase: computev1alpha1.GuestConfigDelivered},
		Job:         &computev1alpha1.GuestJob{Phase: computev1alpha1.JobSucceeded, ID: 42, StartedAt: &started, FinishedAt: &finished, QueuedSeconds: &queued}}
	if err := f.c.Status().Update(context.Background(), &inst); err != nil {
		t.Fatal(err)
	}
	f.reconcile(t)
	r := f.runner(t)
	if len(r.Status.Jobs) != 1 || r.Status.JobsTotal != 1 {
		t.Fatalf("history %+v total %d", r.Status.Jobs, r.Status.JobsTotal)
	}
	j := r.Status.Jobs[0]
	if j.ID != 42 || j.Result != workloadsv1alpha1.JobSucceeded || j.Duration.Duration != 90*time.Second || j.QueueToStart.Duration != 7*time.Second || j.Instance != inst.Name {
		t.Errorf("record %+v", j)
	}
	if n := len(f.instances(t)); n != 1 {
		t.Fatalf("the VM went in the pass that recorded its job: %d VMs", n)
	}
	// The next pass, on the recorded status, ends the VM, and records
	// nothing twice.
	f.reconcile(t)
	if n := len(f.instances(t)); n != 0 {
		t.Fatalf("the finished VM is still there: %d VMs", n)
	}
	if r := f.runner(t); len(r.Status.Jobs) != 1 || r.Status.JobsTotal != 1 {
		t.Fatalf("recorded twice: %+v", r.Status.Jobs)
	}
}

func TestJudge(t *testing.T) {
	started := metav1.NewTime(t0.Add(-2 * time.Hour))
	running := func(j *computev1alpha1.GuestJob, phase computev1alpha1.VMPhase) *computev1alpha1.RuntimeStatus {
		return &computev1alpha1.RuntimeStatus{Phase: phase, ReadyForWork: true, Job: j,
			GuestConfig: &computev1alpha1.GuestConfigStatus{Phase: computev1alpha1.GuestConfigDelivered}}
	}
	for _, tc := range []struct {
		name    string
		rt      *computev1alpha1.RuntimeStatus
		fenced  bool
		deleted bool
		state   workloadsv1alpha1.SlotState
		result  workloadsv1alpha1.JobResult
		ends    bool
	}{
		{name: "a VM the agent has not reported is being created", state: workloadsv1alpha1.SlotCreating},
		{name: "a deleted VM is draining", deleted: true, rt: running(nil, computev1alpha1.VMRunning), state: workloadsv1alpha1.SlotDraining},
		{name: "a running VM with its config and no job is idle", rt: running(nil, computev1alpha1.VMRunning), state: workloadsv1alpha1.SlotIdle},
		{name: "a running VM waiting for a job is idle", rt: running(&computev1alpha1.GuestJob{Phase: computev1alpha1.JobWaiting}, computev1alpha1.VMRunning), state: workloadsv1alpha1.SlotIdle},
		{name: "a VM without its config delivered is still booting",
			rt: &computev1alpha1.RuntimeStatus{Phase: computev1alpha1.VMRunning, ReadyForWork: true}, state: workloadsv1alpha1.SlotBooting},
		{name: "a VM running a job within maxJobDuration is busy",
			rt: running(&computev1alpha1.GuestJob{Phase: computev1alpha1.JobRunning, ID: 1, StartedAt: ptrTime(t0.Add(-time.Minute))}, computev1alpha1.VMRunning), state: workloadsv1alpha1.SlotBusy},
		{name: "a job past maxJobDuration and its grace times out and its VM ends",
			rt: running(&computev1alpha1.GuestJob{Phase: computev1alpha1.JobRunning, ID: 1, StartedAt: &started}, computev1alpha1.VMRunning), result: workloadsv1alpha1.JobTimedOut, ends: true},
		{name: "a job whose VM stopped under it is a system failure",
			rt: running(&computev1alpha1.GuestJob{Phase: computev1alpha1.JobRunning, ID: 1, StartedAt: ptrTime(t0)}, computev1alpha1.VMStopped), fenced: true, result: workloadsv1alpha1.JobSystemFailure, ends: true},
		{name: "a script failure is the tenant's result",
			rt: running(&computev1alpha1.GuestJob{Phase: computev1alpha1.JobFailed, ID: 1, FailureReason: "script_failure"}, computev1alpha1.VMRunning), result: workloadsv1alpha1.JobFailed, ends: true},
		{name: "a guest's runner_system_failure is a system failure",
			rt: running(&computev1alpha1.GuestJob{Phase: computev1alpha1.JobFailed, ID: 1, FailureReason: "runner_system_failure"}, computev1alpha1.VMRunning), result: workloadsv1alpha1.JobSystemFailure, ends: true},
		{name: "a guest's runner_interrupted is a system failure, not the tenant's",
			rt: running(&computev1alpha1.GuestJob{Phase: computev1alpha1.JobFailed, ID: 1, FailureReason: "runner_interrupted"}, computev1alpha1.VMRunning), result: workloadsv1alpha1.JobSystemFailure, ends: true},
		{name: "a guest that ended without a job is replaced, with no record",
			rt: running(&computev1alpha1.GuestJob{Phase: computev1alpha1.JobFailed, FailureReason: "runner_token_rejected"}, computev1alpha1.VMRunning), ends: true},
		{name: "a VM that failed to start on a healthy chassis is replaced",
			rt: &computev1alpha1.RuntimeStatus{Phase: computev1alpha1.VMFailed, Message: "boom"}, ends: true},
		{name: "a VM that failed on a quarantined chassis waits for it", fenced: true,
			rt: &computev1alpha1.RuntimeStatus{Phase: computev1alpha1.VMFailed, Message: "code 6"}, state: workloadsv1alpha1.SlotWaiting},
		{name: "a config the chassis could not open is replaced",
			rt: &computev1alpha1.RuntimeStatus{Phase: computev1alpha1.VMRunning, GuestConfig: &computev1alpha1.GuestConfigStatus{Phase: computev1alpha1.GuestConfigUnreadable}}, ends: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &Reconciler{}
			s := &scope{runner: runner(1), now: t0, node: &fleetv1alpha1.MacNode{}}
			if tc.fenced {
				s.node.Status.Phase = fleetv1alpha1.MacNodeQuarantined
			}
			inst := &computev1alpha1.MacOSInstance{ObjectMeta: metav1.ObjectMeta{Name: "ios-0-1", Labels: map[string]string{workloadsv1alpha1.SlotLabel: "0"}},
				Status: computev1alpha1.MacOSInstanceStatus{Runtime: tc.rt}}
			if tc.deleted {
				inst.DeletionTimestamp = ptrTime(t0)
			}
			v := r.judge(s, inst, time.Hour)
			if (v.end != "") != tc.ends {
				t.Errorf("ends %q, want ends=%v", v.end, tc.ends)
			}
			if !tc.ends && v.state != tc.state {
				t.Errorf("state %s, want %s", v.state, tc.state)
			}
			switch {
			case tc.result == "" && v.record != nil:
				t.Errorf("recorded %+v", v.record)
			case tc.result != "" && (v.record == nil || v.record.Result != tc.result):
				t.Errorf("record %+v, want %s", v.record, tc.result)
			}
		})
	}
}

func ptrTime(t time.Time) *metav1.Time { m := metav1.NewTime(t); return &m }

func TestHostAllowed(t *testing.T) {
	for _, tc := range []struct {
		url     string
		allowed []string
		want    bool
	}{
		{"https://gitlab.com", nil, true},
		{"https://gitlab.com", []string{"gitlab.com"}, true},
		{"https://GitLab.com/x", []string{"gitlab.com"}, true},
		{"https://ci.corp.example", []string{"*.corp.example"}, true},
		{"https://corp.example", []string{"*.corp.example"}, false},
		{"https://evilcorp.example", []string{"*.corp.example"}, false},
		{"https://metadata.internal", []string{"gitlab.com"}, false},
		{"https://gitlab.com.evil.example", []string{"gitlab.com"}, false},
	} {
		if got := hostAllowed(tc.url, tc.allowed); got != tc.want {
			t.Errorf("hostAllowed(%q, %v) = %v, want %v", tc.url, tc.allowed, got, tc.want)
		}
	}
}

func TestSystemIDsAreStablePerSlotAndDistinctAcrossRunners(t *testing.T) {
	a0, a1, b0 := SystemID("uid-a", 0), SystemID("uid-a", 1), SystemID("uid-b", 0)
	if a0 != SystemID("uid-a", 0) {
		t.Error("a slot's system_id changed")
	}
	if a0 == a1 || a0 == b0 {
		t.Errorf("system_ids collide: %s %s %s", a0, a1, b0)
	}
	if !strings.HasPrefix(a0, "s_") || len(a0) != 14 {
		t.Errorf("system_id %q is not gitlab-runner's s_ and twelve hex digits", a0)
	}
}

// The sealed config's plaintext is the guest's Config: what the guest
// parses is what was sealed, token and all.
func TestTheSealedPlaintextIsTheGuestsConfig(t *testing.T) {
	b, err := json.Marshal(guest.Config{Version: guest.ConfigVersion, Runner: &guest.RunnerConfig{URL: "https://g", Token: token}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := guest.ParseConfig(b); err != nil {
		t.Fatal(err)
	}
}

// A create whose answer was lost left the slot's next VM in place: the
// retry finds it under the same name and makes no second one.
func TestPreparingAVMIsIdempotentAcrossRetries(t *testing.T) {
	r := runner(1)
	lost := &computev1alpha1.MacOSInstance{ObjectMeta: metav1.ObjectMeta{Name: InstanceName("ios", 0, 1), Namespace: ns},
		Spec: computev1alpha1.MacOSInstanceSpec{LeaseName: "build"}}
	f := newFixture(t, 2, r, lost)
	f.reconcile(t)
	insts := f.instances(t)
	if len(insts) != 1 || insts[0].Name != lost.Name {
		t.Fatalf("VMs %v, want only %s", names(insts), lost.Name)
	}
	if got := f.runner(t).Status.Slots; len(got) != 1 || got[0].Instance != lost.Name || got[0].Generation != 1 {
		t.Errorf("slots %+v", got)
	}
}

// The VMs of an earlier runner of the same name go; a tenant's VM that
// only wears the label, or that another kind owns, stays.
func TestOrphansOfAnEarlierRunnerAreCollected(t *testing.T) {
	labels := map[string]string{workloadsv1alpha1.RunnerLabel: "ios", workloadsv1alpha1.SlotLabel: "0"}
	orphan := &computev1alpha1.MacOSInstance{ObjectMeta: metav1.ObjectMeta{Name: "ios-0-7", Namespace: ns, Labels: labels,
		OwnerReferences: []metav1.OwnerReference{{APIVersion: workloadsv1alpha1.GroupVersion.String(), Kind: "GitLabRunner", Name: "ios", UID: "old-uid", Controller: ptrBool(true)}}},
		Spec: computev1alpha1.MacOSInstanceSpec{LeaseName: "build"}}
	wearer := &computev1alpha1.MacOSInstance{ObjectMeta: metav1.ObjectMeta{Name: "mine", Namespace: ns, Labels: labels},
		Spec: computev1alpha1.MacOSInstanceSpec{LeaseName: "build"}}
	f := newFixture(t, 2, runner(1), orphan, wearer)
	f.reconcile(t)
	got := names(f.instances(t))
	if slices.Contains(got, "ios-0-7") || !slices.Contains(got, "mine") {
		t.Fatalf("VMs %v: want the orphan gone and the tenant's own VM kept", got)
	}
}

func names(insts []computev1alpha1.MacOSInstance) []string {
	var out []string
	for _, i := range insts {
		out = append(out, i.Name)
	}
	return out
}

func ptrBool(b bool) *bool { return &b }

// A config the guest would refuse is refused before it is sealed: the
// runner says why, and makes no VM that would wait for ever.
func TestAGuestConfigTheGuestWouldRefuseIsNeverSealed(t *testing.T) {
	r := runner(1)
	r.Spec.GitLab.CABundle = "not a certificate"
	f := newFixture(t, 2, r)
	f.reconcile(t)
	if n := len(f.instances(t)); n != 0 {
		t.Fatalf("%d VMs with a config the guest refuses", n)
	}
	c := meta.FindStatusCondition(f.runner(t).Status.Conditions, workloadsv1alpha1.ConditionDegraded)
	if c == nil || c.Reason != workloadsv1alpha1.ReasonGuestConfigInvalid || !strings.Contains(c.Message, "caBundle") || strings.Contains(c.Message, token) {
		t.Fatalf("Degraded %+v", c)
	}
}
