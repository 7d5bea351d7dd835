package scale

import (
	"context"
	"fmt"
	"sync"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
	leasingv1alpha1 "github.com/boualleiguie/macrack-operator/api/leasing/v1alpha1"
)

// leaseSeen is what the watch saw of one lease.
type leaseSeen struct {
	namespace, name string
	phase           leasingv1alpha1.MacNodeLeasePhase
	// reason is the Bound condition's reason, as last seen.
	reason string
	// boundEntries counts the changes of the phase to Bound.
	boundEntries int
	// nodeNames are the distinct status.nodeName values seen, in order.
	nodeNames []string
	gone      bool
}

// nodeSeen is what the watch saw of one MacNode.
type nodeSeen struct {
	phase fleetv1alpha1.MacNodePhase
	// owner is the lease UID its binding names now, or "".
	owner types.UID
	// leases are the lease UIDs its binding named, one entry per binding.
	leases []types.UID
	// freed: its binding was cleared, and it has not been bound since;
	// sawReady: it was seen Ready and unbound since.
	freed, sawReady bool
	// readyRebinds counts the bindings after a release that followed a
	// Ready, unbound state.
	readyRebinds int
}

// recorder watches every lease and MacNode of one class through the API
// server (not a cache), from before the first lease is created, so that it
// sees every intermediate state; a watch the API server ends is resumed
// from the last resourceVersion seen, which loses no event. It records
// every violation of one chassis per lease and one lease per chassis.
type recorder struct {
	class  string
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu     sync.Mutex
	leases map[types.UID]*leaseSeen
	nodes  map[string]*nodeSeen
	// holders are the MacNodes whose binding names each lease UID now;
	// everNodes every MacNode whose binding ever named it.
	holders, everNodes map[types.UID]map[string]bool
	violations         []string
	// resumed counts the watches resumed after the API server ended them.
	resumed int
	events  int
}

func startRecorder(class string) (*recorder, error) {
	wctx, cancel := context.WithCancel(ctx)
	r := &recorder{class: class, cancel: cancel, leases: map[types.UID]*leaseSeen{}, nodes: map[string]*nodeSeen{},
		holders: map[types.UID]map[string]bool{}, everNodes: map[types.UID]map[string]bool{}}
	c := env.WatchClient()
	for _, w := range []struct {
		list client.ObjectList
		on   func(watch.EventType, client.Object)
	}{{&leasingv1alpha1.MacNodeLeaseList{}, r.onLease}, {&fleetv1alpha1.MacNodeList{}, r.onNode}} {
		// List, then watch from the list's resourceVersion.
		if err := c.List(wctx, w.list); err != nil {
			cancel()
			return nil, err
		}
		items, err := meta.ExtractList(w.list)
		if err != nil {
			cancel()
			return nil, err
		}
		r.mu.Lock()
		for _, item := range items {
			w.on(watch.Added, item.(client.Object))
		}
		r.mu.Unlock()
		rv := w.list.GetResourceVersion()
		wi, err := c.Watch(wctx, w.list, watchFrom(rv))
		if err != nil {
			cancel()
			return nil, err
		}
		r.wg.Add(1)
		go r.run(wctx, c, w.list, rv, wi, w.on)
	}
	return r, nil
}

func watchFrom(rv string) client.ListOption {
	return &client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: rv, AllowWatchBookmarks: true}}
}

func (r *recorder) run(ctx context.Context, c client.WithWatch, list client.ObjectList, rv string, wi watch.Interface, on func(watch.EventType, client.Object)) {
	defer r.wg.Done()
	for {
		for ev := range wi.ResultChan() {
			if ev.Type == watch.Error {
				// Such as 410 Gone: events were lost, so "never" cannot be
				// asserted any more.
				wi.Stop()
				r.violate("the watch of %T reported an error: %v", list, ev.Object)
				return
			}
			obj, ok := ev.Object.(client.Object)
			if !ok {
				continue
			}
			rv = obj.GetResourceVersion()
			if ev.Type == watch.Bookmark {
				continue
			}
			r.mu.Lock()
			r.events++
			on(ev.Type, obj)
			r.mu.Unlock()
		}
		wi.Stop()
		if ctx.Err() != nil {
			return
		}
		var err error
		wi, err = c.Watch(ctx, list, watchFrom(rv))
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			r.violate("the watch of %T ended and could not resume from %q: %v", list, rv, err)
			return
		}
		r.mu.Lock()
		r.resumed++
		r.mu.Unlock()
	}
}

func (r *recorder) violate(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.violations = append(r.violations, fmt.Sprintf(format, args...))
}

