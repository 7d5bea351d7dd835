package pod

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	computev1alpha1 "github.com/boualleiguie/macrack-operator/api/compute/v1alpha1"
	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
	leasingv1alpha1 "github.com/boualleiguie/macrack-operator/api/leasing/v1alpha1"
	"github.com/boualleiguie/macrack-operator/internal/index"
)

var t0 = time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)

func setup(t *testing.T, objs ...client.Object) (*Reconciler, client.WithWatch) {
	t.Helper()
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, fleetv1alpha1.AddToScheme, leasingv1alpha1.AddToScheme, computev1alpha1.AddToScheme} {
		if err := add(s); err != nil {
			t.Fatal(err)
		}
	}
	mn := &fleetv1alpha1.MacNode{ObjectMeta: metav1.ObjectMeta{Name: "c02a"},
		Status: fleetv1alpha1.MacNodeStatus{Slots: []fleetv1alpha1.Slot{{Namespace: "t", Name: "a", UID: "uid-a"}}}}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "c02a"},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}}}
	b := fake.NewClientBuilder().WithScheme(s).WithObjects(append([]client.Object{mn, node}, objs...)...).
		WithStatusSubresource(&computev1alpha1.MacOSInstance{}, &corev1.Pod{})
	for _, ix := range index.Definitions() {
		b = b.WithIndex(ix.Object, ix.Name, ix.Value)
	}
	c := b.Build()
	return &Reconciler{Client: c, APIReader: c, Clock: clocktesting.NewFakeClock(t0), Recorder: events.NewFakeRecorder(100)}, c
}

// placed is instance a, on chassis c02a, in its slot, with the VM in phase.
func placed(phase computev1alpha1.VMPhase, ready bool) *computev1alpha1.MacOSInstance {
	return &computev1alpha1.MacOSInstance{
		ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: "t", UID: "uid-a", Finalizers: []string{fleetv1alpha1.DiskWipeFinalizer}},
		Spec:       computev1alpha1.MacOSInstanceSpec{LeaseName: "l", ImageName: "img", CPU: 4},
		Status: computev1alpha1.MacOSInstanceStatus{NodeName: "c02a",
			Runtime: &computev1alpha1.RuntimeStatus{Phase: phase, ReadyForWork: ready}},
	}
}

func reconcileA(t *testing.T, r *Reconciler) ctrl.Result {
	t.Helper()
	res, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: types.NamespacedName{Namespace: "t", Name: "a"}})
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func getPod(t *testing.T, c client.Client, name string) *corev1.Pod {
	t.Helper()
	p := &corev1.Pod{}
	if err := c.Get(context.Background(), types.NamespacedName{Namespace: "t", Name: name}, p); err != nil {
		t.Fatalf("Pod t/%s: %v", name, err)
	}
	return p
}

func podCondition(t *testing.T, c client.Client) *metav1.Condition {
	t.Helper()
	i := &computev1alpha1.MacOSInstance{}
	if err := c.Get(context.Background(), types.NamespacedName{Namespace: "t", Name: "a"}, i); err != nil {
		t.Fatal(err)
	}
	return meta.FindStatusCondition(i.Status.Conditions, computev1alpha1.ConditionPod)
}

func readyOf(p *corev1.Pod) *corev1.PodCondition {
	for i := range p.Status.Conditions {
		if p.Status.Conditions[i].Type == corev1.PodReady {
			return &p.Status.Conditions[i]
		}
	}
	return nil
}

