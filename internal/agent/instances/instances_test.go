package instances

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2"
	"oras.land/oras-go/v2/content/memory"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	computev1alpha1 "github.com/boualleiguie/macrack-operator/api/compute/v1alpha1"
	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
	"github.com/boualleiguie/macrack-operator/internal/agent/driver"
	"github.com/boualleiguie/macrack-operator/internal/agent/driver/sim"
	"github.com/boualleiguie/macrack-operator/internal/agent/helper"
	"github.com/boualleiguie/macrack-operator/internal/agent/images"
	"github.com/boualleiguie/macrack-operator/internal/agent/report"
	"github.com/boualleiguie/macrack-operator/internal/golden"
	"github.com/boualleiguie/macrack-operator/internal/golden/simgolden"
	macrackscheme "github.com/boualleiguie/macrack-operator/internal/scheme"
)

const (
	testNode  = "c02test00001"
	testClass = "m4-test"
	testImage = "sequoia"
	testNS    = "tenant-a"
)

// write is one write the agent sent to the API server.
type write struct {
	verb, subresource, kind, name string
	patchType                     types.PatchType
	body                          []byte
}

// rig is one simulated host: an agent's instance loop on a fake API server,
// with in-process helpers whose sim VMs count against one kernel.
type rig struct {
	t        *testing.T
	c        client.Client
	r        *Instances
	kernel   *sim.MemKernel
	launcher *helper.InProcessLauncher
	events   *events.FakeRecorder

	mu     sync.Mutex
	writes []write
	// refuse, if set, answers a write before the fake API server does: a
	// non-nil error refuses it, as admission would.
	refuse func(write) error
}

