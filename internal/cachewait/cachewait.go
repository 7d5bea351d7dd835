// Package cachewait makes a controller read its own writes. After each
// write of a cached kind succeeds, the client waits until the manager's
// informer cache shows it (the object's resourceVersion at least the one
// the write returned, or the object gone) before the reconcile goes on.
//
// Without it, a reconcile that runs again before the cache has seen its
// own last write acts on the read from before it, and writes again what it
// wrote already: the same finalizer removed twice, the same status written
// again on a stale resourceVersion and refused with a conflict, the same
// cursor advanced twice, the same placeholder Pod created twice. Each is
// one more request for the API server and one more event for everyone who
// watches (issue 17). The wait is bounded: a cache that does not catch up
// in time is no error, only the repeat it would have prevented.
package cachewait

import (
	"context"
	"strconv"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
)

// DefaultTimeout bounds one wait for the cache.
const DefaultTimeout = 2 * time.Second

// The cache is looked at after firstPoll, then twice as long after each
// look, up to maxPoll. A look is memory, but a saturated API server's
// watches lag by a second or more: at a fixed 2 ms, a thousand agents
// waiting each spent more CPU looking than the writes cost (BENCHMARKS.md,
// "Fleet scale").
const (
	firstPoll = 2 * time.Millisecond
	maxPoll   = 32 * time.Millisecond
)

// New wraps c so that its writes of the given kinds, which cache holds
// informers for, wait for cache to show them. Writes of other kinds go
// through as they are: reading them from the cache would start informers.
func New(c client.Client, cache client.Reader, timeout time.Duration, kinds ...client.Object) (client.Client, error) {
	w := &waiting{Client: c, cache: cache, timeout: timeout, kinds: map[schema.GroupVersionKind]bool{}}
	for _, k := range kinds {
		gvk, err := apiutil.GVKForObject(k, c.Scheme())
		if err != nil {
			return nil, err
		}
		w.kinds[gvk] = true
	}
	return w, nil
}

type waiting struct {
	client.Client
	cache   client.Reader
	timeout time.Duration
	kinds   map[schema.GroupVersionKind]bool
}

func (w *waiting) Create(ctx context.Context, obj client.Object, opts ...client.CreateOption) error {
	return w.written(ctx, obj, w.Client.Create(ctx, obj, opts...))
}

func (w *waiting) Update(ctx context.Context, obj client.Object, opts ...client.UpdateOption) error {
	return w.written(ctx, obj, w.Client.Update(ctx, obj, opts...))
}

func (w *waiting) Patch(ctx context.Context, obj client.Object, p client.Patch, opts ...client.PatchOption) error {
	return w.written(ctx, obj, w.Client.Patch(ctx, obj, p, opts...))
}

func (w *waiting) Delete(ctx context.Context, obj client.Object, opts ...client.DeleteOption) error {
	if err := w.Client.Delete(ctx, obj, opts...); err != nil {
		return err
	}
	w.wait(ctx, obj, true, false)
	return nil
}

func (w *waiting) Status() client.SubResourceWriter { return w.SubResource("status") }

func (w *waiting) SubResource(name string) client.SubResourceClient {
	return &subResource{SubResourceClient: w.Client.SubResource(name), w: w}
}

type subResource struct {
	client.SubResourceClient
	w *waiting
}

func (s *subResource) Create(ctx context.Context, obj, sub client.Object, opts ...client.SubResourceCreateOption) error {
	return s.w.written(ctx, obj, s.SubResourceClient.Create(ctx, obj, sub, opts...))
}

func (s *subResource) Update(ctx context.Context, obj client.Object, opts ...client.SubResourceUpdateOption) error {
	return s.w.written(ctx, obj, s.SubResourceClient.Update(ctx, obj, opts...))
}

func (s *subResource) Patch(ctx context.Context, obj client.Object, p client.Patch, opts ...client.SubResourcePatchOption) error {
	return s.w.written(ctx, obj, s.SubResourceClient.Patch(ctx, obj, p, opts...))
}

// written waits after a write: for the cache to show it, or, after a
// conflict, for the cache to show the write that won, so that the retry
// reads it rather than refused again on the same stale resourceVersion.
func (w *waiting) written(ctx context.Context, obj client.Object, err error) error {
	switch {
	case err == nil:
		w.wait(ctx, obj, false, false)
	case apierrors.IsConflict(err):
		w.wait(ctx, obj, false, true)
	}
	return err
}

// wait returns once the cache shows obj at the resourceVersion the write
// returned or later, or gone; after a delete, once it shows obj deleting
// or gone. After a conflict, obj holds the resourceVersion the write was
// refused on, and it waits for a later one. The API server's
// resourceVersions are etcd revisions, which grow; one that is not a
// number is not waited for.
func (w *waiting) wait(ctx context.Context, obj client.Object, deleted, conflict bool) {
	gvk, err := apiutil.GVKForObject(obj, w.Scheme())
	if err != nil || !w.kinds[gvk] {
		return
	}
	want, err := strconv.ParseUint(obj.GetResourceVersion(), 10, 64)
	if err != nil && !deleted {
		return
	}
	if conflict {
		want++
	}
	key := client.ObjectKeyFromObject(obj)
	fresh, ok := obj.DeepCopyObject().(client.Object)
	if !ok {
		return
	}
	// A write that took the last finalizer off a deleting object deleted
	// it: its absence from the cache is what to wait for then. Otherwise
	// an absent object is one the cache has not seen yet (a create).
	gone := deleted || !obj.GetDeletionTimestamp().IsZero() && len(obj.GetFinalizers()) == 0
	shown := func() bool {
		// Only the metadata is read: the cache's own object, uncopied.
		if err := w.cache.Get(ctx, key, fresh, client.UnsafeDisableDeepCopy); err != nil {
			return gone && apierrors.IsNotFound(err)
		}
		if fresh.GetUID() != obj.GetUID() && obj.GetUID() != "" {
			return true // another object of that name: ours is gone
		}
		switch {
		case deleted:
			return !fresh.GetDeletionTimestamp().IsZero()
		case gone:
			return false // the response's resourceVersion may be the last one stored
		}
		got, err := strconv.ParseUint(fresh.GetResourceVersion(), 10, 64)
		return err != nil || got >= want
	}
	ctx, cancel := context.WithTimeout(ctx, w.timeout)
	defer cancel()
	for delay := firstPoll; !shown(); delay = min(2*delay, maxPoll) {
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}
