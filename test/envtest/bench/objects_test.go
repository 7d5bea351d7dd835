package bench

// Issue 17: every per-object cost is flat in the fleet's size. One
// admission decision and one reconcile of each controller, over informer
// caches of 10 and of 1,000 chassis, must take the same time: at most 1.2
// times as long at 1,000. Run them with `make bench-objects`.
//
// The fleet lives in a control plane of its own (no webhooks), and each
// size has its own informer cache, with the operator's field indexes,
// filtered by a label to that size's objects: the cache of fleet=10 holds a
// 10-chassis fleet and nothing else. Both fleets are settled first by the
// real reconcilers, writing to the API server, until a pass writes nothing.
// The measured reconciles read the cache as the operator's do, and their
// writes are encoded (the client's share of a write) and counted, but not
// sent: every iteration sees the same objects and does the same work.

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	admissionv1 "k8s.io/api/admission/v1"
	authenticationv1 "k8s.io/api/authentication/v1"

	computev1alpha1 "github.com/boualleiguie/macrack-operator/api/compute/v1alpha1"
	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
	leasingv1alpha1 "github.com/boualleiguie/macrack-operator/api/leasing/v1alpha1"
	macadmission "github.com/boualleiguie/macrack-operator/internal/admission"
	"github.com/boualleiguie/macrack-operator/internal/index"
	"github.com/boualleiguie/macrack-operator/internal/inventory"
	"github.com/boualleiguie/macrack-operator/internal/policy"
	"github.com/boualleiguie/macrack-operator/internal/reconcile/image"
	"github.com/boualleiguie/macrack-operator/internal/reconcile/intent"
	"github.com/boualleiguie/macrack-operator/internal/reconcile/lease"
	"github.com/boualleiguie/macrack-operator/internal/reconcile/node"
	"github.com/boualleiguie/macrack-operator/internal/reconcile/placement"
	"github.com/boualleiguie/macrack-operator/policies"
	"github.com/boualleiguie/macrack-operator/test/envtest/harness"
)

// objectFleets are the sizes compared; OBJECTS_FLEETS (for example
// "10,300") overrides them.
var objectFleets = func() []int {
	sizes := []int{10, 1000}
	if env := os.Getenv("OBJECTS_FLEETS"); env != "" {
		sizes = nil
		for _, f := range strings.Split(env, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil {
				panic(fmt.Sprintf("OBJECTS_FLEETS=%q: %v", env, err))
			}
			sizes = append(sizes, n)
		}
	}
	return sizes
}()

// objFleetLabel carries, on every object of a fleet, its size: each size's
// cache selects its own.
const objFleetLabel = "bench.macrack.io/fleet"

// objHeartbeatGrace is the node controller's heartbeat grace.
const objHeartbeatGrace = 40 * time.Second

var (
	objSetup     sync.Once
	objEnv       *harness.Env
	objEngine    *policy.Engine
	objParams    policy.Params
	objSetupErr  error
	objCtx       context.Context
	objStop      context.CancelFunc
	objFleets    = map[int]*objFleet{}
	objFleetErrs = map[int]error{}
	objFleetsMu  sync.Mutex
)

// objFleet is one size's fleet and its cache. Chassis i < n-2 is bound to
// lease i, which runs two instances on it, all settled; chassis n-3's lease
// ("fresh") got its two instances after settling, so they wait unplaced;
// chassis n-2 and n-1 are free and Ready, and the lease "pending" waits for
// one. Every bound chassis reports a verified copy of the golden; chassis
// 0-2 also of "rare", which was resolved after settling and counts no
// replica yet.
type objFleet struct {
	n      int
	opNS   string // the operator's namespace: the placeholder Pods
	t0     time.Time
	cache  cache.Cache
	reader client.Client // the cache's reads, the API server's writes: the manager's client
	// replicas is the image controller's count of verified copies.
	replicas *index.Count
	// drop reads the cache and encodes, counts and drops every write.
	drop   client.Client
	writes atomic.Int64

	class, golden, rare string
	bound               types.NamespacedName // lease n/2, bound to chassis n/2
	boundNode, boundSer string
	pending             types.NamespacedName
	freshNode           string
	// full: fill bound the free chassis.
	full bool
}

func objName(n, i int) string   { return strings.ToLower(objSerial(n, i)) }
func objSerial(n, i int) string { return fmt.Sprintf("C%05dF%05d", n, i) }
func objTenant(n, i int) string { return fmt.Sprintf("objf%d-t%d", n, i/10) }
func objLeaseName(i int) string { return fmt.Sprintf("l-%d", i) }
func objDigest(name string) string {
	return "sha256:" + fmt.Sprintf("%064x", []byte(name))[:64]
}

