package cachewait

import (
	"context"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	leasingv1alpha1 "github.com/boualleiguie/macrack-operator/api/leasing/v1alpha1"
)

// lagging is a cache that shows the API server's objects only once
// catchUp is called, as an informer shows them once their watch event
// arrives; it counts its reads.
type lagging struct {
	mu    sync.Mutex
	api   client.Client
	seen  map[client.ObjectKey]client.Object
	reads int
	// uncopied: a read asked for the cache's own object (UnsafeDisableDeepCopy).
	uncopied bool
}

func (l *lagging) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.reads++
	var o client.GetOptions
	o.ApplyOptions(opts)
	l.uncopied = o.UnsafeDisableDeepCopy != nil && *o.UnsafeDisableDeepCopy
	seen, ok := l.seen[key]
	if !ok {
		return l.api.Get(ctx, client.ObjectKey{Namespace: "-", Name: "-"}, obj) // not found, in the API's words
	}
	b, _ := runtime.DefaultUnstructuredConverter.ToUnstructured(seen)
	return runtime.DefaultUnstructuredConverter.FromUnstructured(b, obj)
}

func (l *lagging) List(context.Context, client.ObjectList, ...client.ListOption) error { return nil }

// catchUp shows the API server's object at key now, or its absence.
func (l *lagging) catchUp(ctx context.Context, key client.ObjectKey) {
	l.mu.Lock()
	defer l.mu.Unlock()
	o := &leasingv1alpha1.MacNodeLease{}
	if err := l.api.Get(ctx, key, o); err != nil {
		delete(l.seen, key)
		return
	}
	l.seen[key] = o
}

func setup(t *testing.T) (client.Client, *lagging, client.WithWatch) {
	t.Helper()
	scheme := runtime.NewScheme()
	_ = leasingv1alpha1.AddToScheme(scheme)
	_ = corev1.AddToScheme(scheme)
	api := fake.NewClientBuilder().WithScheme(scheme).WithStatusSubresource(&leasingv1alpha1.MacNodeLease{}).Build()
	cache := &lagging{api: api, seen: map[client.ObjectKey]client.Object{}}
	c, err := New(api, cache, time.Second, &leasingv1alpha1.MacNodeLease{})
	if err != nil {
		t.Fatal(err)
	}
	return c, cache, api
}

// after runs write, and has the cache catch up after delay: it returns how
// long write took.
func after(ctx context.Context, cache *lagging, key client.ObjectKey, delay time.Duration, write func() error) (time.Duration, error) {
	// Taken before the catch-up's clock starts, so that a write that
	// waited for it can never seem to have taken less than delay.
	start := time.Now()
	go func() {
		time.Sleep(delay)
		cache.catchUp(ctx, key)
	}()
	err := write()
	return time.Since(start), err
}

func TestAWriteReturnsOnceTheCacheShowsIt(t *testing.T) {
	ctx := context.Background()
	c, cache, _ := setup(t)
	l := &leasingv1alpha1.MacNodeLease{ObjectMeta: metav1.ObjectMeta{Name: "l", Namespace: "t"}}
	key := client.ObjectKeyFromObject(l)
	const delay = 100 * time.Millisecond
	// In order: a create, then writes of what it created.
	for _, step := range []struct {
		name  string
		write func() error
	}{
		{"create", func() error { return c.Create(ctx, l) }},
		{"patch", func() error {
			base := l.DeepCopy()
			l.Finalizers = []string{"example.com/f"}
			return c.Patch(ctx, l, client.MergeFrom(base))
		}},
		{"status patch", func() error {
			base := l.DeepCopy()
			l.Status.Phase = leasingv1alpha1.LeaseBound
			return c.Status().Patch(ctx, l, client.MergeFrom(base))
		}},
		{"update", func() error { l.Spec.MinimumDuration = "48h"; return c.Update(ctx, l) }},
	} {
		took, err := after(ctx, cache, key, delay, step.write)
		if err != nil {
			t.Fatalf("%s: %v", step.name, err)
		}
		if took < delay {
			t.Fatalf("%s returned after %s, before the cache showed it (%s)", step.name, took, delay)
		}
		if took > delay+500*time.Millisecond { // the timeout is a second
			t.Fatalf("%s returned after %s: it waited past the cache", step.name, took)
		}
	}

	// The last finalizer off a deleting object deletes it: the wait is for
	// its absence, whatever resourceVersion the response carries.
	took, err := after(ctx, cache, key, delay, func() error { return c.Delete(ctx, l) })
	if err != nil || took < delay || took > delay+500*time.Millisecond {
		t.Fatalf("the delete returned after %s (err %v); want once the cache shows the lease deleting, after %s", took, err, delay)
	}
	took, err = after(ctx, cache, key, delay, func() error {
		cur := &leasingv1alpha1.MacNodeLease{}
		if err := c.Get(ctx, key, cur); err != nil {
			return err
		}
		base := cur.DeepCopy()
		cur.Finalizers = nil
		return c.Patch(ctx, cur, client.MergeFrom(base))
	})
	if err != nil || took < delay || took > delay+500*time.Millisecond {
		t.Fatalf("the finalizer's removal returned after %s (err %v); want once the cache shows the lease gone, after %s", took, err, delay)
	}
}