// A placed instance has one Pod in its namespace, named after it,
// controlled by it, on its chassis' Node, with one container that requests
// one macOS VM, and the restricted level's settings.
func TestAPlacedInstanceHasItsPod(t *testing.T) {
	r, c := setup(t, placed(computev1alpha1.VMRunning, true))
	reconcileA(t, r)
	p := getPod(t, c, "a")
	ref := metav1.GetControllerOf(p)
	if ref == nil || ref.UID != "uid-a" || ref.Kind != "MacOSInstance" || ref.Name != "a" {
		t.Fatalf("controller reference %+v, want instance a", ref)
	}
	if p.Spec.NodeName != "c02a" || len(p.Spec.Containers) != 1 || p.Spec.Containers[0].Name != fleetv1alpha1.InstanceContainer {
		t.Fatalf("node %q, containers %+v", p.Spec.NodeName, p.Spec.Containers)
	}
	for _, l := range []corev1.ResourceList{p.Spec.Containers[0].Resources.Requests, p.Spec.Containers[0].Resources.Limits} {
		if q := l[fleetv1alpha1.VMResource]; q.Value() != 1 {
			t.Fatalf("the Pod requests %s macOS VMs, want 1", q.String())
		}
	}
	sc := p.Spec.Containers[0].SecurityContext
	if p.Spec.SecurityContext == nil || !ptr.Deref(p.Spec.SecurityContext.RunAsNonRoot, false) ||
		p.Spec.SecurityContext.SeccompProfile == nil || sc == nil || ptr.Deref(sc.AllowPrivilegeEscalation, true) ||
		sc.Capabilities == nil || len(sc.Capabilities.Drop) != 1 || sc.Capabilities.Drop[0] != "ALL" {
		t.Fatalf("not the restricted level's settings: pod %+v, container %+v", p.Spec.SecurityContext, sc)
	}
	if ptr.Deref(p.Spec.AutomountServiceAccountToken, true) || ptr.Deref(p.Spec.TerminationGracePeriodSeconds, 1) != 0 {
		t.Fatalf("the Pod mounts a token or waits on delete: %+v", p.Spec)
	}
	// A silent chassis' Node is tainted NoExecute by kube-controller-manager;
	// the Pod tolerates that for ever, and nothing else.
	if len(p.Spec.Tolerations) != 2 {
		t.Fatalf("tolerations %+v, want not-ready and unreachable only", p.Spec.Tolerations)
	}
	for _, tol := range p.Spec.Tolerations {
		if (tol.Key != corev1.TaintNodeNotReady && tol.Key != corev1.TaintNodeUnreachable) || tol.Effect != corev1.TaintEffectNoExecute ||
			tol.Operator != corev1.TolerationOpExists || tol.TolerationSeconds != nil {
			t.Fatalf("toleration %+v", tol)
		}
	}
	if c := podCondition(t, c); c == nil || c.Status != metav1.ConditionTrue || c.Reason != computev1alpha1.ReasonPodCurrent {
		t.Fatalf("the instance's Pod condition is %+v", c)
	}
}

// An instance with a nodeName but no slot (an administrator's write) gets
// no Pod: the slots are the count, and the Pod shows only what they hold.
func TestAnInstanceWithoutASlotHasNoPod(t *testing.T) {
	sneaky := placed(computev1alpha1.VMPending, false)
	sneaky.Name, sneaky.UID = "sneaky", "uid-sneaky"
	r, c := setup(t, sneaky)
	if _, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: types.NamespacedName{Namespace: "t", Name: "sneaky"}}); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(context.Background(), types.NamespacedName{Namespace: "t", Name: "sneaky"}, &corev1.Pod{}); !apierrors.IsNotFound(err) {
		t.Fatalf("an instance without a slot has a Pod: %v", err)
	}
}