func objStart(b *testing.B) {
	b.Helper()
	objSetup.Do(func() {
		objCtx, objStop = context.WithCancel(context.Background())
		if objEnv, objSetupErr = harness.Start(); objSetupErr != nil {
			return
		}
		if objEngine, objSetupErr = policy.Load(objCtx, policies.FS, policy.WithTimeout(30*time.Second)); objSetupErr != nil {
			return
		}
		objParams, objSetupErr = objEnv.Params(objCtx)
	})
	if objSetupErr != nil {
		b.Fatal(objSetupErr)
	}
}

// objStopAll stops the fleets' caches and their control plane.
func objStopAll() {
	if objStop != nil {
		objStop()
	}
	if objEnv != nil {
		_ = objEnv.Stop()
	}
}

// fleetOf builds (once) and returns the fleet of n chassis.
func fleetOf(b *testing.B, n int) *objFleet {
	b.Helper()
	objStart(b)
	objFleetsMu.Lock()
	defer objFleetsMu.Unlock()
	if f := objFleets[n]; f != nil {
		return f
	}
	if err := objFleetErrs[n]; err != nil {
		b.Fatalf("building the fleet of %d: %v", n, err)
	}
	start := time.Now()
	f, err := buildFleet(objCtx, n)
	if err != nil {
		objFleetErrs[n] = err
		b.Fatalf("building the fleet of %d: %v", n, err)
	}
	b.Logf("fleet of %d chassis built and settled in %s", n, time.Since(start).Round(time.Millisecond))
	objFleets[n] = f
	return f
}

