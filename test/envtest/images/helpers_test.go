package images

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path"
	"strings"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	computev1alpha1 "github.com/boualleiguie/macrack-operator/api/compute/v1alpha1"
	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
	leasingv1alpha1 "github.com/boualleiguie/macrack-operator/api/leasing/v1alpha1"
	"github.com/boualleiguie/macrack-operator/test/envtest/harness"
	"github.com/boualleiguie/macrack-operator/test/registry"
)

// agents and registries are stopped by AfterSuite.
var (
	agentsMu   sync.Mutex
	agents     []*harness.Agent
	registries []*registry.Server
)

// goldenMinimumDisk is every sim golden's minimum disk; instances ask for
// instanceDisk.
const (
	goldenMinimumDisk = 60 << 30
	instanceDisk      = "200Gi"
)

// startChassis creates class (vmCapacity 2) unless it exists, enrolls a
// chassis of it and runs its agent, and waits until the MacNode is Ready.
func startChassis(class string) *harness.Agent {
	GinkgoHelper()
	if _, err := harness.CreateClass(ctx, admin, class, 2); err != nil {
		Expect(apierrors.IsAlreadyExists(err)).To(BeTrue(), "creating class %s: %v", class, err)
	}
	serial := harness.NewSerial()
	a, err := env.StartAgent(harness.AgentOptions{Serial: serial, Class: class, HelperPath: helperPath,
		Heartbeat: 2 * time.Second, Log: zap.New(zap.WriteTo(GinkgoWriter), zap.UseDevMode(true)).WithName(serial)})
	Expect(err).NotTo(HaveOccurred())
	agentsMu.Lock()
	agents = append(agents, a)
	agentsMu.Unlock()
	Eventually(func() fleetv1alpha1.MacNodePhase {
		return macNode(a.Node).Status.Phase
	}, "30s").Should(Equal(fleetv1alpha1.MacNodeReady), "chassis %s never became Ready", a.Node)
	return a
}

// startRegistry starts a registry of the suite's own, stopped by
// AfterSuite.
func startRegistry(o registry.Options) *registry.Server {
	GinkgoHelper()
	dir, err := os.MkdirTemp("", "macrack-registry-")
	Expect(err).NotTo(HaveOccurred())
	s, err := registry.StartWith(dir, o)
	Expect(err).NotTo(HaveOccurred())
	registries = append(registries, s)
	return s
}

func macNode(name string) *fleetv1alpha1.MacNode {
	GinkgoHelper()
	mn := &fleetv1alpha1.MacNode{}
	if err := admin.Get(ctx, client.ObjectKey{Name: name}, mn); err != nil {
		Expect(apierrors.IsNotFound(err)).To(BeTrue(), "getting MacNode %s: %v", name, err)
	}
	return mn
}

// reported is the agent's report of image on chassis node, or nil.
func reported(node, image string) func() *fleetv1alpha1.ReportedImage {
	return func() *fleetv1alpha1.ReportedImage {
		mn := macNode(node)
		if mn.Status.Reported == nil {
			return nil
		}
		for _, i := range mn.Status.Reported.Images {
			if i.Name == image {
				return &i
			}
		}
		return nil
	}
}

func imageCache(node string) *fleetv1alpha1.ImageCacheReport {
	GinkgoHelper()
	mn := macNode(node)
	if mn.Status.Reported == nil {
		return nil
	}
	return mn.Status.Reported.ImageCache
}

// createImage creates a MacOSImage of source, read over plain HTTP.
func createImage(name, source string, mutate func(*fleetv1alpha1.MacOSImageSpec)) {
	GinkgoHelper()
	img := &fleetv1alpha1.MacOSImage{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: fleetv1alpha1.MacOSImageSpec{Source: source, PlainHTTP: true}}
	if mutate != nil {
		mutate(&img.Spec)
	}
	Expect(admin.Create(ctx, img)).To(Succeed())
}

func getImage(name string) *fleetv1alpha1.MacOSImage {
	GinkgoHelper()
	img := &fleetv1alpha1.MacOSImage{}
	Expect(admin.Get(ctx, client.ObjectKey{Name: name}, img)).To(Succeed())
	return img
}

