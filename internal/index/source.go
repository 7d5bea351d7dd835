package index

import (
	"context"
	"fmt"

	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"
)

// Source is a controller source that feeds c from the informer of obj's
// kind. changed, if not nil, is given the controller's queue and returns
// the callback for each key whose count moved (see Handler). The
// controller's workers wait for the registration to sync, so a pass never
// reads the count of half a fleet.
func (c *Count) Source(informers cache.Informers, obj client.Object, name string,
	changed func(workqueue.TypedRateLimitingInterface[reconcile.Request]) func(key string)) source.SyncingSource {
	return &countSource{informers: informers, obj: obj, name: name, count: c, changed: changed, started: make(chan struct{})}
}

type countSource struct {
	informers cache.Informers
	obj       client.Object
	name      string
	count     *Count
	changed   func(workqueue.TypedRateLimitingInterface[reconcile.Request]) func(key string)
	started   chan struct{} // closed once synced is set
	synced    func() bool
}

func (s *countSource) Start(ctx context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
	inf, err := s.informers.GetInformer(ctx, s.obj)
	if err != nil {
		return fmt.Errorf("getting the informer of %s: %w", s.name, err)
	}
	var changed func(string)
	if s.changed != nil {
		changed = s.changed(q)
	}
	reg, err := inf.AddEventHandler(s.count.Handler(changed))
	if err != nil {
		return fmt.Errorf("counting %s: %w", s.name, err)
	}
	s.synced = reg.HasSynced
	close(s.started)
	return nil
}

func (s *countSource) WaitForSync(ctx context.Context) error {
	select {
	case <-s.started:
	case <-ctx.Done():
		return ctx.Err()
	}
	if !toolscache.WaitForCacheSync(ctx.Done(), s.synced) {
		return fmt.Errorf("waiting for the count of %s to sync: %w", s.name, ctx.Err())
	}
	return nil
}

func (s *countSource) String() string { return s.name }