func buildFleet(ctx context.Context, n int) (*objFleet, error) {
	if n < 4 {
		return nil, fmt.Errorf("a fleet needs at least 4 chassis")
	}
	api := objEnv.Client
	sel := labels.SelectorFromSet(labels.Set{objFleetLabel: strconv.Itoa(n)})
	opNS := fmt.Sprintf("objf%d-system", n)
	// The placeholder Pods carry no fleet label: the fleet's Pods are those
	// of its own operator namespace.
	c, err := cache.New(objEnv.Config, cache.Options{Scheme: objEnv.Scheme, DefaultLabelSelector: sel,
		ByObject: map[client.Object]cache.ByObject{&corev1.Pod{}: {Label: labels.Everything(), Namespaces: map[string]cache.Config{opNS: {}}}}})
	if err != nil {
		return nil, err
	}
	if err := index.Register(ctx, c); err != nil {
		return nil, err
	}
	go func() { _ = c.Start(ctx) }()
	if !c.WaitForCacheSync(ctx) {
		return nil, fmt.Errorf("the cache did not sync")
	}
	// The image controller's count of verified copies, fed by the cache's
	// MacNode informer as in the operator.
	replicas := image.NewReplicas()
	inf, err := c.GetInformer(ctx, &fleetv1alpha1.MacNode{})
	if err != nil {
		return nil, err
	}
	reg, err := inf.AddEventHandler(replicas.Handler(nil))
	if err != nil {
		return nil, err
	}
	if !toolscache.WaitForCacheSync(ctx.Done(), reg.HasSynced) {
		return nil, fmt.Errorf("the replica count did not sync")
	}
	reader, err := client.NewWithWatch(objEnv.Config, client.Options{Scheme: objEnv.Scheme, Cache: &client.CacheOptions{Reader: c}})
	if err != nil {
		return nil, err
	}
	f := &objFleet{n: n, opNS: opNS, t0: time.Now().UTC().Truncate(time.Second), cache: c, reader: reader, replicas: replicas,
		class: fmt.Sprintf("objf%d", n), golden: fmt.Sprintf("objf%d-golden", n), rare: fmt.Sprintf("objf%d-rare", n)}
	f.drop = dropWrites(reader, &f.writes)
	mid := n / 2
	f.bound = types.NamespacedName{Namespace: objTenant(n, mid), Name: objLeaseName(mid)}
	f.boundNode, f.boundSer = objName(n, mid), objSerial(n, mid)
	f.pending = types.NamespacedName{Namespace: objTenant(n, 0), Name: "pending"}
	f.freshNode = objName(n, n-3)
	lbl := func() map[string]string { return map[string]string{objFleetLabel: strconv.Itoa(n)} }

	// Namespaces, the class, the golden.
	nsNames := []string{opNS, "kube-node-lease"}
	for i := 0; i < n; i += 10 {
		nsNames = append(nsNames, objTenant(n, i))
	}
	for _, ns := range nsNames {
		if err := api.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: lbl()}}); client.IgnoreAlreadyExists(err) != nil {
			return nil, err
		}
	}
	class := &fleetv1alpha1.MacNodeClass{ObjectMeta: metav1.ObjectMeta{Name: f.class, Labels: lbl()},
		Spec: fleetv1alpha1.MacNodeClassSpec{Chip: "M4", Memory: resource.MustParse("16Gi"),
			Disk: resource.MustParse("1T"), NetworkGbps: 10, VMCapacity: 2}}
	if err := api.Create(ctx, class); err != nil {
		return nil, err
	}
	if err := f.createImage(ctx, f.golden); err != nil {
		return nil, err
	}

	// Leases, chassis, Nodes, heartbeats; instances of the settled leases.
	bound := n - 2
	leaseUIDs := make([]types.UID, bound)
	err = parallel(n, func(i int) error {
		if i < bound {
			l := &leasingv1alpha1.MacNodeLease{ObjectMeta: metav1.ObjectMeta{Name: objLeaseName(i), Namespace: objTenant(n, i), Labels: lbl()},
				Spec: leasingv1alpha1.MacNodeLeaseSpec{NodeClassName: f.class, MinimumDuration: "24h"}}
			if err := api.Create(ctx, l); err != nil {
				return err
			}
			leaseUIDs[i] = l.UID
		}
		mn := &fleetv1alpha1.MacNode{ObjectMeta: metav1.ObjectMeta{Name: objName(n, i), Labels: lbl()},
			Spec: fleetv1alpha1.MacNodeSpec{Serial: objSerial(n, i), NodeClassName: f.class}}
		if err := api.Create(ctx, mn); err != nil {
			return err
		}
		patched := mn.DeepCopy()
		patched.Status.Reported = f.facts(i < bound, i < 3)
		if i < bound {
			patched.Status.Binding = &fleetv1alpha1.Binding{LeaseNamespace: objTenant(n, i), LeaseName: objLeaseName(i), LeaseUID: leaseUIDs[i],
				BoundAt: metav1.NewTime(f.t0), EarliestReleaseAt: metav1.NewTime(f.t0.Add(24 * time.Hour))}
		}
		// A chassis that served earlier tenants has a history.
		for h := 0; h < 3; h++ {
			patched.Status.History = append(patched.Status.History, fleetv1alpha1.LeaseRecord{
				LeaseNamespace: "former", LeaseName: fmt.Sprintf("old-%d", h),
				BoundAt:    metav1.NewTime(f.t0.Add(-time.Duration(72-24*h) * time.Hour)),
				ReleasedAt: metav1.NewTime(f.t0.Add(-time.Duration(48-24*h) * time.Hour))})
		}
		if err := api.Status().Patch(ctx, patched, client.MergeFrom(mn)); err != nil {
			return fmt.Errorf("reporting MacNode %s: %w", mn.Name, err)
		}
		nd := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: mn.Name, Labels: lbl()}}
		if err := api.Create(ctx, nd); err != nil {
			return err
		}
		hb := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: mn.Name, Namespace: "kube-node-lease", Labels: lbl()},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(mn.Name), LeaseDurationSeconds: ptr.To(int32(40)),
				RenewTime: &metav1.MicroTime{Time: f.t0}}}
		if err := api.Create(ctx, hb); err != nil {
			return err
		}
		if i < bound && i != n-3 {
			return f.createInstances(ctx, i)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}

	// The operator's reconcilers bring it to its steady state: statuses,
	// finalizers, taints, slots and placements. Then the agents report the
	// instances running.
	if err := f.settle(ctx); err != nil {
		return nil, err
	}
	insts := &computev1alpha1.MacOSInstanceList{}
	if err := api.List(ctx, insts, client.MatchingLabels(lbl())); err != nil {
		return nil, err
	}
	err = parallel(len(insts.Items), func(i int) error {
		inst := &insts.Items[i]
		if inst.Status.NodeName == "" {
			return fmt.Errorf("instance %s/%s was not placed", inst.Namespace, inst.Name)
		}
		patched := inst.DeepCopy()
		patched.Status.Runtime = &computev1alpha1.RuntimeStatus{Phase: computev1alpha1.VMRunning, ReadyForWork: true,
			LastReportAt: ptr.To(metav1.NewTime(f.t0))}
		return api.Status().Patch(ctx, patched, client.MergeFrom(inst))
	})
	if err != nil {
		return nil, err
	}
	if err := f.settle(ctx); err != nil {
		return nil, err
	}

	// What the transitions act on, never settled.
	p := &leasingv1alpha1.MacNodeLease{ObjectMeta: metav1.ObjectMeta{Name: f.pending.Name, Namespace: f.pending.Namespace, Labels: lbl()},
		Spec: leasingv1alpha1.MacNodeLeaseSpec{NodeClassName: f.class, MinimumDuration: "24h"}}
	if err := api.Create(ctx, p); err != nil {
		return nil, err
	}
	if err := f.createInstances(ctx, n-3); err != nil {
		return nil, err
	}
	if err := f.createImage(ctx, f.rare); err != nil {
		return nil, err
	}
	return f, f.converge(ctx)
}

