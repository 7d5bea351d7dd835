package conflict_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/boualleiguie/macrack-operator/internal/conflict"
	"github.com/boualleiguie/macrack-operator/internal/finalizer"
)

// entry is one log call a recordingSink saw.
type entry struct {
	msg   string
	level int
	err   error
}

// recordingSink is a logr.LogSink that keeps every call, at every level,
// so that a test can assert what was logged at error level.
type recordingSink struct {
	mu      *sync.Mutex
	entries *[]entry
}

func newRecordingSink() recordingSink {
	return recordingSink{mu: &sync.Mutex{}, entries: &[]entry{}}
}

func (s recordingSink) Init(logr.RuntimeInfo)          {}
func (s recordingSink) Enabled(int) bool               { return true }
func (s recordingSink) WithValues(...any) logr.LogSink { return s }
func (s recordingSink) WithName(string) logr.LogSink   { return s }
func (s recordingSink) Info(level int, msg string, _ ...any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	*s.entries = append(*s.entries, entry{msg: msg, level: level})
}
func (s recordingSink) Error(err error, msg string, _ ...any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	*s.entries = append(*s.entries, entry{msg: msg, level: -1, err: err})
}

func (s recordingSink) snapshot() []entry {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]entry(nil), *s.entries...)
}

// finalizerAdder is a reconciler of the usual shape: it adds a finalizer
// with an Update, and returns the write's error, wrapped.
type finalizerAdder struct{ client client.Client }

const testFinalizer = "macrack.io/test"

func (r *finalizerAdder) Reconcile(ctx context.Context, req reconcile.Request) (ctrl.Result, error) {
	cm := &corev1.ConfigMap{}
	if err := r.client.Get(ctx, req.NamespacedName, cm); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if controllerutil.AddFinalizer(cm, testFinalizer) {
		if err := r.client.Update(ctx, cm); err != nil {
			return ctrl.Result{}, fmt.Errorf("adding the %s finalizer to %s: %w", testFinalizer, req, err)
		}
	}
	return ctrl.Result{}, nil
}

// run starts a real controller (controller-runtime's queue, backoff and
// "Reconciler error" logging) over wrap(reconciler), on a fake client
// whose first two Updates conflict, enqueues one ConfigMap, and returns
// what was logged once the finalizer is on.
func run(t *testing.T, wrap func(reconcile.Reconciler) reconcile.Reconciler) []entry {
	t.Helper()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "cm"}}
	conflicts := 2
	var mu sync.Mutex
	c := fake.NewClientBuilder().WithObjects(cm).WithInterceptorFuncs(interceptor.Funcs{
		Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			mu.Lock()
			defer mu.Unlock()
			if conflicts > 0 {
				conflicts--
				return apierrors.NewConflict(schema.GroupResource{Resource: "configmaps"}, obj.GetName(),
					fmt.Errorf("the object has been modified; please apply your changes to the latest version and try again"))
			}
			return c.Update(ctx, obj, opts...)
		},
	}).Build()

	sink := newRecordingSink()
	// The manager never reaches an API server: its one source is a
	// channel, and the reconciler's client is the fake.
	mgr, err := ctrl.NewManager(&rest.Config{Host: "http://127.0.0.1:1"}, ctrl.Options{
		Logger:                 logr.New(sink),
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
	})
	if err != nil {
		t.Fatal(err)
	}
	events := make(chan event.GenericEvent, 1)
	if err := ctrl.NewControllerManagedBy(mgr).Named("conflicts").
		// Two tests, one name: each has its own manager.
		WithOptions(controller.Options{SkipNameValidation: ptr.To(true)}).
		WatchesRawSource(source.Channel(events, &handler.EnqueueRequestForObject{})).
		Complete(wrap(&finalizerAdder{client: c})); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("manager: %v", err)
		}
	}()
	events <- event.GenericEvent{Object: cm}

	deadline := time.Now().Add(30 * time.Second)
	for {
		got := &corev1.ConfigMap{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(cm), got); err != nil {
			t.Fatal(err)
		}
		if controllerutil.ContainsFinalizer(got, testFinalizer) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the ConfigMap never got its finalizer; logged %+v", sink.snapshot())
		}
		time.Sleep(10 * time.Millisecond)
	}
	return sink.snapshot()
}

func errorLevel(entries []entry) []entry {
	var out []entry
	for _, e := range entries {
		if e.level < 0 {
			out = append(out, e)
		}
	}
	return out
}

func TestAConflictThatARetryResolvesLogsNoError(t *testing.T) {
	entries := run(t, conflict.Quiet)
	if errs := errorLevel(entries); len(errs) != 0 {
		t.Errorf("a conflict that a retry resolved was logged at error level: %+v", errs)
	}
	retries := 0
	for _, e := range entries {
		if e.msg == "Lost an optimistic-concurrency race; retrying" {
			if e.level != 1 {
				t.Errorf("the retry is logged at V(%d), want V(1)", e.level)
			}
			retries++
		}
	}
	if retries != 2 {
		t.Errorf("logged %d retries at V(1), want one a conflict (2): %+v", retries, entries)
	}
}