// onLease and onNode run under r.mu.
func (r *recorder) onLease(t watch.EventType, obj client.Object) {
	l := obj.(*leasingv1alpha1.MacNodeLease)
	if l.Spec.NodeClassName != r.class {
		return
	}
	s := r.leases[l.UID]
	if s == nil {
		s = &leaseSeen{namespace: l.Namespace, name: l.Name}
		r.leases[l.UID] = s
	}
	if t == watch.Deleted {
		s.gone = true
		return
	}
	if l.Status.Phase == leasingv1alpha1.LeaseBound && s.phase != leasingv1alpha1.LeaseBound {
		s.boundEntries++
		if s.boundEntries > 1 {
			r.violations = append(r.violations, fmt.Sprintf("lease %s/%s became Bound %d times (phase before: %q)", l.Namespace, l.Name, s.boundEntries, s.phase))
		}
	}
	s.phase = l.Status.Phase
	s.reason = ""
	for _, c := range l.Status.Conditions {
		if c.Type == leasingv1alpha1.ConditionBound {
			s.reason = c.Reason
		}
	}
	if n := l.Status.NodeName; n != "" && (len(s.nodeNames) == 0 || s.nodeNames[len(s.nodeNames)-1] != n) {
		s.nodeNames = append(s.nodeNames, n)
		if len(s.nodeNames) > 1 {
			r.violations = append(r.violations, fmt.Sprintf("lease %s/%s named chassis %v in turn", l.Namespace, l.Name, s.nodeNames))
		}
	}
}

func (r *recorder) onNode(t watch.EventType, obj client.Object) {
	n := obj.(*fleetv1alpha1.MacNode)
	if n.Spec.NodeClassName != r.class {
		return
	}
	s := r.nodes[n.Name]
	if s == nil {
		s = &nodeSeen{}
		r.nodes[n.Name] = s
	}
	var uid types.UID
	if b := n.Status.Binding; b != nil && t != watch.Deleted {
		uid = b.LeaseUID
		if uid == "" {
			r.violations = append(r.violations, fmt.Sprintf("MacNode %s has a binding without a lease UID: %+v", n.Name, *b))
		}
	}
	s.phase = n.Status.Phase
	if s.owner != "" && uid != "" && uid != s.owner {
		r.violations = append(r.violations, fmt.Sprintf("MacNode %s's binding moved from lease %s to lease %s without a release", n.Name, s.owner, uid))
	}
	if prev := s.owner; prev != "" && uid != prev {
		delete(r.holders[prev], n.Name)
		s.freed, s.sawReady = true, false
	}
	if uid == "" && s.freed && s.phase == fleetv1alpha1.MacNodeReady {
		s.sawReady = true
	}
	if uid == s.owner {
		return
	}
	s.owner = uid
	if uid == "" {
		return
	}
	if s.freed && s.sawReady {
		s.readyRebinds++
	}
	s.freed, s.sawReady = false, false
	s.leases = append(s.leases, uid)
	if r.holders[uid] == nil {
		r.holders[uid], r.everNodes[uid] = map[string]bool{}, map[string]bool{}
	}
	r.holders[uid][n.Name] = true
	if len(r.holders[uid]) > 1 {
		r.violations = append(r.violations, fmt.Sprintf("lease %s was bound by %d MacNodes at once: %v", uid, len(r.holders[uid]), keys(r.holders[uid])))
	}
	if r.everNodes[uid][n.Name] {
		r.violations = append(r.violations, fmt.Sprintf("lease %s was bound to MacNode %s twice", uid, n.Name))
	}
	r.everNodes[uid][n.Name] = true
	if len(r.everNodes[uid]) > 1 {
		r.violations = append(r.violations, fmt.Sprintf("lease %s was bound to %d MacNodes in turn: %v", uid, len(r.everNodes[uid]), keys(r.everNodes[uid])))
	}
}

func keys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// tally is the leases' phases as the watch last saw them.
type tally struct {
	Bound, PendingNoCapacity, OtherPending, Held, Other, Gone int
}

func (r *recorder) tally() tally {
	r.mu.Lock()
	defer r.mu.Unlock()
	var t tally
	for _, s := range r.leases {
		switch {
		case s.gone:
			t.Gone++
		case s.phase == leasingv1alpha1.LeaseBound:
			t.Bound++
		case s.phase == leasingv1alpha1.LeasePending && s.reason == leasingv1alpha1.ReasonNoCapacity:
			t.PendingNoCapacity++
		case s.phase == leasingv1alpha1.LeasePending || s.phase == "":
			t.OtherPending++
		case s.phase == leasingv1alpha1.LeaseHeld:
			t.Held++
		default:
			t.Other++
		}
	}
	return t
}

// ready counts the MacNodes the watch last saw Ready.
func (r *recorder) ready() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, s := range r.nodes {
		if s.phase == fleetv1alpha1.MacNodeReady {
			n++
		}
	}
	return n
}

// seen is a copy of what the watch saw, for the assertions.
type seen struct {
	leases     map[types.UID]leaseSeen
	nodes      map[string]nodeSeen
	violations []string
	resumed    int
	events     int
}

func (r *recorder) snapshot() seen {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := seen{leases: map[types.UID]leaseSeen{}, nodes: map[string]nodeSeen{},
		violations: append([]string(nil), r.violations...), resumed: r.resumed, events: r.events}
	for uid, s := range r.leases {
		out.leases[uid] = *s
	}
	for name, s := range r.nodes {
		c := *s
		c.leases = append([]types.UID(nil), s.leases...)
		out.nodes[name] = c
	}
	return out
}

// stop ends the watches and returns what they saw.
func (r *recorder) stop() seen {
	r.cancel()
	r.wg.Wait()
	return r.snapshot()
}