// The Pod's status mirrors the VM: phase, Ready from the guest and the
// Node's Ready condition, the container's state; no IP.
func TestThePodMirrorsTheInstance(t *testing.T) {
	inst := placed(computev1alpha1.VMStarting, false)
	r, c := setup(t, inst)
	reconcileA(t, r)
	p := getPod(t, c, "a")
	if p.Status.Phase != corev1.PodRunning || readyOf(p).Status != corev1.ConditionFalse || readyOf(p).Reason != ReasonVMNotRunning {
		t.Fatalf("starting: phase %s, ready %+v", p.Status.Phase, readyOf(p))
	}

	setRuntime(t, c, computev1alpha1.RuntimeStatus{Phase: computev1alpha1.VMRunning, ReadyForWork: true})
	reconcileA(t, r)
	p = getPod(t, c, "a")
	if readyOf(p).Status != corev1.ConditionTrue || !p.Status.ContainerStatuses[0].Ready || p.Status.ContainerStatuses[0].State.Running == nil {
		t.Fatalf("ready for work: %+v", p.Status)
	}
	if p.Status.PodIP != "" || len(p.Status.PodIPs) != 0 || p.Status.HostIP != "" {
		t.Fatalf("the Pod has an address: %+v", p.Status)
	}
	started := p.Status.ContainerStatuses[0].State.Running.StartedAt

	// The Node's Ready goes Unknown (kube-controller-manager, on a silent
	// agent): the Pod is not Ready, though the guest says it is.
	node := &corev1.Node{}
	_ = c.Get(context.Background(), types.NamespacedName{Name: "c02a"}, node)
	node.Status.Conditions[0].Status = corev1.ConditionUnknown
	if err := c.Status().Update(context.Background(), node); err != nil {
		t.Fatal(err)
	}
	r.Clock.(*clocktesting.FakeClock).Step(time.Minute)
	reconcileA(t, r)
	p = getPod(t, c, "a")
	if readyOf(p).Status != corev1.ConditionFalse || readyOf(p).Reason != ReasonNodeNotReady {
		t.Fatalf("on a Node not Ready: %+v", readyOf(p))
	}
	if !p.Status.ContainerStatuses[0].State.Running.StartedAt.Equal(&started) {
		t.Fatal("the container's start time moved")
	}
	// Steady: nothing is written again.
	rv := p.ResourceVersion
	reconcileA(t, r)
	if getPod(t, c, "a").ResourceVersion != rv {
		t.Fatal("a steady pass wrote the Pod's status")
	}

	setRuntime(t, c, computev1alpha1.RuntimeStatus{Phase: computev1alpha1.VMStopped})
	reconcileA(t, r)
	p = getPod(t, c, "a")
	if p.Status.Phase != corev1.PodSucceeded || p.Status.ContainerStatuses[0].State.Terminated == nil {
		t.Fatalf("stopped: %+v", p.Status)
	}
}

func setRuntime(t *testing.T, c client.Client, rt computev1alpha1.RuntimeStatus) {
	t.Helper()
	i := &computev1alpha1.MacOSInstance{}
	_ = c.Get(context.Background(), types.NamespacedName{Namespace: "t", Name: "a"}, i)
	i.Status.Runtime = &rt
	if err := c.Status().Update(context.Background(), i); err != nil {
		t.Fatal(err)
	}
}

// A Pod left Terminating is deleted at once, with a grace period of 0 and
// its UID as a precondition, and made again; an instance being deleted
// gets no new one.
func TestATerminatingPodIsForceDeletedAndMadeAgain(t *testing.T) {
	r, c := setup(t, placed(computev1alpha1.VMRunning, true))
	reconcileA(t, r)
	first := getPod(t, c, "a")

	var deletes []client.DeleteOptions
	terminating := true
	r.Client = interceptor.NewClient(c, interceptor.Funcs{
		Get: func(ctx context.Context, cl client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if err := cl.Get(ctx, key, obj, opts...); err != nil {
				return err
			}
			if p, ok := obj.(*corev1.Pod); ok && terminating {
				p.DeletionTimestamp, p.DeletionGracePeriodSeconds = &metav1.Time{Time: t0}, ptr.To(int64(30))
			}
			return nil
		},
		Delete: func(ctx context.Context, cl client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
			o := client.DeleteOptions{}
			o.ApplyOptions(opts)
			deletes = append(deletes, o)
			return cl.Delete(ctx, obj, opts...)
		},
	})
	reconcileA(t, r)
	if len(deletes) != 1 || ptr.Deref(deletes[0].GracePeriodSeconds, -1) != 0 ||
		deletes[0].Preconditions == nil || ptr.Deref(deletes[0].Preconditions.UID, "") != first.UID {
		t.Fatalf("deletes %+v, want one, grace 0, on the Pod's UID", deletes)
	}
	if err := c.Get(context.Background(), types.NamespacedName{Namespace: "t", Name: "a"}, &corev1.Pod{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the Terminating Pod is still there: %v", err)
	}
	terminating = false
	reconcileA(t, r)
	getPod(t, c, "a") // made again

	// The instance is being deleted (the agent's finalizer holds it):
	// its Pod, deleted, is not made again.
	i := &computev1alpha1.MacOSInstance{}
	_ = c.Get(context.Background(), types.NamespacedName{Namespace: "t", Name: "a"}, i)
	if err := c.Delete(context.Background(), i); err != nil {
		t.Fatal(err)
	}
	if err := c.Delete(context.Background(), getPod(t, c, "a")); err != nil {
		t.Fatal(err)
	}
	reconcileA(t, r)
	if err := c.Get(context.Background(), types.NamespacedName{Namespace: "t", Name: "a"}, &corev1.Pod{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the Pod of an instance being deleted was made again: %v", err)
	}
}

// A Pod that holds the instance's name but whose controller reference
// names another UID (a tenant's forgery, labels and all) is never touched,
// written, or taken for the instance's; the instance says so.
func TestAForgedPodChangesNothing(t *testing.T) {
	forged := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: "t",
		Labels: map[string]string{fleetv1alpha1.InstancePodLabel: "true", fleetv1alpha1.InstanceUIDLabel: "uid-a"},
		OwnerReferences: []metav1.OwnerReference{{APIVersion: computev1alpha1.GroupVersion.String(), Kind: "MacOSInstance",
			Name: "a", UID: "uid-other", Controller: ptr.To(true)}}},
		Spec: corev1.PodSpec{NodeName: "c02a", Containers: []corev1.Container{{Name: "macos", Image: "evil"}}}}
	r, c := setup(t, placed(computev1alpha1.VMRunning, true), forged)
	before := getPod(t, c, "a")
	reconcileA(t, r)
	after := getPod(t, c, "a")
	if after.ResourceVersion != before.ResourceVersion || after.Status.Phase != "" {
		t.Fatalf("the forged Pod was written: %+v", after.Status)
	}
	if cond := podCondition(t, c); cond == nil || cond.Reason != computev1alpha1.ReasonPodNameTaken {
		t.Fatalf("the instance's Pod condition is %+v, want PodNameTaken", cond)
	}
}