// newRig places the named instances on the host, each with a slot.
func newRig(t *testing.T, names ...string) *rig {
	t.Helper()
	scheme, err := macrackscheme.New()
	if err != nil {
		t.Fatal(err)
	}
	class := &fleetv1alpha1.MacNodeClass{ObjectMeta: metav1.ObjectMeta{Name: testClass},
		Spec: fleetv1alpha1.MacNodeClassSpec{Chip: "M4", Memory: resource.MustParse("16Gi"), Disk: resource.MustParse("1T"),
			NetworkGbps: 10, VMCapacity: 2}}
	store, ref := goldenStore(t)
	img := &fleetv1alpha1.MacOSImage{ObjectMeta: metav1.ObjectMeta{Name: testImage},
		Spec: fleetv1alpha1.MacOSImageSpec{Source: ref},
		Status: fleetv1alpha1.MacOSImageStatus{Resolved: &fleetv1alpha1.ResolvedImage{Digest: ref[strings.Index(ref, "@")+1:],
			MacOSVersion: "15.5", XcodeVersions: []string{"16.4"}, MinimumDisk: resource.MustParse("60Gi"),
			DiskSize: resource.MustParse("2Mi"), HardwareModel: "YnBsaXN0MDA="}}}
	mn := &fleetv1alpha1.MacNode{ObjectMeta: metav1.ObjectMeta{Name: testNode},
		Spec: fleetv1alpha1.MacNodeSpec{Serial: "C02TEST00001", NodeClassName: testClass}}
	objs := []client.Object{class, img, mn}
	for _, n := range names {
		inst := &computev1alpha1.MacOSInstance{
			ObjectMeta: metav1.ObjectMeta{Name: n, Namespace: testNS, UID: types.UID("uid-" + n)},
			Spec: computev1alpha1.MacOSInstanceSpec{LeaseName: "build", ImageName: testImage, CPU: 4,
				Memory: resource.MustParse("8Gi"), Disk: resource.MustParse("200Gi")},
			Status: computev1alpha1.MacOSInstanceStatus{NodeName: testNode},
		}
		mn.Status.Slots = append(mn.Status.Slots, fleetv1alpha1.Slot{Namespace: testNS, Name: n, UID: inst.UID})
		objs = append(objs, inst)
	}
	rg := &rig{t: t, kernel: sim.NewMemKernel()}
	record := func(w write) error {
		rg.mu.Lock()
		defer rg.mu.Unlock()
		rg.writes = append(rg.writes, w)
		if rg.refuse != nil {
			return rg.refuse(w)
		}
		return nil
	}
	rg.c = fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).
		WithStatusSubresource(&fleetv1alpha1.MacNode{}, &computev1alpha1.MacOSInstance{}).
		WithIndex(&computev1alpha1.MacOSInstance{}, "status.nodeName", func(o client.Object) []string {
			return []string{o.(*computev1alpha1.MacOSInstance).Status.NodeName}
		}).
		WithInterceptorFuncs(interceptor.Funcs{
			Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
				if err := record(write{verb: "update", kind: kindOf(obj), name: obj.GetName()}); err != nil {
					return err
				}
				return c.Update(ctx, obj, opts...)
			},
			Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, p client.Patch, opts ...client.PatchOption) error {
				body, err := p.Data(obj)
				if err != nil {
					return err
				}
				if err := record(write{verb: "patch", kind: kindOf(obj), name: obj.GetName(), patchType: p.Type(), body: body}); err != nil {
					return err
				}
				return c.Patch(ctx, obj, p, opts...)
			},
			SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, p client.Patch, opts ...client.SubResourcePatchOption) error {
				body, err := p.Data(obj)
				if err != nil {
					return err
				}
				if err := record(write{verb: "patch", subresource: sub, kind: kindOf(obj), name: obj.GetName(), patchType: p.Type(), body: body}); err != nil {
					return err
				}
				return c.SubResource(sub).Patch(ctx, obj, p, opts...)
			},
		}).Build()

	// Short: the helpers' sockets live here, and sockaddr_un holds 103 bytes.
	dir, err := os.MkdirTemp("", "mrt")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	drv := sim.New(rg.kernel, sim.WithBootTime(0), sim.WithShutdownTime(0))
	rg.launcher, err = helper.NewInProcessLauncher(dir+"/run", drv, helper.WithStopGrace(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rg.launcher.Close(context.Background()) })
	disks := Disks{Root: dir}
	rg.events = events.NewFakeRecorder(100)
	rg.r = &Instances{Client: rg.c, NodeName: testNode, Launcher: rg.launcher, Disks: disks, Clock: clock.RealClock{},
		StopGrace: time.Second, GuestPort: 1024, Poll: time.Second, NewMachineID: RandomMachineID,
		APIReader: rg.c, Recorder: rg.events, Images: cachedGolden(t, filepath.Join(dir, "images"), store, img), Log: logr.Discard(),
		Report: &report.Reporter{Client: rg.c, NodeName: testNode, Log: logr.Discard()}}
	return rg
}

