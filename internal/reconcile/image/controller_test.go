package image

import (
	"context"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
)

func chassisReporting(name string, images ...fleetv1alpha1.ReportedImage) *fleetv1alpha1.MacNode {
	return &fleetv1alpha1.MacNode{ObjectMeta: metav1.ObjectMeta{Name: name},
		Status: fleetv1alpha1.MacNodeStatus{Reported: &fleetv1alpha1.ReportedFacts{Images: images}}}
}

// A fleet's reports within the window are one pass of the image they
// verified, due a window after the first; a write that changes no verified
// copy is none. The count moves before the pass is enqueued.
func TestReportsOfAFleetAreOnePassPerWindow(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	q := workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[reconcile.Request](),
		workqueue.TypedRateLimitingQueueConfig[reconcile.Request]{Clock: clk})
	defer q.ShutDown()
	replicas := NewReplicas()
	h := replicas.Handler(enqueueImage(q, 5*time.Second))
	ctx := context.Background()
	key := "golden@sha256:aa"

	pulling := fleetv1alpha1.ReportedImage{Name: "golden", Digest: "sha256:aa", Phase: fleetv1alpha1.ImagePulling, BytesDone: 1}
	progressed := pulling
	progressed.BytesDone = 2
	ready := fleetv1alpha1.ReportedImage{Name: "golden", Digest: "sha256:aa", Phase: fleetv1alpha1.ImageReady}
	other := fleetv1alpha1.ReportedImage{Name: "other", Digest: "sha256:bb", Phase: fleetv1alpha1.ImageReady}

	// Control: a pull's progress, and a write that leaves the report alone,
	// enqueue nothing, ever.
	h.OnAdd(chassisReporting("a", pulling), true)
	h.OnUpdate(chassisReporting("a", pulling), chassisReporting("a", progressed))
	h.OnUpdate(chassisReporting("b"), chassisReporting("b"))
	clk.Step(time.Minute)
	if q.Len() != 0 || replicas.Get(key) != 0 {
		t.Fatalf("reports that verified no copy enqueued %d passes and counted %d", q.Len(), replicas.Get(key))
	}

	// Three chassis verify their copies, one second apart.
	for _, n := range []string{"a", "b", "c"} {
		h.OnUpdate(chassisReporting(n, progressed), chassisReporting(n, ready))
		clk.Step(time.Second)
	}
	if got := replicas.Get(key); got != 3 {
		t.Fatalf("three verified copies counted %d", got)
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
		t.Fatalf("want one pass of the verified image alone, got %v and %d more", got, q.Len())
	}
	q.Done(reconcile.Request{NamespacedName: types.NamespacedName{Name: "golden"}})

	// An eviction is a change too, as is a chassis deleted; another
	// golden's copy enqueues that golden, not this one.
	h.OnUpdate(chassisReporting("a", ready), chassisReporting("a"))
	h.OnDelete(toolscache.DeletedFinalStateUnknown{Key: "c", Obj: chassisReporting("c", ready)})
	h.OnUpdate(chassisReporting("b", ready), chassisReporting("b", ready, other))
	if got := replicas.Get(key); got != 1 {
		t.Fatalf("after an eviction and a deletion, %d copies counted, want 1", got)
	}
	clk.Step(5 * time.Second)
	if err := wait.PollUntilContextTimeout(ctx, time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return q.Len() == 2, nil
	}); err != nil {
		t.Fatalf("an eviction and a deletion of one golden, a copy of another, in one window: want two passes, have %d", q.Len())
	}
}

// A pass writes the count of the resolved digest's copies, and another
// digest's copies are not replicas.
func TestPassWritesTheCountOfTheResolvedDigest(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := fleetv1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	digest := "sha256:" + strings.Repeat("a", 64)
	img := &fleetv1alpha1.MacOSImage{ObjectMeta: metav1.ObjectMeta{Name: "golden", Generation: 1},
		Status: fleetv1alpha1.MacOSImageStatus{ObservedGeneration: 1, Resolved: &fleetv1alpha1.ResolvedImage{Digest: digest}}}
	img.Spec.Source = "registry.example/golden@" + digest
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(img).WithStatusSubresource(img).Build()
	replicas := NewReplicas()
	h := replicas.Handler(nil)
	h.OnAdd(chassisReporting("a", fleetv1alpha1.ReportedImage{Name: "golden", Digest: digest, Phase: fleetv1alpha1.ImageReady}), true)
	h.OnAdd(chassisReporting("b", fleetv1alpha1.ReportedImage{Name: "golden", Digest: digest, Phase: fleetv1alpha1.ImageReady}), true)
	h.OnAdd(chassisReporting("c", fleetv1alpha1.ReportedImage{Name: "golden", Digest: "sha256:old", Phase: fleetv1alpha1.ImageReady}), true)
	r := &Reconciler{Client: c, Clock: clocktesting.NewFakePassiveClock(time.Now()), Recorder: events.NewFakeRecorder(10), Replicas: replicas}
	if _, err := r.Reconcile(context.Background(), reconcile.Request{NamespacedName: types.NamespacedName{Name: "golden"}}); err != nil {
		t.Fatal(err)
	}
	got := &fleetv1alpha1.MacOSImage{}
	if err := c.Get(context.Background(), types.NamespacedName{Name: "golden"}, got); err != nil {
		t.Fatal(err)
	}
	if got.Status.Replicas != 2 {
		t.Fatalf("status.replicas = %d, want 2 (the resolved digest's copies, not the old one's)", got.Status.Replicas)
	}
	// The steady pass: the same count, no write.
	if _, err := r.Reconcile(context.Background(), reconcile.Request{NamespacedName: types.NamespacedName{Name: "golden"}}); err != nil {
		t.Fatal(err)
	}
	again := &fleetv1alpha1.MacOSImage{}
	if err := c.Get(context.Background(), types.NamespacedName{Name: "golden"}, again); err != nil {
		t.Fatal(err)
	}
	if again.ResourceVersion != got.ResourceVersion {
		t.Errorf("a steady pass wrote the image (resourceVersion %s to %s)", got.ResourceVersion, again.ResourceVersion)
	}
}