// Admission's refusal of the Pod (PodSecurity, a ResourceQuota, a
// webhook) is a condition on the instance, tried again later; never an
// error, and nothing else changes.
func TestARefusedPodIsACondition(t *testing.T) {
	r, c := setup(t, placed(computev1alpha1.VMRunning, true))
	r.Client = interceptor.NewClient(c, interceptor.Funcs{
		Create: func(ctx context.Context, cl client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			if _, ok := obj.(*corev1.Pod); ok {
				return apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, obj.GetName(),
					errExceeded("exceeded quota: q, requested: pods=1, used: pods=0, limited: pods=0"))
			}
			return cl.Create(ctx, obj, opts...)
		},
	})
	res := reconcileA(t, r)
	if res.RequeueAfter != RefusedRetry {
		t.Fatalf("requeue %v, want %v", res.RequeueAfter, RefusedRetry)
	}
	cond := podCondition(t, c)
	if cond == nil || cond.Status != metav1.ConditionFalse || cond.Reason != computev1alpha1.ReasonPodRefused {
		t.Fatalf("the instance's Pod condition is %+v", cond)
	}
	// Positive control: once admission lets it, the Pod is made.
	r.Client = c
	reconcileA(t, r)
	getPod(t, c, "a")
	if cond := podCondition(t, c); cond.Status != metav1.ConditionTrue {
		t.Fatalf("after the refusal lifts: %+v", cond)
	}
}

type errExceeded string

func (e errExceeded) Error() string { return string(e) }

// The Pod condition is applied without a lock: a pass on a cache that has
// not shown the last apply yet does not apply it again (the lock used to
// refuse that pass); once the cache shows it, a change is applied.
func TestAPassOnAnOlderReadDoesNotApplyThePodConditionAgain(t *testing.T) {
	r, c := setup(t, placed(computev1alpha1.VMRunning, true))
	stale := &computev1alpha1.MacOSInstance{}
	if err := c.Get(context.Background(), types.NamespacedName{Namespace: "t", Name: "a"}, stale); err != nil {
		t.Fatal(err)
	}
	applies := 0
	older := true
	r.Client = interceptor.NewClient(c, interceptor.Funcs{
		Get: func(ctx context.Context, cl client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if i, ok := obj.(*computev1alpha1.MacOSInstance); ok && older {
				stale.DeepCopyInto(i)
				return nil
			}
			return cl.Get(ctx, key, obj, opts...)
		},
		SubResourceApply: func(ctx context.Context, cl client.Client, sub string, obj runtime.ApplyConfiguration, opts ...client.SubResourceApplyOption) error {
			applies++
			return cl.SubResource(sub).Apply(ctx, obj, opts...)
		},
	})
	reconcileA(t, r)
	reconcileA(t, r) // the cache still shows the instance without its Pod condition
	if applies != 1 {
		t.Fatalf("%d applies of the Pod condition over two passes on one read, want 1", applies)
	}
	if cond := podCondition(t, c); cond == nil || cond.Status != metav1.ConditionTrue {
		t.Fatalf("Pod condition %+v, want True", cond)
	}
	// Positive control: the cache catches up, and a Pod condition that
	// changes (the Pod's name taken) is applied.
	older = false
	reconcileA(t, r)
	if applies != 1 {
		t.Fatalf("%d applies once the cache caught up, with nothing new, want 1", applies)
	}
	if err := c.Delete(context.Background(), getPod(t, c, "a")); err != nil {
		t.Fatal(err)
	}
	taken := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "t", Name: "a"}}
	if err := c.Create(context.Background(), taken); err != nil {
		t.Fatal(err)
	}
	reconcileA(t, r)
	if applies != 2 {
		t.Fatalf("%d applies after the Pod condition changed, want 2", applies)
	}
}

