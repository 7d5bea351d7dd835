package audit

import (
	"context"
	"net/http"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	computev1alpha1 "github.com/boualleiguie/macrack-operator/api/compute/v1alpha1"
	"github.com/boualleiguie/macrack-operator/internal/conditions"
)

// instanceExporter exports instances through a fake client whose JSON
// patches fail as the API server's do: a patch that does not apply is a
// 422 with the server's generic message.
func instanceExporter(t *testing.T, inst *computev1alpha1.MacOSInstance) (*kindReconciler, client.Client) {
	t.Helper()
	scheme := runtime.NewScheme()
	_ = computev1alpha1.AddToScheme(scheme)
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(inst).WithStatusSubresource(inst).WithInterceptorFuncs(interceptor.Funcs{
		SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, p client.Patch, opts ...client.SubResourcePatchOption) error {
			err := c.SubResource(sub).Patch(ctx, obj, p, opts...)
			if _, isStatus := err.(apierrors.APIStatus); err != nil && !isStatus {
				return apierrors.NewGenericServerResponse(http.StatusUnprocessableEntity, "", schema.GroupResource{}, "", err.Error(), 0, false)
			}
			return err
		},
	}).Build()
	clk := clocktesting.NewFakeClock(time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC))
	e := &Exporter{Client: c, Clock: clk, Sink: &sink{}, Metrics: NewMetrics()}
	e.gate = newGate(clk)
	e.kinds = kinds()
	for _, k := range e.kinds {
		if k.observed {
			return &kindReconciler{e: e, k: k}, c
		}
	}
	t.Fatal("no observed kind")
	return nil, nil
}

func getInstance(t *testing.T, c client.Client) *computev1alpha1.MacOSInstance {
	t.Helper()
	got := &computev1alpha1.MacOSInstance{}
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: "t", Name: "vm"}, got); err != nil {
		t.Fatal(err)
	}
	return got
}

// A journal with a sequence is locked on it alone: another writer's
// condition, written after the exporter read the instance, neither
// refuses the journal's write nor is lost to it; a second journal write
// on the same stale read is refused, as a Conflict, and numbers nothing
// twice.
func TestTheJournalIsLockedOnItsSequenceAlone(t *testing.T) {
	ctx := context.Background()
	inst := &computev1alpha1.MacOSInstance{ObjectMeta: metav1.ObjectMeta{Namespace: "t", Name: "vm", UID: "i-1"}}
	r, c := instanceExporter(t, inst)

	// The first write, "created": the resourceVersion is its lock.
	if err := r.observe(ctx, getInstance(t, c)); err != nil {
		t.Fatalf("journaling created: %v", err)
	}
	read := getInstance(t, c)
	if read.Status.Audit == nil || read.Status.Audit.NextSequence != 2 {
		t.Fatalf("journal %+v after created, want nextSequence 2", read.Status.Audit)
	}

	// Placement places it, with its condition, after the exporter read it.
	placed := read.DeepCopy()
	placed.Status.NodeName = "c02"
	conditions.Set(&placed.Status.Conditions, conditions.True(computev1alpha1.ConditionPlaced, computev1alpha1.ReasonPlaced, "placed"), 1, metav1.Now())
	if err := c.Status().Update(ctx, placed); err != nil {
		t.Fatal(err)
	}
	// The exporter's read is stale, but saw the placement through another
	// path: its journal write lands on the newer instance.
	stale := read.DeepCopy()
	stale.Status.NodeName = "c02"
	if err := r.observe(ctx, stale); err != nil {
		t.Fatalf("journaling placed over another writer's condition: %v", err)
	}
	got := getInstance(t, c)
	if got.Status.Audit.NextSequence != 3 || len(got.Status.Audit.Records) != 2 {
		t.Fatalf("journal %+v, want created and placed", got.Status.Audit)
	}
	if !meta.IsStatusConditionTrue(got.Status.Conditions, computev1alpha1.ConditionPlaced) {
		t.Errorf("conditions %+v: the journal's write lost placement's", got.Status.Conditions)
	}

	// Positive control: the same stale read again would number "placed"
	// a second time, at 3: the sequence test refuses it.
	again := read.DeepCopy()
	again.Status.NodeName = "c02"
	err := r.observe(ctx, again)
	if !apierrors.IsConflict(err) {
		t.Fatalf("a second journal write on a stale sequence: %v, want a Conflict", err)
	}
	if got := getInstance(t, c); got.Status.Audit.NextSequence != 3 || len(got.Status.Audit.Records) != 2 {
		t.Errorf("journal %+v after the refused write, want it unchanged", got.Status.Audit)
	}
}

// The journal's first write, on an instance whose status another writer
// started, tests that there is no journal yet rather than the
// resourceVersion: a later write of another field does not refuse it, and
// a journal written meanwhile does.
func TestTheJournalsFirstWriteTestsThatThereIsNone(t *testing.T) {
	ctx := context.Background()
	inst := &computev1alpha1.MacOSInstance{ObjectMeta: metav1.ObjectMeta{Namespace: "t", Name: "vm", UID: "i-1"}}
	r, c := instanceExporter(t, inst)
	placed := getInstance(t, c)
	conditions.Set(&placed.Status.Conditions, conditions.False(computev1alpha1.ConditionPlaced, computev1alpha1.ReasonCapacityExceeded, "waits"), 1, metav1.Now())
	if err := c.Status().Update(ctx, placed); err != nil {
		t.Fatal(err)
	}
	read := getInstance(t, c)
	// Another writer's field, after the exporter read the instance.
	later := read.DeepCopy()
	later.Status.Conditions[0].Message = "still waits"
	if err := c.Status().Update(ctx, later); err != nil {
		t.Fatal(err)
	}
	if err := r.observe(ctx, read.DeepCopy()); err != nil {
		t.Fatalf("journaling created over another writer's later write: %v", err)
	}
	got := getInstance(t, c)
	if got.Status.Audit == nil || got.Status.Audit.NextSequence != 2 || got.Status.Conditions[0].Message != "still waits" {
		t.Fatalf("status %+v, want the journal started and the other writer's message kept", got.Status)
	}
	// Positive control: the same read again would number "created" twice.
	if err := r.observe(ctx, read.DeepCopy()); !apierrors.IsConflict(err) {
		t.Fatalf("a second first write: %v, want a Conflict", err)
	}
	if got := getInstance(t, c); got.Status.Audit.NextSequence != 2 || len(got.Status.Audit.Records) != 1 {
		t.Errorf("journal %+v after the refused write, want it unchanged", got.Status.Audit)
	}
}
