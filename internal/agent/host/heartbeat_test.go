package host

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
)

// levels is a logr.LogSink that keeps the level of each call: -1 for an
// error.
type levels struct {
	mu   *sync.Mutex
	seen *[]int
}

func (l levels) Init(logr.RuntimeInfo)              {}
func (l levels) Enabled(int) bool                   { return true }
func (l levels) WithValues(...any) logr.LogSink     { return l }
func (l levels) WithName(string) logr.LogSink       { return l }
func (l levels) Info(level int, _ string, _ ...any) { l.add(level) }
func (l levels) Error(error, string, ...any)        { l.add(-1) }
func (l levels) add(v int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	*l.seen = append(*l.seen, v)
}

// A renewal that conflicts is settled by the next beat, which reads the
// Lease afresh; it is no error. Any other failure is.
func TestAHeartbeatConflictIsRetriedQuietly(t *testing.T) {
	ctx := context.Background()
	clk := clocktesting.NewFakeClock(time.Date(2026, 12, 6, 20, 0, 0, 0, time.UTC))
	lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: HeartbeatNamespace, Name: "c02sim000001"},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("c02sim000001")}}
	var fail error
	c := fake.NewClientBuilder().WithObjects(lease).WithInterceptorFuncs(interceptor.Funcs{
		Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			if err := fail; err != nil {
				fail = nil
				return err
			}
			return c.Update(ctx, obj, opts...)
		},
	}).Build()
	seen := &[]int{}
	h := &Heartbeat{Client: c, NodeName: "c02sim000001", Interval: 5 * time.Second, Clock: clk,
		Log: logr.New(levels{mu: &sync.Mutex{}, seen: seen})}

	fail = apierrors.NewConflict(schema.GroupResource{Group: "coordination.k8s.io", Resource: "leases"}, lease.Name, errors.New("the object has been modified"))
	h.beatAndLog(ctx)
	if len(*seen) != 1 || (*seen)[0] != 1 {
		t.Fatalf("a conflict logged at levels %v, want one V(1) line", *seen)
	}
	clk.Step(5 * time.Second)
	h.beatAndLog(ctx)
	got := &coordinationv1.Lease{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(lease), got); err != nil {
		t.Fatal(err)
	}
	if got.Spec.RenewTime == nil || !got.Spec.RenewTime.Time.Equal(clk.Now()) {
		t.Fatalf("the next beat did not renew the Lease: %v", got.Spec.RenewTime)
	}
	if len(*seen) != 1 {
		t.Errorf("the beat after the conflict logged %v", (*seen)[1:])
	}

	// The positive control: a refusal is an error.
	fail = apierrors.NewForbidden(schema.GroupResource{Group: "coordination.k8s.io", Resource: "leases"}, lease.Name, errors.New("no"))
	h.beatAndLog(ctx)
	if len(*seen) != 2 || (*seen)[1] != -1 {
		t.Errorf("a forbidden renewal logged at levels %v, want an error", *seen)
	}
}

// A beat renews the Lease and writes nothing else: the operator sets the
// Node's Ready condition from the Lease, kube-controller-manager marks it
// Unknown when the Lease goes stale, and the agent is neither.
func TestABeatWritesTheLeaseAndNoNode(t *testing.T) {
	ctx := context.Background()
	clk := clocktesting.NewFakeClock(time.Date(2026, 12, 6, 20, 0, 0, 0, time.UTC))
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "c02sim000001"}}
	var writes []string
	record := func(obj client.Object) { writes = append(writes, fmt.Sprintf("%T", obj)) }
	c := fake.NewClientBuilder().WithObjects(node).WithInterceptorFuncs(interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			record(obj)
			return c.Create(ctx, obj, opts...)
		},
		Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			record(obj)
			return c.Update(ctx, obj, opts...)
		},
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			record(obj)
			return c.Patch(ctx, obj, patch, opts...)
		},
		SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
			record(obj)
			return c.SubResource(sub).Update(ctx, obj, opts...)
		},
		SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
			record(obj)
			return c.SubResource(sub).Patch(ctx, obj, patch, opts...)
		},
	}).Build()
	h := &Heartbeat{Client: c, NodeName: node.Name, Interval: 5 * time.Second, Clock: clk, Log: logr.Discard()}
	for range 3 {
		if err := h.Beat(ctx); err != nil {
			t.Fatal(err)
		}
		clk.Step(5 * time.Second)
	}
	// The positive control: the interceptor sees the Lease's create and
	// its two renewals.
	want := []string{"*v1.Lease", "*v1.Lease", "*v1.Lease"}
	if !slices.Equal(writes, want) {
		t.Errorf("writes %v, want %v", writes, want)
	}
	got := &corev1.Node{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(node), got); err != nil {
		t.Fatal(err)
	}
	if len(got.Status.Conditions) != 0 {
		t.Errorf("the agent wrote its Node's conditions: %+v", got.Status.Conditions)
	}
}