// resolvedCondition is the image's Resolved condition, or nil.
func resolvedCondition(name string) func() *metav1.Condition {
	return func() *metav1.Condition {
		return meta.FindStatusCondition(getImage(name).Status.Conditions, fleetv1alpha1.ConditionResolved)
	}
}

// pushAndResolve pushes a 3 MiB sim golden to the suite's registry and
// waits until its MacOSImage is resolved.
func pushAndResolve(name string, mutate func(*fleetv1alpha1.MacOSImageSpec)) string {
	GinkgoHelper()
	ref, err := env.PushGolden(ctx, name, goldenMinimumDisk)
	Expect(err).NotTo(HaveOccurred())
	createImage(name, ref, mutate)
	Eventually(resolvedCondition(name)).Should(HaveField("Status", metav1.ConditionTrue))
	return ref
}

// replicatedOn is the serials whose agents report a verified copy of the
// image's resolved digest, once the operator's status.replicas counts as
// many; until it does, it is one element that says what differs (no
// serial).
func replicatedOn(image string) func() []string {
	return func() []string {
		GinkgoHelper()
		img := getImage(image)
		var serials []string
		if res := img.Status.Resolved; res != nil {
			nodes := &fleetv1alpha1.MacNodeList{}
			Expect(admin.List(ctx, nodes)).To(Succeed())
			for _, n := range nodes.Items {
				if n.Status.Reported == nil {
					continue
				}
				for _, i := range n.Status.Reported.Images {
					if i.Name == image && i.Digest == res.Digest && i.Phase == fleetv1alpha1.ImageReady {
						serials = append(serials, n.Spec.Serial)
					}
				}
			}
		}
		if int(img.Status.Replicas) != len(serials) {
			return []string{fmt.Sprintf("status.replicas is %d, the chassis report %d verified copies", img.Status.Replicas, len(serials))}
		}
		return serials
	}
}

// bookLease creates a lease of class for the tenant, booking images, and
// waits until it is Bound.
func bookLease(t *harness.Tenant, name, class string, images ...string) *leasingv1alpha1.MacNodeLease {
	GinkgoHelper()
	l := &leasingv1alpha1.MacNodeLease{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: t.Namespace},
		Spec: leasingv1alpha1.MacNodeLeaseSpec{NodeClassName: class, MinimumDuration: "24h", Images: images}}
	Expect(t.Client.Create(ctx, l)).To(Succeed())
	Eventually(func() leasingv1alpha1.MacNodeLeasePhase {
		Expect(admin.Get(ctx, client.ObjectKeyFromObject(l), l)).To(Succeed())
		return l.Status.Phase
	}).Should(Equal(leasingv1alpha1.LeaseBound))
	return l
}

func newTenant(user string) *harness.Tenant {
	GinkgoHelper()
	t, err := env.NewTenant(ctx, user)
	Expect(err).NotTo(HaveOccurred())
	return t
}

func instance(ns, name, lease, image string) *computev1alpha1.MacOSInstance {
	return &computev1alpha1.MacOSInstance{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: computev1alpha1.MacOSInstanceSpec{LeaseName: lease, ImageName: image, CPU: 4,
			Memory: resource.MustParse("8Gi"), Disk: resource.MustParse(instanceDisk)}}
}

// runtimeOf is the instance's status.runtime, or nil.
func runtimeOf(i client.Object) func() *computev1alpha1.RuntimeStatus {
	return func() *computev1alpha1.RuntimeStatus {
		got := &computev1alpha1.MacOSInstance{}
		if err := admin.Get(ctx, client.ObjectKeyFromObject(i), got); err != nil {
			return nil
		}
		return got.Status.Runtime
	}
}

func phaseOf(i client.Object) func() computev1alpha1.VMPhase {
	return func() computev1alpha1.VMPhase {
		if rt := runtimeOf(i)(); rt != nil {
			return rt.Phase
		}
		return ""
	}
}

// removeInstance deletes an instance and waits until the agent has wiped
// it and it is gone.
func removeInstance(i client.Object) {
	GinkgoHelper()
	Expect(client.IgnoreNotFound(admin.Delete(ctx, i))).To(Succeed())
	Eventually(func() bool {
		return apierrors.IsNotFound(admin.Get(ctx, client.ObjectKeyFromObject(i), &computev1alpha1.MacOSInstance{}))
	}, "30s").Should(BeTrue(), "%s kept its finalizer", i.GetName())
}

