package host

import (
	"context"
	"errors"
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
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "c02sim000001"},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}}}
	var fail error
	c := fake.NewClientBuilder().WithObjects(lease, node).WithInterceptorFuncs(interceptor.Funcs{
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
