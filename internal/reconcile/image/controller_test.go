package image

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/workqueue"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
)

func chassisReporting(name string, images ...fleetv1alpha1.ReportedImage) *fleetv1alpha1.MacNode {
	return &fleetv1alpha1.MacNode{ObjectMeta: metav1.ObjectMeta{Name: name},
		Status: fleetv1alpha1.MacNodeStatus{Reported: &fleetv1alpha1.ReportedFacts{Images: images}}}
}

// A fleet's reports within the window are one pass of each resolved image,
// due a window after the first; a write that changes no verified copy is
// none.
func TestReportsOfAFleetAreOnePassPerWindow(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := fleetv1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	resolved := &fleetv1alpha1.MacOSImage{ObjectMeta: metav1.ObjectMeta{Name: "golden"},
		Status: fleetv1alpha1.MacOSImageStatus{Resolved: &fleetv1alpha1.ResolvedImage{Digest: "sha256:aa"}}}
	unresolved := &fleetv1alpha1.MacOSImage{ObjectMeta: metav1.ObjectMeta{Name: "unresolved"}}
	r := &Reconciler{Client: fake.NewClientBuilder().WithScheme(scheme).WithObjects(resolved, unresolved).Build(),
		ReplicaCoalesce: 5 * time.Second}
	clk := clocktesting.NewFakeClock(time.Now())
	q := workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[reconcile.Request](),
		workqueue.TypedRateLimitingQueueConfig[reconcile.Request]{Clock: clk})
	defer q.ShutDown()
	h := r.reportHandler()
	ctx := context.Background()

	pulling := fleetv1alpha1.ReportedImage{Name: "golden", Digest: "sha256:aa", Phase: fleetv1alpha1.ImagePulling, BytesDone: 1}
	progressed := pulling
	progressed.BytesDone = 2
	ready := fleetv1alpha1.ReportedImage{Name: "golden", Digest: "sha256:aa", Phase: fleetv1alpha1.ImageReady}

	// Control: a pull's progress, and a write that leaves the report alone,
	// enqueue nothing, ever.
	h.Update(ctx, event.UpdateEvent{ObjectOld: chassisReporting("a", pulling), ObjectNew: chassisReporting("a", progressed)}, q)
	h.Update(ctx, event.UpdateEvent{ObjectOld: chassisReporting("b"), ObjectNew: chassisReporting("b")}, q)
	clk.Step(time.Minute)
	if q.Len() != 0 {
		t.Fatalf("reports that verified no copy enqueued %d passes", q.Len())
	}

	// Three chassis verify their copies, one second apart.
	for _, n := range []string{"a", "b", "c"} {
		h.Update(ctx, event.UpdateEvent{ObjectOld: chassisReporting(n, progressed), ObjectNew: chassisReporting(n, ready)}, q)
		clk.Step(time.Second)
	}
	if q.Len() != 0 {
		t.Fatalf("%d passes due before the window ended", q.Len())
	}
	clk.Step(2 * time.Second) // five seconds after the first report
	if err := wait.PollUntilContextTimeout(ctx, time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return q.Len() > 0, nil
	}); err != nil {
		t.Fatal("no pass was due a window after the first report")
	}
	if got, _ := q.Get(); got.NamespacedName != (types.NamespacedName{Name: "golden"}) || q.Len() != 0 {
		t.Fatalf("want one pass of the resolved image alone, got %v and %d more", got, q.Len())
	}
	q.Done(reconcile.Request{NamespacedName: types.NamespacedName{Name: "golden"}})

	// An eviction is a change too, as is a chassis deleted.
	h.Update(ctx, event.UpdateEvent{ObjectOld: chassisReporting("a", ready), ObjectNew: chassisReporting("a")}, q)
	h.Delete(ctx, event.DeleteEvent{Object: chassisReporting("c", ready)}, q)
	clk.Step(5 * time.Second)
	if err := wait.PollUntilContextTimeout(ctx, time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return q.Len() == 1, nil
	}); err != nil {
		t.Fatalf("an eviction and a deletion in one window: want one pass, have %d", q.Len())
	}
}