// Until the agent reports the VM, the Pod keeps the status the API server
// gave it at its create (Pending, not ready): no write says that again.
// The agent's first report makes the first write, whose start time is the
// Pod's creation, when the operator took it on.
func TestThePodIsWrittenFirstWhenTheVMIsReported(t *testing.T) {
	inst := placed(computev1alpha1.VMPending, false)
	inst.Status.Runtime = nil
	r, c := setup(t, inst)
	created := metav1.NewTime(t0.Add(-time.Minute))
	writes := 0
	r.Client = interceptor.NewClient(c, interceptor.Funcs{
		Create: func(ctx context.Context, cl client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			obj.SetCreationTimestamp(created) // the API server's, which the fake client does not set
			return cl.Create(ctx, obj, opts...)
		},
		SubResourcePatch: func(ctx context.Context, cl client.Client, sub string, obj client.Object, p client.Patch, opts ...client.SubResourcePatchOption) error {
			if _, ok := obj.(*corev1.Pod); ok {
				writes++
			}
			return cl.SubResource(sub).Patch(ctx, obj, p, opts...)
		},
	})
	reconcileA(t, r)
	reconcileA(t, r)
	p := getPod(t, c, "a")
	if writes != 0 || len(p.Status.Conditions) != 0 || len(p.Status.ContainerStatuses) != 0 {
		t.Fatalf("%d status writes before the VM was reported, status %+v; want none", writes, p.Status)
	}
	if cond := podCondition(t, c); cond == nil || cond.Status != metav1.ConditionTrue {
		t.Fatalf("the instance's Pod condition is %+v, want True: its Pod is made", cond)
	}

	// Positive control: the agent's first report is written, once.
	r.Clock.(*clocktesting.FakeClock).Step(time.Minute)
	setRuntime(t, c, computev1alpha1.RuntimeStatus{Phase: computev1alpha1.VMStarting})
	reconcileA(t, r)
	reconcileA(t, r)
	p = getPod(t, c, "a")
	if writes != 1 || p.Status.Phase != corev1.PodRunning || readyOf(p) == nil || readyOf(p).Reason != ReasonVMNotRunning {
		t.Fatalf("%d writes after the VM was reported, status %+v; want 1, Running, not ready", writes, p.Status)
	}
	if p.Status.StartTime == nil || !p.Status.StartTime.Equal(&created) {
		t.Fatalf("start time %v, want the Pod's creation %v", p.Status.StartTime, created)
	}
}