// facts are a commercial chassis' report: a verified golden on a bound
// one, and "rare" on the first three.
func (f *objFleet) facts(bound, rare bool) *fleetv1alpha1.ReportedFacts {
	r := harness.GoodFacts()
	r.Inventory.ObservedAt = metav1.NewTime(f.t0)
	if bound {
		r.Images = append(r.Images, fleetv1alpha1.ReportedImage{Name: f.golden, Digest: objDigest(f.golden), Phase: fleetv1alpha1.ImageReady})
	}
	if rare {
		r.Images = append(r.Images, fleetv1alpha1.ReportedImage{Name: f.rare, Digest: objDigest(f.rare), Phase: fleetv1alpha1.ImageReady})
	}
	return r
}

// createImage creates a MacOSImage with its artifact already resolved.
func (f *objFleet) createImage(ctx context.Context, name string) error {
	api := objEnv.Client
	img := &fleetv1alpha1.MacOSImage{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{objFleetLabel: strconv.Itoa(f.n)}},
		Spec: fleetv1alpha1.MacOSImageSpec{Source: "registry.example/macrack/" + name + "@" + objDigest(name)}}
	if err := api.Create(ctx, img); err != nil {
		return err
	}
	resolved := img.DeepCopy()
	resolved.Status.ObservedGeneration = img.Generation
	resolved.Status.Resolved = &fleetv1alpha1.ResolvedImage{Digest: objDigest(name), MacOSVersion: "15.5", XcodeVersions: []string{"16.4"},
		MinimumDisk: resource.MustParse("100Gi"), DiskSize: resource.MustParse("100Gi"), CompressedSize: resource.MustParse("20Gi"),
		Chunks: 100, Compression: "zstd", HardwareModel: "aGFyZHdhcmU=", HardwareModelDigest: objDigest(name + "hw"),
		AuxiliaryStorageDigest: objDigest(name + "aux")}
	return api.Status().Patch(ctx, resolved, client.MergeFrom(img))
}

// createInstances creates lease i's two instances.
func (f *objFleet) createInstances(ctx context.Context, i int) error {
	for _, suffix := range []string{"a", "b"} {
		inst := &computev1alpha1.MacOSInstance{ObjectMeta: metav1.ObjectMeta{Name: objLeaseName(i) + "-" + suffix, Namespace: objTenant(f.n, i),
			Labels: map[string]string{objFleetLabel: strconv.Itoa(f.n)}},
			Spec: computev1alpha1.MacOSInstanceSpec{LeaseName: objLeaseName(i), ImageName: f.golden, CPU: 4,
				Memory: resource.MustParse("8Gi"), Disk: resource.MustParse("200Gi")}}
		if err := objEnv.Client.Create(ctx, inst); err != nil {
			return err
		}
	}
	return nil
}

// The reconcilers as the operator wires them (internal/operator), on c and
// a fake clock at at.
func (f *objFleet) leaseReconciler(c client.Client, at time.Time) *lease.Reconciler {
	return &lease.Reconciler{Checker: objChecker(c, at), Recorder: &events.FakeRecorder{}}
}

func (f *objFleet) nodeReconciler(c client.Client, at time.Time) *node.Reconciler {
	return &node.Reconciler{Checker: objChecker(c, at), Recorder: &events.FakeRecorder{}, HeartbeatGrace: objHeartbeatGrace}
}

func (f *objFleet) placementReconciler(c client.Client, at time.Time) *placement.Reconciler {
	return &placement.Reconciler{Checker: objChecker(c, at), Recorder: &events.FakeRecorder{}}
}

// objChecker is a reconciler's client and clock, and its way to the
// policies, as the operator wires them.
func objChecker(c client.Client, at time.Time) intent.Checker {
	return intent.Checker{Client: c, Engine: objEngine, Clock: clocktesting.NewFakePassiveClock(at), Params: objParams, Identity: harness.OperatorUser}
}

func (f *objFleet) imageReconciler(c client.Client, at time.Time) *image.Reconciler {
	return &image.Reconciler{Client: c, APIReader: objEnv.Client, Clock: clocktesting.NewFakePassiveClock(at),
		Recorder: &events.FakeRecorder{}, Namespace: f.opNS, Replicas: f.replicas}
}