func TestAConflictWaitsForTheWriteThatWon(t *testing.T) {
	ctx := context.Background()
	c, cache, api := setup(t)
	l := &leasingv1alpha1.MacNodeLease{ObjectMeta: metav1.ObjectMeta{Name: "l", Namespace: "t"}}
	if err := api.Create(ctx, l); err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKeyFromObject(l)
	cache.catchUp(ctx, key)
	stale := l.DeepCopy()
	// Another writer wins.
	won := l.DeepCopy()
	won.Spec.NodeClassName = "other"
	if err := api.Update(ctx, won); err != nil {
		t.Fatal(err)
	}
	const delay = 100 * time.Millisecond
	took, err := after(ctx, cache, key, delay, func() error {
		stale.Spec.MinimumDuration = "48h"
		return c.Update(ctx, stale)
	})
	if err == nil {
		t.Fatal("a write on a stale resourceVersion went through")
	}
	if took < delay {
		t.Fatalf("the conflict returned after %s, before the cache showed the write that won", took)
	}
}

func TestOtherKindsAndFailedWritesDoNotWait(t *testing.T) {
	ctx := context.Background()
	c, cache, _ := setup(t)
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "t"}}
	if err := c.Create(ctx, p); err != nil {
		t.Fatal(err)
	}
	if err := c.Create(ctx, p.DeepCopy()); err == nil {
		t.Fatal("created twice")
	}
	l := &leasingv1alpha1.MacNodeLease{ObjectMeta: metav1.ObjectMeta{Name: "missing", Namespace: "t"}}
	if err := c.Delete(ctx, l); err == nil {
		t.Fatal("deleted what does not exist")
	}
	if cache.reads != 0 {
		t.Fatalf("the cache was read %d times: a Pod is not a kind it waits for, and a failed write waits for nothing", cache.reads)
	}
}

func TestACacheThatNeverCatchesUpIsWaitedForBoundedly(t *testing.T) {
	ctx := context.Background()
	scheme := runtime.NewScheme()
	_ = leasingv1alpha1.AddToScheme(scheme)
	api := fake.NewClientBuilder().WithScheme(scheme).Build()
	cache := &lagging{api: api, seen: map[client.ObjectKey]client.Object{}}
	c, err := New(interceptor.NewClient(api, interceptor.Funcs{}), cache, 50*time.Millisecond, &leasingv1alpha1.MacNodeLease{})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := c.Create(ctx, &leasingv1alpha1.MacNodeLease{ObjectMeta: metav1.ObjectMeta{Name: "l", Namespace: "t"}}); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > time.Second {
		t.Fatalf("waited %s for a cache that never caught up, past the 50ms bound", took)
	}
}

// A saturated API server's watches lag: the wait looks at the cache less
// often the longer it waits, and never copies the cached object.
func TestALongWaitLooksAtTheCacheSparingly(t *testing.T) {
	ctx := context.Background()
	c, cache, _ := setup(t)
	l := &leasingv1alpha1.MacNodeLease{ObjectMeta: metav1.ObjectMeta{Name: "l", Namespace: "t"}}
	const delay = 600 * time.Millisecond
	if _, err := after(ctx, cache, client.ObjectKeyFromObject(l), delay, func() error { return c.Create(ctx, l) }); err != nil {
		t.Fatal(err)
	}
	cache.mu.Lock()
	defer cache.mu.Unlock()
	// 2, 4, ..., 32 ms, then every 32 ms: about 23 looks in 600 ms. At a
	// fixed 2 ms it was about 300.
	if cache.reads < 2 || cache.reads > 40 {
		t.Fatalf("the cache was read %d times in %s; want between 2 and 40", cache.reads, delay)
	}
	if !cache.uncopied {
		t.Fatal("the wait asked the cache for a copy of the object: it reads only its metadata")
	}
}