// A deleted instance's Pod goes once the agent has the stop and the wipe on
// record (one write), without a Succeeded written first: nobody reads the
// status of a Pod deleted right after (issue 39). The Pod of a VM that
// stops while its instance lives on, or whose deleted instance still waits
// for its wipe, is written Succeeded: it must show the VM stopped.
func TestADeletedInstancesPodGoesWithoutItsLastStatus(t *testing.T) {
	for _, tc := range []struct {
		name      string
		deleted   bool
		wiped     bool
		succeeded bool
	}{
		{"deleted, stopped and wiped", true, true, false},
		{"stopped while the instance lives on", false, false, true},
		{"deleted and stopped, the wipe still to come", true, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, c := setup(t, placed(computev1alpha1.VMRunning, true))
			reconcileA(t, r)
			getPod(t, c, "a") // Running, written
			statusWrites := 0
			r.Client = interceptor.NewClient(c, interceptor.Funcs{
				SubResourcePatch: func(ctx context.Context, cl client.Client, sub string, obj client.Object, p client.Patch, opts ...client.SubResourcePatchOption) error {
					if _, ok := obj.(*corev1.Pod); ok && sub == "status" {
						statusWrites++
					}
					return cl.SubResource(sub).Patch(ctx, obj, p, opts...)
				},
			})
			if tc.deleted {
				i := &computev1alpha1.MacOSInstance{}
				_ = c.Get(context.Background(), types.NamespacedName{Namespace: "t", Name: "a"}, i)
				if err := c.Delete(context.Background(), i); err != nil { // held by the agent's finalizer
					t.Fatal(err)
				}
			}
			rt := computev1alpha1.RuntimeStatus{Phase: computev1alpha1.VMStopped,
				LastStop: &computev1alpha1.VMStop{Method: computev1alpha1.StopGuestShutdown, At: metav1.NewTime(t0)}}
			if tc.wiped {
				rt.WipedAt = &metav1.Time{Time: t0}
			}
			setRuntime(t, c, rt)
			reconcileA(t, r)

			p := &corev1.Pod{}
			err := c.Get(context.Background(), types.NamespacedName{Namespace: "t", Name: "a"}, p)
			if tc.succeeded {
				if err != nil || p.Status.Phase != corev1.PodSucceeded || statusWrites != 1 {
					t.Fatalf("Pod %v (%v), %d status writes: want it Succeeded, in one", p.Status.Phase, err, statusWrites)
				}
				return
			}
			if !apierrors.IsNotFound(err) || statusWrites != 0 {
				t.Fatalf("Pod %v (%v), %d status writes: want it gone, unwritten", p.Status.Phase, err, statusWrites)
			}
		})
	}
}

// The generation a delete raises moves nothing the Pod condition says: a
// deleting instance's condition stays at the generation it spoke of, as
// Placed does, unwritten (issue 39). The positive control: a live
// instance's new generation is stamped on it.
func TestADeletingInstancesPodConditionIsNotRestamped(t *testing.T) {
	for _, deleting := range []bool{true, false} {
		r, c := setup(t, placed(computev1alpha1.VMRunning, true))
		reconcileA(t, r)
		if cond := podCondition(t, c); cond == nil || cond.Status != metav1.ConditionTrue {
			t.Fatalf("the Pod condition is %+v", cond)
		}
		applies := 0
		r.Client = interceptor.NewClient(c, interceptor.Funcs{
			SubResourceApply: func(ctx context.Context, cl client.Client, sub string, obj runtime.ApplyConfiguration, opts ...client.SubResourceApplyOption) error {
				applies++
				return cl.SubResource(sub).Apply(ctx, obj, opts...)
			},
		})
		i := &computev1alpha1.MacOSInstance{}
		_ = c.Get(context.Background(), types.NamespacedName{Namespace: "t", Name: "a"}, i)
		gen := i.Generation
		i.Generation++ // what the API server does to a custom resource on its delete, or a spec change
		if err := c.Update(context.Background(), i); err != nil {
			t.Fatal(err)
		}
		if _ = c.Get(context.Background(), types.NamespacedName{Namespace: "t", Name: "a"}, i); i.Generation != gen+1 {
			t.Fatalf("generation %d, want %d", i.Generation, gen+1)
		}
		if deleting {
			if err := c.Delete(context.Background(), i); err != nil { // held by the agent's finalizer
				t.Fatal(err)
			}
		}
		reconcileA(t, r)
		cond := podCondition(t, c)
		switch {
		case deleting && (applies != 0 || cond.ObservedGeneration != gen):
			t.Fatalf("deleting: %d applies, the condition at generation %d: want none, at %d", applies, cond.ObservedGeneration, gen)
		case !deleting && (applies != 1 || cond.ObservedGeneration != gen+1):
			t.Fatalf("live: %d applies, the condition at generation %d: want one, at %d", applies, cond.ObservedGeneration, gen+1)
		}
	}
}