// goldenStore pushes a small sim golden into an in-memory OCI store and
// returns it with the golden's pinned reference.
func goldenStore(t *testing.T) (*memory.Store, string) {
	t.Helper()
	src, err := simgolden.Write(t.TempDir(), testImage, 2<<20, 1<<20, 60<<30)
	if err != nil {
		t.Fatal(err)
	}
	store := memory.New()
	desc, err := golden.Push(context.Background(), store, goldenTag, src, golden.PushOptions{ChunkSize: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	return store, "sim.invalid/macrack/" + testImage + "@" + desc.Digest.String()
}

// goldenTag tags the rig's golden in its in-memory store.
const goldenTag = "15.5"

// byDigest resolves the full reference of the rig's golden in its
// in-memory store, which knows it by tag (golden.Resolve checks that the
// answer is the pinned digest).
type byDigest struct{ *memory.Store }

func (b byDigest) Resolve(ctx context.Context, _ string) (ocispec.Descriptor, error) {
	return b.Store.Resolve(ctx, goldenTag)
}

// cachedGolden is an image store whose cache already holds img's verified
// golden: the rig's instances clone from it at once.
func cachedGolden(t *testing.T, root string, src *memory.Store, img *fleetv1alpha1.MacOSImage) *images.Store {
	t.Helper()
	cache := &images.Cache{Root: root}
	s := &images.Store{Puller: &images.Puller{Root: root, Cache: cache}, Cache: cache, Cloner: images.SparseCopier{},
		Source: func(*fleetv1alpha1.MacOSImage) (oras.ReadOnlyTarget, error) { return byDigest{src}, nil }, Log: logr.Discard()}
	g, err := golden.Resolve(context.Background(), byDigest{src}, img.Spec.Source)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Puller.Pull(context.Background(), img.Name, g, src); err != nil {
		t.Fatal(err)
	}
	return s
}

func kindOf(obj client.Object) string {
	switch obj.(type) {
	case *computev1alpha1.MacOSInstance:
		return "MacOSInstance"
	case *fleetv1alpha1.MacNode:
		return "MacNode"
	}
	return "other"
}

// reconcile runs the instance loop once for the instance name.
func (rg *rig) reconcile(name string) error {
	rg.t.Helper()
	_, err := rg.r.Reconcile(context.Background(), ctrl.Request{NamespacedName: types.NamespacedName{Namespace: testNS, Name: name}})
	return err
}

func (rg *rig) instance(name string) *computev1alpha1.MacOSInstance {
	rg.t.Helper()
	i := &computev1alpha1.MacOSInstance{}
	if err := rg.c.Get(context.Background(), types.NamespacedName{Namespace: testNS, Name: name}, i); err != nil {
		rg.t.Fatal(err)
	}
	return i
}

// run reconciles the instance until its VM runs.
func (rg *rig) run(name string) {
	rg.t.Helper()
	for range 5 {
		if err := rg.reconcile(name); err != nil {
			rg.t.Fatalf("reconciling %s: %v", name, err)
		}
		if rt := rg.instance(name).Status.Runtime; rt != nil && rt.Phase == computev1alpha1.VMRunning {
			return
		}
	}
	rg.t.Fatalf("%s does not run: %+v", name, rg.instance(name).Status.Runtime)
}

// helperOf dials the helper of the instance name.
func (rg *rig) helperOf(name string) *helper.Client {
	rg.t.Helper()
	running, err := rg.launcher.Running()
	if err != nil {
		rg.t.Fatal(err)
	}
	sock, ok := running["uid-"+name]
	if !ok {
		rg.t.Fatalf("%s has no helper", name)
	}
	c, err := helper.Dial(context.Background(), sock)
	if err != nil {
		rg.t.Fatal(err)
	}
	rg.t.Cleanup(func() { c.Close() })
	return c
}

// macNode reads the host's MacNode.
func (rg *rig) macNode() *fleetv1alpha1.MacNode {
	rg.t.Helper()
	mn := &fleetv1alpha1.MacNode{}
	if err := rg.c.Get(context.Background(), client.ObjectKey{Name: testNode}, mn); err != nil {
		rg.t.Fatal(err)
	}
	return mn
}

func (rg *rig) quota() *fleetv1alpha1.QuotaReport {
	rg.t.Helper()
	mn := rg.macNode()
	if mn.Status.Reported == nil {
		return nil
	}
	return mn.Status.Reported.Quota
}

func (rg *rig) recorded() []write {
	rg.mu.Lock()
	defer rg.mu.Unlock()
	return append([]write(nil), rg.writes...)
}

// The agent never writes what the tenant wrote: a typed Update sends the
// whole object back, spec re-encoded (8192Mi as 8Gi), and agent.scope
// refuses it as a spec change. Its only writes of an instance itself are
// patches of metadata.finalizers, with the resourceVersion as lock.
func TestTheAgentWritesAnInstanceOnlyWithFinalizerPatches(t *testing.T) {
	rg := newRig(t, "ci-1")
	rg.run("ci-1")
	if got := rg.instance("ci-1").Finalizers; len(got) != 1 || got[0] != fleetv1alpha1.DiskWipeFinalizer {
		t.Fatalf("finalizers %v, want [%s]", got, fleetv1alpha1.DiskWipeFinalizer)
	}
	// And through its deletion, which the agent lets go after the wipe.
	if err := rg.c.Delete(context.Background(), rg.instance("ci-1")); err != nil {
		t.Fatal(err)
	}
	if err := rg.reconcile("ci-1"); err != nil {
		t.Fatal(err)
	}
	if err := rg.c.Get(context.Background(), types.NamespacedName{Namespace: testNS, Name: "ci-1"}, &computev1alpha1.MacOSInstance{}); err == nil {
		t.Fatal("the instance is still there after its teardown")
	}

	var finalizerPatches int
	for _, w := range rg.recorded() {
		if w.kind != "MacOSInstance" || w.subresource != "" {
			continue
		}
		if w.verb != "patch" {
			t.Errorf("the agent sent an instance %s, not a patch", w.verb)
			continue
		}
		// A JSON patch that tests and changes the finalizers alone (and,
		// adding one, tests that no deletion began): no resourceVersion
		// lock for the instance's status writes to break.
		if w.patchType != types.JSONPatchType {
			t.Errorf("patch of type %s, want a JSON patch", w.patchType)
		}
		var ops []struct{ Op, Path string }
		if err := json.Unmarshal(w.body, &ops); err != nil {
			t.Errorf("patch %s: %v", w.body, err)
			continue
		}
		if len(ops) > 0 && ops[0] == (struct{ Op, Path string }{"test", "/metadata/deletionTimestamp"}) {
			ops = ops[1:]
		}
		for _, o := range ops {
			if !strings.HasPrefix(o.Path, "/metadata/finalizers") {
				t.Errorf("patch %s %s %s, want the finalizers alone", w.body, o.Op, o.Path)
			}
		}
		if len(ops) != 2 || ops[0].Op != "test" {
			t.Errorf("patch %s, want a test then a change", w.body)
		}
		finalizerPatches++
	}
	if finalizerPatches != 2 {
		t.Errorf("%d finalizer patches, want 2: one adds %s, one removes it", finalizerPatches, fleetv1alpha1.DiskWipeFinalizer)
	}
}

// The field bug: one VM runs; the other's VM stopped, but its kernel slot
// stayed counted (the stuck-quota fault) while its helper lives on. A start
// of that VM is refused with code 6 although one VM runs: the quota is
// Stuck, and the report counts the VM that runs, not the two helpers.
func TestACode6RefusalBelowCapacityIsReportedStuckCountingVMsNotHelpers(t *testing.T) {
	rg := newRig(t, "ci-1", "ci-2")
	rg.run("ci-1")
	rg.run("ci-2")
	if err := rg.kernel.SetStuckQuota(true); err != nil {
		t.Fatal(err)
	}
	// ci-2's guest shut down: its helper serves on, its VM is Stopped, and
	// its slot stays counted.
	c2 := rg.helperOf("ci-2")
	if err := c2.Stop(context.Background(), 0); err != nil {
		t.Fatal(err)
	}
	if st, err := c2.State(context.Background()); err != nil || st != driver.StateStopped {
		t.Fatalf("ci-2's VM is %s (%v), want Stopped", st, err)
	}
	if n, _ := rg.kernel.Active(); n != 2 {
		t.Fatalf("the kernel counts %d VMs, want 2 (one running, one stuck)", n)
	}
	if running, _ := rg.launcher.Running(); len(running) != 2 {
		t.Fatalf("%d helpers, want 2: ci-2's lives on", len(running))
	}

	before := time.Now().Add(-time.Second)
	// The agent starts ci-2's VM again; the kernel refuses it.
	if err := rg.reconcile("ci-2"); err != nil {
		t.Fatal(err)
	}
	rt := rg.instance("ci-2").Status.Runtime
	if rt == nil || rt.Phase != computev1alpha1.VMFailed || !strings.Contains(rt.Message, "code 6") {
		t.Fatalf("ci-2's runtime is %+v, want Failed with the kernel's code 6", rt)
	}
	q := rg.quota()
	if q == nil {
		t.Fatal("no quota report after a code-6 refusal")
	}
	if q.State != fleetv1alpha1.QuotaStuck || q.RunningVMs != 1 {
		t.Errorf("quota %s with runningVMs %d, want Stuck with 1: one VM runs, the kernel refused the second", q.State, q.RunningVMs)
	}
	if q.LastErrorCode != driver.CodeVirtualMachineLimitExceeded {
		t.Errorf("lastErrorCode %d, want %d", q.LastErrorCode, driver.CodeVirtualMachineLimitExceeded)
	}
	if q.LastErrorAt == nil || q.LastErrorAt.Time.Before(before) {
		t.Errorf("lastErrorAt %v, want the refusal's time", q.LastErrorAt)
	}
}

// The positive control: two VMs run, and the kernel refuses a third, as it
// must. The quota is OK, with two running.
func TestACode6RefusalAtCapacityIsReportedOK(t *testing.T) {
	// Three slots, which the operator never hands out on a class of two:
	// the test's way of making the agent ask the kernel for a third VM.
	rg := newRig(t, "ci-1", "ci-2", "ci-3")
	rg.run("ci-1")
	rg.run("ci-2")
	if err := rg.reconcile("ci-3"); err != nil {
		t.Fatal(err)
	}
	if rt := rg.instance("ci-3").Status.Runtime; rt == nil || rt.Phase != computev1alpha1.VMFailed {
		t.Fatalf("ci-3's runtime is %+v, want Failed: the kernel refuses a third VM", rt)
	}
	q := rg.quota()
	if q == nil {
		t.Fatal("no quota report after a code-6 refusal")
	}
	if q.State != fleetv1alpha1.QuotaOK || q.RunningVMs != 2 {
		t.Errorf("quota %s with runningVMs %d, want OK with 2", q.State, q.RunningVMs)
	}
}

// failingRunning is a launcher that cannot list its helpers.
type failingRunning struct{ helper.Launcher }

func (failingRunning) Running() (map[string]string, error) { return nil, os.ErrPermission }

// A quota state the agent could not establish is not reported.
func TestNoQuotaStateIsReportedWhenTheHelpersCannotBeListed(t *testing.T) {
	rg := newRig(t, "ci-1", "ci-2", "ci-3")
	rg.run("ci-1")
	rg.run("ci-2")
	rg.r.Launcher = failingRunning{rg.launcher}
	if err := rg.reconcile("ci-3"); err != nil {
		t.Fatal(err)
	}
	if q := rg.quota(); q != nil {
		t.Errorf("quota %+v reported, though the agent could not count its VMs", q)
	}
}

// The refusals the API server answers an agent with, as it words them.
var (
	vapRefusal = apierrors.NewForbidden(computev1alpha1.GroupVersion.WithResource("macosinstances").GroupResource(), "ci-1",
		errors.New("ValidatingAdmissionPolicy 'macrack-agent-scope' with binding 'macrack-agent-scope' denied request: "+
			"agent.scope: agent c02test00001 may change only status.runtime and the macrack.io/disk-wipe finalizer of an instance, not spec"))
	webhookRefusal = &apierrors.StatusError{ErrStatus: metav1.Status{Status: metav1.StatusFailure, Code: 403, Reason: metav1.StatusReasonForbidden,
		Message: `admission webhook "vmacosinstance.macrack.io" denied the request: instance.wipe: agent c02test00001 may remove macrack.io/disk-wipe only after recording the wipe in status.runtime.wipedAt`}}
)

func TestARefusalNamesItsRule(t *testing.T) {
	for _, tc := range []struct {
		err     error
		rule    string
		refused bool
	}{
		{vapRefusal, "agent.scope", true},
		{webhookRefusal, "instance.wipe", true},
		{apierrors.NewInvalid(computev1alpha1.GroupVersion.WithKind("MacOSInstance").GroupKind(), "ci-1", nil), "unknown", true},
		{apierrors.NewConflict(computev1alpha1.GroupVersion.WithResource("macosinstances").GroupResource(), "ci-1", errors.New("changed")), "", false},
		{errors.New("connection refused"), "", false},
	} {
		rule, refused := refusal(fmt.Errorf("wrapped: %w", tc.err))
		if rule != tc.rule || refused != tc.refused {
			t.Errorf("%v: rule %q refused %v, want %q %v", tc.err, rule, refused, tc.rule, tc.refused)
		}
	}
}

// A refused finalizer write is not silent: the instance says so in
// status.runtime, with the rule, and the VM is not started.
func TestARefusedFinalizerWriteIsToldInStatusRuntime(t *testing.T) {
	rg := newRig(t, "ci-1")
	rg.refuse = func(w write) error {
		if w.kind == "MacOSInstance" && w.subresource == "" {
			return vapRefusal
		}
		return nil
	}
	if err := rg.reconcile("ci-1"); !apierrors.IsForbidden(err) {
		t.Fatalf("reconcile: %v, want the refusal back for a retry", err)
	}
	rt := rg.instance("ci-1").Status.Runtime
	if rt == nil || rt.Phase != computev1alpha1.VMFailed ||
		!strings.Contains(rt.Message, "(agent.scope)") || !strings.Contains(rt.Message, "not spec") {
		t.Fatalf("runtime %+v, want Failed and the refusal with its rule", rt)
	}
	if running, _ := rg.launcher.Running(); len(running) != 0 {
		t.Errorf("a helper runs for an instance the agent could not hold: %v", running)
	}
}

// So is a refused finalizer removal after the wipe.
func TestARefusedFinalizerRemovalIsToldInStatusRuntime(t *testing.T) {
	rg := newRig(t, "ci-1")
	rg.run("ci-1")
	if err := rg.c.Delete(context.Background(), rg.instance("ci-1")); err != nil {
		t.Fatal(err)
	}
	rg.refuse = func(w write) error {
		if w.kind == "MacOSInstance" && w.subresource == "" {
			return webhookRefusal
		}
		return nil
	}
	if err := rg.reconcile("ci-1"); !apierrors.IsForbidden(err) {
		t.Fatalf("reconcile: %v, want the refusal back for a retry", err)
	}
	i := rg.instance("ci-1")
	if rt := i.Status.Runtime; rt == nil || rt.Phase != computev1alpha1.VMStopped || !strings.Contains(rt.Message, "(instance.wipe)") {
		t.Fatalf("runtime %+v, want Stopped and the refusal with its rule", rt)
	}
	if rt := i.Status.Runtime; rt.WipedAt == nil {
		t.Error("the wipe is not on record")
	}
	if !rg.r.Disks.Wiped("uid-ci-1") {
		t.Error("the disk was not wiped")
	}
}

// The quota state the instance loop reported is what LastQuota hands the
// facts reporter (internal/agent's TestTheFactsReporterDoesNotUndoAStuckQuota):
// nothing before any refusal, then the Stuck it reported.
func TestLastQuotaIsTheQuotaTheLoopReported(t *testing.T) {
	rg := newRig(t, "ci-1", "ci-2")
	if q := rg.r.LastQuota(); q != nil {
		t.Fatalf("positive control: last quota %+v before any refusal, want none", q)
	}
	rg.run("ci-1")
	rg.run("ci-2")
	if err := rg.kernel.SetStuckQuota(true); err != nil {
		t.Fatal(err)
	}
	if err := rg.helperOf("ci-2").Stop(context.Background(), 0); err != nil {
		t.Fatal(err)
	}
	if err := rg.reconcile("ci-2"); err != nil {
		t.Fatal(err)
	}
	if q := rg.quota(); q == nil || q.State != fleetv1alpha1.QuotaStuck {
		t.Fatalf("quota %+v, want Stuck", q)
	}
	if q := rg.r.LastQuota(); q == nil || q.State != fleetv1alpha1.QuotaStuck || q.RunningVMs != 1 || q.LastErrorCode != 6 {
		t.Errorf("last quota %+v, want Stuck with 1 running and code 6, as the loop reported it", q)
	}
}

// An instance placed on this chassis that no slot names (an administrator
// wrote its nodeName, and admission let it through) gets no VM; ci-1,
// which holds a slot, runs beside it.
// Proves: instance.cap
func TestAnInstancePlacedWithoutASlotIsNeverStarted(t *testing.T) {
	rg := newRig(t, "ci-1")
	rg.run("ci-1") // positive control
	ctx := context.Background()
	stray := &computev1alpha1.MacOSInstance{
		ObjectMeta: metav1.ObjectMeta{Name: "ci-2", Namespace: testNS, UID: "uid-ci-2"},
		Spec: computev1alpha1.MacOSInstanceSpec{LeaseName: "build", ImageName: testImage, CPU: 4,
			Memory: resource.MustParse("8Gi"), Disk: resource.MustParse("200Gi")},
	}
	if err := rg.c.Create(ctx, stray); err != nil {
		t.Fatal(err)
	}
	stray.Status.NodeName = testNode
	if err := rg.c.Status().Update(ctx, stray); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if err := rg.reconcile("ci-2"); err != nil {
			t.Fatalf("reconciling ci-2: %v", err)
		}
	}
	rt := rg.instance("ci-2").Status.Runtime
	if rt == nil || rt.Phase != computev1alpha1.VMPending || !strings.Contains(rt.Message, ErrNoSlot.Error()) {
		t.Fatalf("ci-2's runtime is %+v, want Pending saying %q", rt, ErrNoSlot)
	}
	running, err := rg.launcher.Running()
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := running["uid-ci-2"]; ok {
		t.Error("ci-2 has a VM helper though no slot names it")
	}
	if _, ok := running["uid-ci-1"]; !ok {
		t.Error("ci-1, which holds a slot, lost its VM")
	}
}

// The agent lets an instance go only after its disk is wiped and the wipe
// is on record: the status write of wipedAt comes before the patch that
// removes macrack.io/disk-wipe.
// Proves: instance.wipe
func TestTheWipeIsRecordedBeforeTheFinalizerComesOff(t *testing.T) {
	rg := newRig(t, "ci-1")
	rg.run("ci-1")
	if err := rg.c.Delete(context.Background(), rg.instance("ci-1")); err != nil {
		t.Fatal(err)
	}
	if err := rg.reconcile("ci-1"); err != nil {
		t.Fatal(err)
	}
	if err := rg.c.Get(context.Background(), types.NamespacedName{Namespace: testNS, Name: "ci-1"}, &computev1alpha1.MacOSInstance{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the instance is still there after its teardown: %v", err)
	}
	if !rg.r.Disks.Wiped("uid-ci-1") {
		t.Fatal("the disk was not wiped")
	}
	recorded, released := -1, -1
	for i, w := range rg.recorded() {
		switch {
		case w.kind != "MacOSInstance":
		case w.subresource == "status" && strings.Contains(string(w.body), `"wipedAt"`) && recorded < 0:
			recorded = i
		case w.subresource == "" && strings.Contains(string(w.body), `"op":"remove","path":"/metadata/finalizers/`):
			released = i
		}
	}
	if recorded < 0 || released < 0 || recorded > released {
		t.Fatalf("wipedAt written at write %d, the finalizer removed at write %d: want the record first", recorded, released)
	}
}

// An instance whose image is gone (its spec patched to a missing one, or
// the image deleted) is reported Failed only once its VM and helper are
// gone: a VM never runs while its instance says Failed.
func TestAnInstanceReportedFailedRunsNothing(t *testing.T) {
	rg := newRig(t, "ci-1", "ci-2")
	rg.run("ci-1")
	rg.run("ci-2") // positive control: it keeps running
	ctx := context.Background()
	inst := rg.instance("ci-1")
	inst.Spec.ImageName = "missing"
	if err := rg.c.Update(ctx, inst); err != nil {
		t.Fatal(err)
	}
	if err := rg.reconcile("ci-1"); err != nil {
		t.Fatalf("reconciling ci-1: %v", err)
	}
	rt := rg.instance("ci-1").Status.Runtime
	if rt == nil || rt.Phase != computev1alpha1.VMFailed || !strings.Contains(rt.Message, "MacOSImage missing") {
		t.Fatalf("ci-1's runtime is %+v, want Failed naming MacOSImage missing", rt)
	}
	running, err := rg.launcher.Running()
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := running["uid-ci-1"]; ok {
		t.Error("ci-1 is reported Failed, but its VM helper still runs")
	}
	if _, ok := running["uid-ci-2"]; !ok {
		t.Error("ci-2, which did not fail, lost its VM")
	}
	if n, err := rg.kernel.Active(); err != nil || n != 1 {
		t.Errorf("the sim kernel runs %d VMs (%v), want 1 (ci-2's)", n, err)
	}
}
