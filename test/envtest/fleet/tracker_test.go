package fleet

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	computev1alpha1 "github.com/boualleiguie/macrack-operator/api/compute/v1alpha1"
	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
	leasingv1alpha1 "github.com/boualleiguie/macrack-operator/api/leasing/v1alpha1"
	"github.com/boualleiguie/macrack-operator/test/envtest/harness"
)

// tracker watches leases, instances and chassis as an observer would, and
// keeps when each first reached each state: the benchmark's clock.
type tracker struct {
	mu sync.Mutex
	// leases: key → phase now; boundAt: first Bound; boundTo: the chassis
	// each was ever bound to.
	leases  map[string]leasingv1alpha1.MacNodeLeasePhase
	boundAt map[string]time.Time
	boundTo map[string]map[string]bool
	// instances: key → first Running.
	runningAt map[string]time.Time
	// nodes: name → Ready now; missed counts transitions to NotReady for a
	// missed heartbeat.
	nodes  map[string]bool
	missed int
	// beats: heartbeat Lease name → when its last renewal was seen; gaps
	// since the last resetGaps.
	beats  map[string]time.Time
	gaps   heartbeatGaps
	cancel context.CancelFunc
}

// heartbeatGaps is how far apart the renewals of one chassis' heartbeat
// Lease arrived, at worst, as a watch of them (the operator's, too) sees
// them.
type heartbeatGaps struct {
	n       int
	longest time.Duration
	node    string
}

func key(o client.Object) string { return o.GetNamespace() + "/" + o.GetName() }

func startTracker(ctx context.Context, env *harness.Env) (*tracker, error) {
	t := &tracker{leases: map[string]leasingv1alpha1.MacNodeLeasePhase{}, boundAt: map[string]time.Time{},
		boundTo: map[string]map[string]bool{}, runningAt: map[string]time.Time{}, nodes: map[string]bool{}, beats: map[string]time.Time{}}
	c, err := cache.New(env.Config, cache.Options{Scheme: env.Scheme, DefaultTransform: trackedFields,
		ByObject: map[client.Object]cache.ByObject{&coordinationv1.Lease{}: {Namespaces: map[string]cache.Config{fleetv1alpha1.HeartbeatNamespace: {}}}}})
	if err != nil {
		return nil, err
	}
	ctx, t.cancel = context.WithCancel(ctx)
	for _, h := range []struct {
		obj    client.Object
		update func(client.Object)
		remove func(client.Object)
	}{
		{&leasingv1alpha1.MacNodeLease{}, t.lease, func(o client.Object) {
			t.mu.Lock()
			delete(t.leases, key(o))
			t.mu.Unlock()
		}},
		{&computev1alpha1.MacOSInstance{}, t.instance, func(client.Object) {}},
		{&coordinationv1.Lease{}, t.beat, func(o client.Object) {
			t.mu.Lock()
			delete(t.beats, o.GetName())
			t.mu.Unlock()
		}},
		{&fleetv1alpha1.MacNode{}, t.node, func(o client.Object) {
			t.mu.Lock()
			delete(t.nodes, o.GetName())
			t.mu.Unlock()
		}},
	} {
		inf, err := c.GetInformer(ctx, h.obj)
		if err != nil {
			return nil, err
		}
		if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
			AddFunc:    func(o any) { h.update(o.(client.Object)) },
			UpdateFunc: func(_, o any) { h.update(o.(client.Object)) },
			DeleteFunc: func(o any) {
				if d, ok := o.(toolscache.DeletedFinalStateUnknown); ok {
					o = d.Obj
				}
				h.remove(o.(client.Object))
			},
		}); err != nil {
			return nil, err
		}
	}
	go func() { _ = c.Start(ctx) }()
	if !c.WaitForCacheSync(ctx) {
		return nil, fmt.Errorf("the tracker's cache did not sync")
	}
	return t, nil
}

func (t *tracker) stop() { t.cancel() }

// trackedFields keeps, of each object, only what the tracker reads, so
// that the benchmark process's RSS is the operator's and not also a second
// copy of the fleet.
func trackedFields(o any) (any, error) {
	meta := func(m metav1.Object) metav1.ObjectMeta {
		return metav1.ObjectMeta{Name: m.GetName(), Namespace: m.GetNamespace(), UID: m.GetUID(), ResourceVersion: m.GetResourceVersion()}
	}
	switch x := o.(type) {
	case *leasingv1alpha1.MacNodeLease:
		return &leasingv1alpha1.MacNodeLease{ObjectMeta: meta(x),
			Status: leasingv1alpha1.MacNodeLeaseStatus{Phase: x.Status.Phase, NodeName: x.Status.NodeName}}, nil
	case *computev1alpha1.MacOSInstance:
		out := &computev1alpha1.MacOSInstance{ObjectMeta: meta(x)}
		if rt := x.Status.Runtime; rt != nil {
			out.Status.Runtime = &computev1alpha1.RuntimeStatus{Phase: rt.Phase}
		}
		return out, nil
	case *coordinationv1.Lease:
		return &coordinationv1.Lease{ObjectMeta: meta(x)}, nil
	case *fleetv1alpha1.MacNode:
		out := &fleetv1alpha1.MacNode{ObjectMeta: meta(x), Status: fleetv1alpha1.MacNodeStatus{Phase: x.Status.Phase}}
		for _, c := range x.Status.Conditions {
			if c.Type == fleetv1alpha1.ConditionAgentReady {
				out.Status.Conditions = append(out.Status.Conditions, metav1.Condition{Type: c.Type, Reason: c.Reason, Status: c.Status})
			}
		}
		return out, nil
	}
	return o, nil
}