// The positive control: the same reconciler, unwrapped, converges too,
// and controller-runtime logs each conflict as a "Reconciler error".
func TestAnUnwrappedConflictIsAReconcilerError(t *testing.T) {
	errs := errorLevel(run(t, func(r reconcile.Reconciler) reconcile.Reconciler { return r }))
	if len(errs) != 2 {
		t.Fatalf("logged %d errors, want the 2 conflicts: %+v", len(errs), errs)
	}
	for _, e := range errs {
		if e.msg != "Reconciler error" || !apierrors.IsConflict(e.err) {
			t.Errorf("logged %q (%v), want a Reconciler error of a conflict", e.msg, e.err)
		}
	}
}

func TestIs(t *testing.T) {
	c := apierrors.NewConflict(schema.GroupResource{Resource: "macnodes"}, "n", fmt.Errorf("modified"))
	// A finalizer's JSON patch whose test failed: the API server's 422 for
	// a patch that did not apply.
	untested := apierrors.NewGenericServerResponse(422, "", schema.GroupResource{}, "", "testing value /metadata/finalizers failed", 0, false)
	raced := fake.NewClientBuilder().WithInterceptorFuncs(interceptor.Funcs{
		Patch: func(context.Context, client.WithWatch, client.Object, client.Patch, ...client.PatchOption) error {
			return untested
		},
	}).Build()
	lost := finalizer.Remove(context.Background(), raced, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "c", Finalizers: []string{"macrack.io/audit"}}}, "macrack.io/audit")
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"a conflict is one", c, true},
		{"a wrapped conflict is one", fmt.Errorf("adding the finalizer: %w", c), true},
		{"a terminal conflict is not retried", reconcile.TerminalError(c), false},
		{"a lost finalizer race is one", lost, true},
		{"the 422 behind it, unread, is not one", untested, false},
		{"a not-found is not one", apierrors.NewNotFound(schema.GroupResource{Resource: "macnodes"}, "n"), false},
		{"no error is not one", nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := conflict.Is(tc.err); got != tc.want {
				t.Errorf("Is(%v) = %v, want %v", tc.err, got, tc.want)
			}
		})
	}
}

// scripted is a reconciler that returns, pass by pass, the errors it was
// given, then nil.
type scripted struct{ errs []error }

func (s *scripted) Reconcile(context.Context, reconcile.Request) (ctrl.Result, error) {
	if len(s.errs) == 0 {
		return ctrl.Result{}, nil
	}
	err := s.errs[0]
	s.errs = s.errs[1:]
	return ctrl.Result{}, err
}

func TestANotFoundThatARetryResolvesIsNoError(t *testing.T) {
	gone := fmt.Errorf("placing i on n: %w", apierrors.NewNotFound(schema.GroupResource{Resource: "macosinstances"}, "i"))
	r := conflict.Quiet(&scripted{errs: []error{gone, gone}})
	req := reconcile.Request{}
	for pass := 0; pass < 3; pass++ {
		res, err := r.Reconcile(context.Background(), req)
		if err != nil {
			t.Fatalf("pass %d returned %v, want a quiet requeue", pass, err)
		}
		if wantRequeue := pass < 2; (res.RequeueAfter > 0) != wantRequeue {
			t.Errorf("pass %d: RequeueAfter %v, want a requeue: %v", pass, res.RequeueAfter, wantRequeue)
		}
	}
}

// The positive control: a NotFound that outlives the retries is an error,
// and stays one until a pass succeeds.
func TestANotFoundThatPersistsIsAnError(t *testing.T) {
	gone := apierrors.NewNotFound(schema.GroupResource{Resource: "macnodes"}, "n")
	errs := make([]error, 8)
	for i := range errs {
		errs[i] = gone
	}
	r := conflict.Quiet(&scripted{errs: errs})
	var loud []int
	for pass := 0; pass < 9; pass++ {
		if _, err := r.Reconcile(context.Background(), reconcile.Request{}); err != nil {
			if !apierrors.IsNotFound(err) {
				t.Fatalf("pass %d returned %v, want the NotFound itself", pass, err)
			}
			loud = append(loud, pass)
		}
	}
	if want := []int{5, 6, 7}; fmt.Sprint(loud) != fmt.Sprint(want) {
		t.Errorf("passes returning the NotFound: %v, want %v", loud, want)
	}
	// A terminal NotFound is never retried.
	term := reconcile.TerminalError(gone)
	if _, err := conflict.Quiet(&scripted{errs: []error{term}}).Reconcile(context.Background(), reconcile.Request{}); err == nil {
		t.Error("a terminal NotFound was swallowed")
	}
}

func TestUntested(t *testing.T) {
	failed := apierrors.NewGenericServerResponse(422, "", schema.GroupResource{}, "", "testing value /metadata/finalizers failed: test failed", 0, false)
	if !conflict.Untested(failed) {
		t.Errorf("a JSON patch that did not apply is a race: %v", failed)
	}
	// Positive controls: other 422s are refusals, not races.
	invalid := apierrors.NewInvalid(schema.GroupKind{Kind: "ConfigMap"}, "cm", field.ErrorList{field.Invalid(field.NewPath("metadata", "finalizers"), "x", "bad")})
	denied := apierrors.NewInvalid(schema.GroupKind{Kind: "ConfigMap"}, "cm", field.ErrorList{field.Forbidden(field.NewPath(""), "denied request: agent.scope: no")})
	for _, err := range []error{invalid, denied, apierrors.NewConflict(schema.GroupResource{}, "cm", fmt.Errorf("stale")), nil} {
		if conflict.Untested(err) {
			t.Errorf("not a race: %v", err)
		}
	}
}