// now is the business clock of the steady state.
func (f *objFleet) now() time.Time { return f.t0.Add(time.Second) }

// settle runs every reconciler over every object, writing, until a pass
// writes nothing.
func (f *objFleet) settle(ctx context.Context) error {
	var writes atomic.Int64
	var wroteMu sync.Mutex
	var wrote []string
	c := countWrites(f.reader.(client.WithWatch), &writes, func(what string, obj client.Object) {
		wroteMu.Lock()
		wrote = append(wrote, fmt.Sprintf("%s %T %s/%s", what, obj, obj.GetNamespace(), obj.GetName()))
		wroteMu.Unlock()
	})
	lr, nr, pr, ir := f.leaseReconciler(c, f.now()), f.nodeReconciler(c, f.now()), f.placementReconciler(c, f.now()), f.imageReconciler(c, f.now())
	for pass := 0; pass < 10; pass++ {
		if err := f.converge(ctx); err != nil {
			return err
		}
		writes.Store(0)
		wrote = nil
		var mu sync.Mutex
		var errs []string
		note := func(err error) {
			if err != nil {
				mu.Lock()
				errs = append(errs, err.Error())
				mu.Unlock()
			}
		}
		_ = parallel(f.n, func(i int) error {
			req := ctrl.Request{NamespacedName: types.NamespacedName{Name: objName(f.n, i)}}
			_, err := nr.Reconcile(ctx, req)
			note(err)
			_, err = pr.Reconcile(ctx, req)
			note(err)
			if i < f.n-2 {
				_, err = lr.Reconcile(ctx, ctrl.Request{NamespacedName: types.NamespacedName{Namespace: objTenant(f.n, i), Name: objLeaseName(i)}})
				note(err)
			}
			return nil
		})
		_, err := ir.Reconcile(ctx, ctrl.Request{NamespacedName: types.NamespacedName{Name: f.golden}})
		note(err)
		if writes.Load() == 0 && len(errs) == 0 {
			return f.converge(ctx)
		}
		if pass == 9 {
			return fmt.Errorf("the fleet of %d does not settle: %d writes (%s), errors %v", f.n, writes.Load(), strings.Join(wrote, "; "), errs)
		}
	}
	return nil
}

// converge waits until the cache holds what the API server holds.
func (f *objFleet) converge(ctx context.Context) error {
	lists := []func() client.ObjectList{
		func() client.ObjectList { return &fleetv1alpha1.MacNodeList{} },
		func() client.ObjectList { return &fleetv1alpha1.MacNodeClassList{} },
		func() client.ObjectList { return &fleetv1alpha1.MacOSImageList{} },
		func() client.ObjectList { return &leasingv1alpha1.MacNodeLeaseList{} },
		func() client.ObjectList { return &computev1alpha1.MacOSInstanceList{} },
		func() client.ObjectList { return &corev1.NodeList{} },
		func() client.ObjectList { return &corev1.PodList{} },
		func() client.ObjectList { return &coordinationv1.LeaseList{} },
	}
	deadline := time.Now().Add(2 * time.Minute)
	for _, newList := range lists {
		for {
			want, got := newList(), newList()
			var sel client.ListOption = client.MatchingLabels{objFleetLabel: strconv.Itoa(f.n)}
			if _, pods := want.(*corev1.PodList); pods {
				sel = client.InNamespace(f.opNS)
			}
			if err := objEnv.Client.List(ctx, want, sel); err != nil {
				return err
			}
			if err := f.cache.List(ctx, got); err != nil {
				return err
			}
			if sameVersions(want, got) {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("the cache of fleet %d does not catch up with %T", f.n, want)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return nil
}

func sameVersions(a, b client.ObjectList) bool {
	versions := func(l client.ObjectList) map[string]string {
		m := map[string]string{}
		items, _ := metaItems(l)
		for _, o := range items {
			m[o.GetNamespace()+"/"+o.GetName()] = o.GetResourceVersion()
		}
		return m
	}
	va, vb := versions(a), versions(b)
	if len(va) != len(vb) {
		return false
	}
	for k, v := range va {
		if vb[k] != v {
			return false
		}
	}
	return true
}

// processCPU is the CPU time this process has used (user and system), in
// ns. Per operation it is steadier than wall time on a shared machine; it
// includes the garbage collector's share, and the informers', which idle.
func processCPU() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}

// metaItems are a list's items.
func metaItems(l client.ObjectList) ([]metav1.Object, error) {
	objs, err := meta.ExtractList(l)
	if err != nil {
		return nil, err
	}
	out := make([]metav1.Object, 0, len(objs))
	for _, o := range objs {
		m, err := meta.Accessor(o)
		if err != nil {
			return nil, err
		}
		out = append(out, m)
	}
	return out, nil
}

// parallel runs fn(0..n-1) on 16 workers and returns the first error.
func parallel(n int, fn func(i int) error) error {
	var wg sync.WaitGroup
	var first error
	var mu sync.Mutex
	next := atomic.Int64{}
	for w := 0; w < 16; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				if err := fn(i); err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	return first
}

// countWrites counts c's writes and lets them through.
func countWrites(c client.WithWatch, n *atomic.Int64, note func(what string, obj client.Object)) client.WithWatch {
	return interceptor.NewClient(c, interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			n.Add(1)
			note("create", obj)
			return c.Create(ctx, obj, opts...)
		},
		Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			n.Add(1)
			note("update", obj)
			return c.Update(ctx, obj, opts...)
		},
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, p client.Patch, opts ...client.PatchOption) error {
			n.Add(1)
			note("patch", obj)
			return c.Patch(ctx, obj, p, opts...)
		},
		Delete: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
			n.Add(1)
			note("delete", obj)
			return c.Delete(ctx, obj, opts...)
		},
		SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
			n.Add(1)
			note(sub+" update", obj)
			return c.SubResource(sub).Update(ctx, obj, opts...)
		},
		SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, p client.Patch, opts ...client.SubResourcePatchOption) error {
			n.Add(1)
			note(sub+" patch", obj)
			return c.SubResource(sub).Patch(ctx, obj, p, opts...)
		},
	})
}