func (t *tracker) lease(o client.Object) {
	l := o.(*leasingv1alpha1.MacNodeLease)
	now := time.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	k := key(l)
	t.leases[k] = l.Status.Phase
	if l.Status.Phase == leasingv1alpha1.LeaseBound {
		if _, seen := t.boundAt[k]; !seen {
			t.boundAt[k] = now
		}
	}
	if l.Status.NodeName != "" {
		if t.boundTo[k] == nil {
			t.boundTo[k] = map[string]bool{}
		}
		t.boundTo[k][l.Status.NodeName] = true
	}
}

func (t *tracker) instance(o client.Object) {
	i := o.(*computev1alpha1.MacOSInstance)
	if i.Status.Runtime == nil || i.Status.Runtime.Phase != computev1alpha1.VMRunning {
		return
	}
	now := time.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, seen := t.runningAt[key(i)]; !seen {
		t.runningAt[key(i)] = now
	}
}

func (t *tracker) beat(o client.Object) {
	now := time.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	if last, seen := t.beats[o.GetName()]; seen {
		t.gaps.n++
		if gap := now.Sub(last); gap > t.gaps.longest {
			t.gaps.longest, t.gaps.node = gap, o.GetName()
		}
	}
	t.beats[o.GetName()] = now
}

// resetGaps starts counting heartbeat gaps afresh; gapsSince returns them.
func (t *tracker) resetGaps() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.gaps = heartbeatGaps{}
}

func (t *tracker) gapsSince() heartbeatGaps {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.gaps
}

func (t *tracker) node(o client.Object) {
	mn := o.(*fleetv1alpha1.MacNode)
	ready := mn.Status.Phase == fleetv1alpha1.MacNodeReady
	missed := false
	for _, c := range mn.Status.Conditions {
		if c.Type == fleetv1alpha1.ConditionAgentReady && c.Reason == fleetv1alpha1.ReasonHeartbeatMissed {
			missed = true
		}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if missed && t.nodes[mn.Name] {
		t.missed++
	}
	t.nodes[mn.Name] = ready && !missed
}

// count counts the leases named name whose phase passes ok.
func (t *tracker) count(name string, ok func(leasingv1alpha1.MacNodeLeasePhase) bool) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	for k, p := range t.leases {
		if strings.HasSuffix(k, "/"+name) && ok(p) {
			n++
		}
	}
	return n
}

func (t *tracker) boundCount(name string) int {
	return t.count(name, func(p leasingv1alpha1.MacNodeLeasePhase) bool { return p == leasingv1alpha1.LeaseBound })
}

func (t *tracker) heldCount(name string) int {
	return t.count(name, func(p leasingv1alpha1.MacNodeLeasePhase) bool { return p == leasingv1alpha1.LeaseHeld })
}

func (t *tracker) leaseCount(name string) int {
	return t.count(name, func(leasingv1alpha1.MacNodeLeasePhase) bool { return true })
}

// runningCount counts the instances, named with prefix, seen Running.
func (t *tracker) runningCount(prefix string) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	for k := range t.runningAt {
		if _, name, _ := strings.Cut(k, "/"); strings.HasPrefix(name, prefix) {
			n++
		}
	}
	return n
}

func (t *tracker) readyNodes() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	for _, r := range t.nodes {
		if r {
			n++
		}
	}
	return n
}

func (t *tracker) leaseBoundAt(ns, name string) (time.Time, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	at, ok := t.boundAt[ns+"/"+name]
	return at, ok
}

func (t *tracker) instanceRunningAt(ns, name string) (time.Time, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	at, ok := t.runningAt[ns+"/"+name]
	return at, ok
}

// doubleBindings lists the leases seen bound to two chassis.
func (t *tracker) doubleBindings() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []string
	for k, nodes := range t.boundTo {
		if len(nodes) > 1 {
			out = append(out, k)
		}
	}
	return out
}

func (t *tracker) falsePositives() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.missed
}

func (t *tracker) summary() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	phases := map[leasingv1alpha1.MacNodeLeasePhase]int{}
	for _, p := range t.leases {
		phases[p]++
	}
	ready := 0
	for _, r := range t.nodes {
		if r {
			ready++
		}
	}
	return fmt.Sprintf("leases by phase %v, instances seen Running %d, chassis Ready %d of %d", phases, len(t.runningAt), ready, len(t.nodes))
}
