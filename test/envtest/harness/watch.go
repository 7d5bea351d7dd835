package harness

import (
	"context"
	"sync"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
	leasingv1alpha1 "github.com/boualleiguie/macrack-operator/api/leasing/v1alpha1"
)

// BindingsSeen is what a BindingWatcher observed.
type BindingsSeen struct {
	// MaxBoundLeases is the most leases of the class seen Bound at once.
	MaxBoundLeases int
	// Rebinds counts MacNode bindings that moved from one lease to another
	// without being cleared in between.
	Rebinds int
	// DoubleBindings counts the times a lease UID was seen in the bindings
	// of two MacNodes at once.
	DoubleBindings int
	// LeasesBound counts the lease UIDs ever seen in a MacNode's binding.
	LeasesBound int
}

// BindingWatcher watches every lease and MacNode of one class.
type BindingWatcher struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
	mu     sync.Mutex
	bound  map[types.UID]bool
	owner  map[string]types.UID
	// holders counts the MacNodes whose binding names each lease UID.
	holders map[types.UID]int
	ever    map[types.UID]bool
	seen    BindingsSeen
}

// WatchBindings starts watching leases and MacNodes of class through the
// API server (not a cache), so that every intermediate state is seen.
func WatchBindings(ctx context.Context, e *Env, class string) *BindingWatcher {
	ctx, cancel := context.WithCancel(ctx)
	w := &BindingWatcher{cancel: cancel, bound: map[types.UID]bool{}, owner: map[string]types.UID{}, holders: map[types.UID]int{}, ever: map[types.UID]bool{}}
	c, err := client.NewWithWatch(e.Config, client.Options{Scheme: e.Scheme})
	if err != nil {
		panic(err)
	}
	leases, err := c.Watch(ctx, &leasingv1alpha1.MacNodeLeaseList{})
	if err != nil {
		panic(err)
	}
	nodes, err := c.Watch(ctx, &fleetv1alpha1.MacNodeList{})
	if err != nil {
		panic(err)
	}
	w.wg.Add(2)
	go w.run(leases, func(ev watch.Event) {
		l, ok := ev.Object.(*leasingv1alpha1.MacNodeLease)
		if !ok || l.Spec.NodeClassName != class {
			return
		}
		w.bound[l.UID] = ev.Type != watch.Deleted && l.Status.Phase == leasingv1alpha1.LeaseBound
		n := 0
		for _, b := range w.bound {
			if b {
				n++
			}
		}
		w.seen.MaxBoundLeases = max(w.seen.MaxBoundLeases, n)
	})
	go w.run(nodes, func(ev watch.Event) {
		n, ok := ev.Object.(*fleetv1alpha1.MacNode)
		if !ok || n.Spec.NodeClassName != class {
			return
		}
		var uid types.UID
		if n.Status.Binding != nil {
			uid = n.Status.Binding.LeaseUID
		}
		if prev := w.owner[n.Name]; prev != "" && uid != "" && prev != uid {
			w.seen.Rebinds++
		}
		if ev.Type == watch.Deleted {
			uid = ""
		}
		if prev := w.owner[n.Name]; prev != uid {
			if prev != "" {
				w.holders[prev]--
			}
			if uid != "" {
				w.holders[uid]++
				if w.holders[uid] > 1 {
					w.seen.DoubleBindings++
				}
				if !w.ever[uid] {
					w.ever[uid] = true
					w.seen.LeasesBound++
				}
			}
		}
		w.owner[n.Name] = uid
	})
	return w
}

func (w *BindingWatcher) run(wi watch.Interface, f func(watch.Event)) {
	defer w.wg.Done()
	defer wi.Stop()
	for ev := range wi.ResultChan() {
		w.mu.Lock()
		f(ev)
		w.mu.Unlock()
	}
}

// Stop ends the watch and returns what it saw.
func (w *BindingWatcher) Stop() BindingsSeen {
	w.cancel()
	w.wg.Wait()
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.seen
}