// dropWrites reads through c, and encodes and counts every write without
// sending it: the request body is the client's share of a write's cost.
func dropWrites(c client.WithWatch, n *atomic.Int64) client.Client {
	encode := func(obj runtime.Object) error {
		n.Add(1)
		_, err := json.Marshal(obj)
		return err
	}
	patch := func(obj client.Object, p client.Patch) error {
		n.Add(1)
		_, err := p.Data(obj)
		return err
	}
	return interceptor.NewClient(c, interceptor.Funcs{
		Create: func(_ context.Context, _ client.WithWatch, obj client.Object, _ ...client.CreateOption) error {
			return encode(obj)
		},
		Update: func(_ context.Context, _ client.WithWatch, obj client.Object, _ ...client.UpdateOption) error {
			return encode(obj)
		},
		Patch: func(_ context.Context, _ client.WithWatch, obj client.Object, p client.Patch, _ ...client.PatchOption) error {
			return patch(obj, p)
		},
		Delete: func(_ context.Context, _ client.WithWatch, _ client.Object, _ ...client.DeleteOption) error {
			n.Add(1)
			return nil
		},
		SubResourceCreate: func(_ context.Context, _ client.Client, _ string, obj, _ client.Object, _ ...client.SubResourceCreateOption) error {
			return encode(obj)
		},
		SubResourceUpdate: func(_ context.Context, _ client.Client, _ string, obj client.Object, _ ...client.SubResourceUpdateOption) error {
			return encode(obj)
		},
		SubResourcePatch: func(_ context.Context, _ client.Client, _ string, obj client.Object, p client.Patch, _ ...client.SubResourcePatchOption) error {
			return patch(obj, p)
		},
	})
}

// objCase is one measured operation on a fleet; it returns how many writes
// it made and checks its own outcome.
type objCase struct {
	name string
	// writes is what every iteration must write: 0 for a steady state,
	// -1 for "at least one".
	writes int64
	run    func(ctx context.Context, f *objFleet) error
	// setup, if set, brings the fleet to the state the case needs, once;
	// such cases come last, as they change the fleet.
	setup func(ctx context.Context, f *objFleet) error
}

func reconcileWith(r interface {
	Reconcile(context.Context, ctrl.Request) (ctrl.Result, error)
}, key types.NamespacedName) error {
	_, err := r.Reconcile(objCtx, ctrl.Request{NamespacedName: key})
	return err
}

