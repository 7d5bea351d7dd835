package node

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	computev1alpha1 "github.com/boualleiguie/macrack-operator/api/compute/v1alpha1"
	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
	"github.com/boualleiguie/macrack-operator/internal/nodeready"
)

// statusWrites counts, by kind and name, the status writes that go through
// c, and sends them on.
func statusWrites(c client.Client) (client.Client, map[string]int) {
	n := map[string]int{}
	key := func(obj client.Object) string {
		switch obj.(type) {
		case *fleetv1alpha1.MacNode:
			return "MacNode/" + obj.GetName()
		case *corev1.Node:
			return "Node/" + obj.GetName()
		}
		return "other/" + obj.GetName()
	}
	return interceptor.NewClient(c.(client.WithWatch), interceptor.Funcs{
		SubResourceUpdate: func(ctx context.Context, cl client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
			n[key(obj)]++
			return cl.SubResource(sub).Update(ctx, obj, opts...)
		},
		SubResourcePatch: func(ctx context.Context, cl client.Client, sub string, obj client.Object, p client.Patch, opts ...client.SubResourcePatchOption) error {
			n[key(obj)]++
			return cl.SubResource(sub).Patch(ctx, obj, p, opts...)
		},
	}), n
}

// A chassis that comes to serve, whose Node needs both its address and its
// Ready condition, is written once a kind: one MacNode status write, one
// Node status write.
func TestAPassWritesEachStatusOnce(t *testing.T) {
	now := time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)
	mn := macNode(good())
	mn.Spec.Address = "192.0.2.10"
	r, c := reconciler(t, class(), mn, heartbeat(now), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "c02a"}})
	r.HeartbeatGrace = 40 * time.Second
	r.Clock.(*clocktesting.FakeClock).SetTime(now.Add(time.Second))
	var writes map[string]int
	r.Client, writes = statusWrites(c)

	got := run(t, r, c)
	if got.Status.Phase != fleetv1alpha1.MacNodeReady {
		t.Fatalf("control: phase %s, want Ready", got.Status.Phase)
	}
	n := &corev1.Node{}
	if err := c.Get(context.Background(), client.ObjectKey{Name: "c02a"}, n); err != nil {
		t.Fatal(err)
	}
	if len(n.Status.Addresses) != 1 || n.Status.Addresses[0].Address != "192.0.2.10" || !nodeready.IsTrue(n.Status.Conditions) {
		t.Fatalf("control: want the Node's address and Ready=True written, got %+v %+v", n.Status.Addresses, n.Status.Conditions)
	}
	if writes["MacNode/c02a"] != 1 || writes["Node/c02a"] != 1 || len(writes) != 2 {
		t.Fatalf("want one status write of the MacNode and one of the Node, got %v", writes)
	}

	clear(writes)
	run(t, r, c)
	if len(writes) != 0 {
		t.Fatalf("a steady pass wrote %v", writes)
	}
}

// A retired chassis' break-glass takes one status write a pass: the pass
// that finds a disk unwiped records it, and lets the instance go only on
// the pass after, once the stored MacNode records it.
func TestARetiredChassisRecordsADiskBeforeItLetsItsInstanceGo(t *testing.T) {
	mn := macNode(good())
	mn.Spec.Retired = true
	inst := &computev1alpha1.MacOSInstance{ObjectMeta: metav1.ObjectMeta{Namespace: "t", Name: "vm", UID: "uid-vm",
		Finalizers: []string{fleetv1alpha1.DiskWipeFinalizer}, DeletionTimestamp: &metav1.Time{Time: time.Date(2026, 6, 1, 11, 0, 0, 0, time.UTC)}},
		Spec: computev1alpha1.MacOSInstanceSpec{LeaseName: "l"}, Status: computev1alpha1.MacOSInstanceStatus{NodeName: "c02a"}}
	r, c := reconciler(t, class(), mn, inst)
	var writes map[string]int
	r.Client, writes = statusWrites(c)

	got := run(t, r, c)
	if len(got.Status.UnwipedDisks) != 1 || got.Status.UnwipedDisks[0].UID != "uid-vm" {
		t.Fatalf("want the disk recorded, got %+v", got.Status.UnwipedDisks)
	}
	if writes["MacNode/c02a"] != 1 {
		t.Fatalf("want one MacNode status write, got %v", writes)
	}
	held := &computev1alpha1.MacOSInstance{}
	if err := c.Get(context.Background(), client.ObjectKeyFromObject(inst), held); err != nil || !controllerutil.ContainsFinalizer(held, fleetv1alpha1.DiskWipeFinalizer) {
		t.Fatalf("the instance was let go in the pass that recorded its disk: %v %+v", err, held.Finalizers)
	}

	// The pass after, on the stored record, lets it go.
	run(t, r, c)
	if err := c.Get(context.Background(), client.ObjectKeyFromObject(inst), held); err == nil && controllerutil.ContainsFinalizer(held, fleetv1alpha1.DiskWipeFinalizer) {
		t.Fatalf("the recorded instance was not let go: %+v", held.Finalizers)
	}
	if got := run(t, r, c); len(got.Status.UnwipedDisks) != 1 {
		t.Fatalf("the record went or doubled: %+v", got.Status.UnwipedDisks)
	}
}