// runtimeWatch records every status.runtime a watch sees of the
// instances of one namespace, by instance name.
type runtimeWatch struct {
	w    watch.Interface
	done chan struct{}
	mu   sync.Mutex
	seen map[string][]computev1alpha1.RuntimeStatus
}

func watchRuntimes(ns string) *runtimeWatch {
	GinkgoHelper()
	w, err := env.WatchClient().Watch(ctx, &computev1alpha1.MacOSInstanceList{}, client.InNamespace(ns))
	Expect(err).NotTo(HaveOccurred())
	rw := &runtimeWatch{w: w, done: make(chan struct{}), seen: map[string][]computev1alpha1.RuntimeStatus{}}
	go func() {
		defer close(rw.done)
		for ev := range w.ResultChan() {
			i, ok := ev.Object.(*computev1alpha1.MacOSInstance)
			if !ok || i.Status.Runtime == nil {
				continue
			}
			rw.mu.Lock()
			rw.seen[i.Name] = append(rw.seen[i.Name], *i.Status.Runtime.DeepCopy())
			rw.mu.Unlock()
		}
	}()
	DeferCleanup(rw.stop)
	return rw
}

func (rw *runtimeWatch) stop() {
	rw.w.Stop()
	<-rw.done
}

// of is every status.runtime seen of instance name, in order.
func (rw *runtimeWatch) of(name string) []computev1alpha1.RuntimeStatus {
	rw.mu.Lock()
	defer rw.mu.Unlock()
	return append([]computev1alpha1.RuntimeStatus(nil), rw.seen[name]...)
}

// events lists the events.k8s.io/v1 Events of namespace ns about the
// object named regarding, of reason.
func events(ns, regardingKind, regarding, reason string) func() []eventsv1.Event {
	return func() []eventsv1.Event {
		list := &eventsv1.EventList{}
		Expect(admin.List(ctx, list, client.InNamespace(ns))).To(Succeed())
		var out []eventsv1.Event
		for _, e := range list.Items {
			if e.Regarding.Kind == regardingKind && e.Regarding.Name == regarding && e.Reason == reason {
				out = append(out, e)
			}
		}
		return out
	}
}

// blobProxy is a reverse proxy in front of a registry that counts the
// blob GETs it passes, by digest: what an agent fetched.
type blobProxy struct {
	srv  *httptest.Server
	mu   sync.Mutex
	gets map[string]int
}

func newBlobProxy(target string) *blobProxy {
	GinkgoHelper()
	u, err := url.Parse("http://" + target)
	Expect(err).NotTo(HaveOccurred())
	rp := httputil.NewSingleHostReverseProxy(u)
	p := &blobProxy{gets: map[string]int{}}
	p.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet && strings.Contains(r.URL.Path, "/blobs/") {
			p.mu.Lock()
			p.gets[path.Base(r.URL.Path)]++
			p.mu.Unlock()
		}
		rp.ServeHTTP(w, r)
	}))
	DeferCleanup(p.srv.Close)
	return p
}

// Host is the proxy's 127.0.0.1:port.
func (p *blobProxy) Host() string { return strings.TrimPrefix(p.srv.URL, "http://") }

// Fetches is how many GETs of each digest's blob it passed, summed.
func (p *blobProxy) Fetches(digests ...string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, d := range digests {
		n += p.gets[d]
	}
	return n
}

// The main chassis: one chassis of its own class, leased by one tenant,
// shared by the containers whose instances need nothing else of it. Each
// removes its instances when done, leaving the two slots free.
const mainClass = "img-main"

var (
	mainOnce   sync.Once
	mainAgent  *harness.Agent
	mainTenant *harness.Tenant
	mainLease  *leasingv1alpha1.MacNodeLease
)

func mainChassis() {
	GinkgoHelper()
	mainOnce.Do(func() {
		mainAgent = startChassis(mainClass)
		mainTenant = newTenant("images")
		mainLease = bookLease(mainTenant, "build", mainClass)
	})
	Expect(mainLease).NotTo(BeNil(), "the main chassis failed to start in an earlier container")
	Expect(mainLease.Status.NodeName).To(Equal(mainAgent.Node))
}