var objCases = []objCase{
	{name: "admission/lease-bind", writes: 0, run: func(ctx context.Context, f *objFleet) error {
		return f.admit(ctx, f.leaseBindRequest(), true)
	}},
	{name: "admission/instance-create", writes: 0, run: func(ctx context.Context, f *objFleet) error {
		return f.admit(ctx, f.instanceCreateRequest(), false)
	}},
	{name: "lease/steady", writes: 0, run: func(_ context.Context, f *objFleet) error {
		return reconcileWith(f.leaseReconciler(f.drop, f.now()), f.bound)
	}},
	{name: "lease/bind", writes: -1, run: func(_ context.Context, f *objFleet) error {
		return reconcileWith(f.leaseReconciler(f.drop, f.now()), f.pending)
	}},
	{name: "node/steady", writes: 0, run: func(_ context.Context, f *objFleet) error {
		return reconcileWith(f.nodeReconciler(f.drop, f.now()), types.NamespacedName{Name: f.boundNode})
	}},
	{name: "node/heartbeat-missed", writes: -1, run: func(_ context.Context, f *objFleet) error {
		return reconcileWith(f.nodeReconciler(f.drop, f.t0.Add(5*time.Minute)), types.NamespacedName{Name: f.boundNode})
	}},
	{name: "placement/steady", writes: 0, run: func(_ context.Context, f *objFleet) error {
		return reconcileWith(f.placementReconciler(f.drop, f.now()), types.NamespacedName{Name: f.boundNode})
	}},
	{name: "placement/place", writes: -1, run: func(_ context.Context, f *objFleet) error {
		return reconcileWith(f.placementReconciler(f.drop, f.now()), types.NamespacedName{Name: f.freshNode})
	}},
	{name: "image/steady", writes: 0, run: func(_ context.Context, f *objFleet) error {
		return reconcileWith(f.imageReconciler(f.drop, f.now()), types.NamespacedName{Name: f.golden})
	}},
	{name: "image/new-replicas", writes: -1, run: func(_ context.Context, f *objFleet) error {
		return reconcileWith(f.imageReconciler(f.drop, f.now()), types.NamespacedName{Name: f.rare})
	}},
	// The lease "pending" once every chassis of its class is bound: it
	// says it waits, and how many chassis the class has.
	{name: "lease/no-capacity", writes: -1, setup: func(ctx context.Context, f *objFleet) error { return f.fill(ctx) }, run: func(_ context.Context, f *objFleet) error {
		return reconcileWith(f.leaseReconciler(f.drop, f.now()), f.pending)
	}},
}

// fill binds the two free chassis to leases of their own, as the lease
// controller would, and waits for the cache to show it.
func (f *objFleet) fill(ctx context.Context) error {
	if f.full {
		return nil
	}
	api := objEnv.Client
	for _, i := range []int{f.n - 2, f.n - 1} {
		l := &leasingv1alpha1.MacNodeLease{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("filler-%d", i), Namespace: objTenant(f.n, i),
			Labels: map[string]string{objFleetLabel: strconv.Itoa(f.n)}},
			Spec: leasingv1alpha1.MacNodeLeaseSpec{NodeClassName: f.class, MinimumDuration: "24h"}}
		if err := api.Create(ctx, l); err != nil {
			return err
		}
		mn := &fleetv1alpha1.MacNode{}
		if err := api.Get(ctx, types.NamespacedName{Name: objName(f.n, i)}, mn); err != nil {
			return err
		}
		claimed := mn.DeepCopy()
		claimed.Status.Phase = fleetv1alpha1.MacNodeLeased
		claimed.Status.Binding = &fleetv1alpha1.Binding{LeaseNamespace: l.Namespace, LeaseName: l.Name, LeaseUID: l.UID,
			BoundAt: metav1.NewTime(f.t0), EarliestReleaseAt: metav1.NewTime(f.t0.Add(24 * time.Hour))}
		if err := api.Status().Update(ctx, claimed); err != nil {
			return err
		}
	}
	if err := f.converge(ctx); err != nil {
		return err
	}
	f.full = true
	return nil
}

