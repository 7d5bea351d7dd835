package scale

import (
	"errors"
	"fmt"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/transport"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
	leasingv1alpha1 "github.com/boualleiguie/macrack-operator/api/leasing/v1alpha1"
	"github.com/boualleiguie/macrack-operator/test/envtest/harness"
)

// parallel runs f(0) … f(n-1) on workers goroutines and returns every
// error.
func parallel(n, workers int, f func(i int) error) error {
	var next atomic.Int64
	var mu sync.Mutex
	var errs []error
	var wg sync.WaitGroup
	for range min(n, workers) {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				if err := f(i); err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// createChassis creates n chassis of class, as the leases suite does (no
// agent: the MacNode, its Node, and the facts a good host reports).
func createChassis(class string, n int) error {
	return parallel(n, 32, func(int) error {
		_, err := harness.CreateChassis(ctx, admin, class, harness.GoodFacts())
		return err
	})
}

// tenant is a namespace and the person who may edit leases in it.
type tenant struct {
	namespace, user string
	// client impersonates user.
	client client.Client
}

// newTenants creates n tenants as harness.NewTenant does: each its own
// namespace, a RoleBinding of macrack-tenant-edit there for its own user
// alone, and a client that impersonates that user. The clients share one
// connection pool and REST mapper, so that 1,000 of them cost no 1,000 TLS
// handshakes and discoveries; each still sends its own user's
// impersonation headers. The API server's RBAC authorizer reads bindings
// from an informer, which sees them in resourceVersion order: once the
// binding written last is in force, every one is.
func newTenants(n int) ([]*tenant, error) {
	base, err := rest.HTTPClientFor(env.Config)
	if err != nil {
		return nil, err
	}
	tenants := make([]*tenant, n)
	var mu sync.Mutex
	var last *tenant
	var lastRV uint64
	err = parallel(n, 64, func(i int) error {
		user := fmt.Sprintf("tenant-%04d", i)
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: user}}
		if err := admin.Create(ctx, ns); err != nil {
			return err
		}
		rb := &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "macrack-tenant-edit", Namespace: ns.Name},
			RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "macrack-tenant-edit"},
			Subjects:   []rbacv1.Subject{{Kind: "User", APIGroup: "rbac.authorization.k8s.io", Name: user}},
		}
		if err := admin.Create(ctx, rb); err != nil {
			return err
		}
		hc := &http.Client{Timeout: base.Timeout, Transport: transport.NewImpersonatingRoundTripper(
			transport.ImpersonationConfig{UserName: user, Groups: []string{"system:authenticated"}}, base.Transport)}
		cfg := rest.CopyConfig(env.Config)
		cfg.QPS, cfg.Burst = -1, 0
		c, err := client.New(cfg, client.Options{Scheme: env.Scheme, HTTPClient: hc, Mapper: env.Client.RESTMapper()})
		if err != nil {
			return err
		}
		tenants[i] = &tenant{namespace: ns.Name, user: user, client: c}
		rv, err := strconv.ParseUint(rb.ResourceVersion, 10, 64)
		if err != nil {
			return fmt.Errorf("RoleBinding %s/%s: resourceVersion %q: %w", rb.Namespace, rb.Name, rb.ResourceVersion, err)
		}
		mu.Lock()
		defer mu.Unlock()
		if rv > lastRV {
			last, lastRV = tenants[i], rv
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if err := harness.WaitAllowed(ctx, last.client, authorizationv1.ResourceAttributes{Namespace: last.namespace, Verb: "create",
		Group: leasingv1alpha1.GroupVersion.Group, Resource: "macnodeleases"}); err != nil {
		return nil, fmt.Errorf("tenant %s: %w", last.user, err)
	}
	return tenants, nil
}

func newLease(ns, name, class string) *leasingv1alpha1.MacNodeLease {
	return &leasingv1alpha1.MacNodeLease{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec:       leasingv1alpha1.MacNodeLeaseSpec{NodeClassName: class, MinimumDuration: "24h"},
	}
}

// macNodes lists the MacNodes of class from the API server.
func macNodes(class string) ([]fleetv1alpha1.MacNode, error) {
	list := &fleetv1alpha1.MacNodeList{}
	if err := admin.List(ctx, list); err != nil {
		return nil, err
	}
	var out []fleetv1alpha1.MacNode
	for _, n := range list.Items {
		if n.Spec.NodeClassName == class {
			out = append(out, n)
		}
	}
	return out, nil
}

// leases lists the leases of class from the API server.
func leases(class string) ([]leasingv1alpha1.MacNodeLease, error) {
	list := &leasingv1alpha1.MacNodeLeaseList{}
	if err := admin.List(ctx, list); err != nil {
		return nil, err
	}
	var out []leasingv1alpha1.MacNodeLease
	for _, l := range list.Items {
		if l.Spec.NodeClassName == class {
			out = append(out, l)
		}
	}
	return out, nil
}

func boundReason(l *leasingv1alpha1.MacNodeLease) string {
	for _, c := range l.Status.Conditions {
		if c.Type == leasingv1alpha1.ConditionBound {
			return c.Reason
		}
	}
	return ""
}

// cpuTimes reads, from /proc, the CPU time (user and system) used so far by
// this process, which runs the operator, its webhooks and the suite, and by
// its children, etcd and kube-apiserver. Empty where there is no /proc.
func cpuTimes() string {
	self := os.Getpid()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return ""
	}
	var out []string
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		// pid (comm) state ppid … utime stime: comm may hold spaces.
		stat := string(data)
		open, closing := strings.IndexByte(stat, '('), strings.LastIndexByte(stat, ')')
		if open < 0 || closing < open {
			continue
		}
		f := strings.Fields(stat[closing+1:])
		if len(f) < 13 {
			continue
		}
		if ppid, _ := strconv.Atoi(f[1]); pid != self && ppid != self {
			continue
		}
		utime, _ := strconv.ParseFloat(f[11], 64)
		stime, _ := strconv.ParseFloat(f[12], 64)
		name := stat[open+1 : closing]
		if pid == self {
			name = "suite+operator"
		}
		// USER_HZ is 100 on Linux.
		out = append(out, fmt.Sprintf("%s %.1fs", name, (utime+stime)/100))
	}
	sort.Strings(out)
	return strings.Join(out, ", ")
}