// BenchmarkObjects times one admission decision and one reconcile of each
// controller, steady (nothing to change) and in a transition, over caches
// of 10 and 1,000 chassis: BenchmarkObjects/<case>/fleet=<n>. Then
// BenchmarkObjects/<case>/paired runs the case on both fleets in turn, so
// that both sizes see the same moments of a shared machine, and reports
// each size's time per operation and their ratio, wall and CPU.
func BenchmarkObjects(b *testing.B) {
	for _, c := range objCases {
		b.Run(c.name, func(b *testing.B) {
			var fleets []*objFleet
			for _, n := range objectFleets {
				f := fleetOf(b, n)
				if c.setup != nil {
					if err := c.setup(objCtx, f); err != nil {
						b.Fatal(err)
					}
				}
				fleets = append(fleets, f)
				b.Run(fmt.Sprintf("fleet=%d", n), func(b *testing.B) {
					// One untimed pass proves the case does what it says.
					f.writes.Store(0)
					if err := c.run(objCtx, f); err != nil {
						b.Fatal(err)
					}
					if w := f.writes.Load(); (c.writes >= 0 && w != c.writes) || (c.writes < 0 && w == 0) {
						b.Fatalf("%s wrote %d times, want %d (-1: some)", c.name, w, c.writes)
					}
					f.writes.Store(0)
					b.ReportAllocs()
					cpu0 := processCPU()
					b.ResetTimer()
					for i := 0; i < b.N; i++ {
						if err := c.run(objCtx, f); err != nil {
							b.Fatal(err)
						}
					}
					b.StopTimer()
					b.ReportMetric(float64(processCPU()-cpu0)/float64(b.N), "cpu-ns/op")
					b.ReportMetric(float64(f.writes.Load())/float64(b.N), "writes/op")
				})
			}
			if len(fleets) < 2 {
				return
			}
			small, large := fleets[0], fleets[len(fleets)-1]
			b.Run("paired", func(b *testing.B) {
				var wall, cpu [2]int64
				for i := 0; i < b.N; i++ {
					// Either size goes first in turn.
					for k := range 2 {
						j := (i + k) % 2
						f := small
						if j == 1 {
							f = large
						}
						t0, c0 := time.Now(), processCPU()
						if err := c.run(objCtx, f); err != nil {
							b.Fatal(err)
						}
						wall[j] += int64(time.Since(t0))
						cpu[j] += processCPU() - c0
					}
				}
				b.StopTimer()
				b.ReportMetric(float64(wall[0])/float64(b.N), fmt.Sprintf("ns/op@%d", small.n))
				b.ReportMetric(float64(wall[1])/float64(b.N), fmt.Sprintf("ns/op@%d", large.n))
				b.ReportMetric(float64(wall[1])/float64(wall[0]), "ratio")
				b.ReportMetric(float64(cpu[1])/float64(max(cpu[0], 1)), "cpu-ratio")
			})
		})
	}
}

// admit runs the validating handler as the webhook does (the cache's
// indexes, no live reads) and checks its answer.
func (f *objFleet) admit(ctx context.Context, req admission.Request, allowed bool) error {
	v := &macadmission.PolicyValidator{Engine: objEngine, Inventory: inventory.Builder{Reader: f.cache},
		Clock: clocktesting.NewFakePassiveClock(f.now()), Params: objParams}
	resp := v.Handle(ctx, req)
	if resp.Allowed != allowed {
		return fmt.Errorf("answer %v, want allowed=%v: %+v", resp.Allowed, allowed, resp.Result)
	}
	return nil
}

// leaseBindRequest is the operator's status write that binds lease n/2 to
// its chassis, as the lease controller makes it.
func (f *objFleet) leaseBindRequest() admission.Request {
	l := &leasingv1alpha1.MacNodeLease{}
	if err := f.cache.Get(objCtx, f.bound, l); err != nil {
		panic(err)
	}
	old := l.DeepCopy()
	old.Status = leasingv1alpha1.MacNodeLeaseStatus{Phase: leasingv1alpha1.LeasePending}
	return objRequest(l, old, "macnodeleases", "status", admissionv1.Update, harness.OperatorUser)
}

// instanceCreateRequest is a tenant's third instance on lease n/2, which
// instance.cap refuses.
func (f *objFleet) instanceCreateRequest() admission.Request {
	inst := &computev1alpha1.MacOSInstance{TypeMeta: metav1.TypeMeta{APIVersion: computev1alpha1.GroupVersion.String(), Kind: "MacOSInstance"},
		ObjectMeta: metav1.ObjectMeta{Name: "third", Namespace: f.bound.Namespace, UID: "u-third"},
		Spec: computev1alpha1.MacOSInstanceSpec{LeaseName: f.bound.Name, ImageName: f.golden, CPU: 4,
			Memory: resource.MustParse("8Gi"), Disk: resource.MustParse("200Gi")}}
	return objRequest(inst, nil, "macosinstances", "", admissionv1.Create, "tenant")
}

func objRequest(obj, old client.Object, resource, sub string, op admissionv1.Operation, user string) admission.Request {
	gvk, err := objEnv.Client.GroupVersionKindFor(obj)
	if err != nil {
		panic(err)
	}
	obj.GetObjectKind().SetGroupVersionKind(gvk)
	raw, _ := json.Marshal(obj)
	req := admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
		UID: "bench", Operation: op, SubResource: sub,
		Kind:     metav1.GroupVersionKind{Group: gvk.Group, Version: gvk.Version, Kind: gvk.Kind},
		Resource: metav1.GroupVersionResource{Group: gvk.Group, Version: gvk.Version, Resource: resource},
		Name:     obj.GetName(), Namespace: obj.GetNamespace(),
		Object:   runtime.RawExtension{Raw: raw},
		UserInfo: authenticationv1.UserInfo{Username: user},
	}}
	if old != nil {
		old.GetObjectKind().SetGroupVersionKind(gvk)
		req.OldObject.Raw, _ = json.Marshal(old)
	}
	return req
}
