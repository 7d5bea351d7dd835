// Package rbaccost measures what the agents' role bindings cost every other
// request in the cluster: one tenant's `get pods`, authorised by the API
// server's RBAC authorizer, at 10 and at 1,000 enrolled agents, with the
// agents' roles granted per agent (four bindings each, as enrolment did
// before) or once to their namespace's group (enroll.GroupBindings). The
// authorizer visits every ClusterRoleBinding on every request, so the
// figure is VisitRulesFor's share of the API server's CPU profile, taken
// from its /debug/pprof/profile while the tenant's requests run. Run it with
// `make bench-rbac`; it is not part of `make test`.
package rbaccost

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/google/pprof/profile"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
	"github.com/boualleiguie/macrack-operator/internal/enroll"
	"github.com/boualleiguie/macrack-operator/test/envtest/harness"
)

// profileSeconds is how long each case's CPU profile runs, the tenant's
// requests looping meanwhile.
const profileSeconds = 10

// workers send the tenant's requests in parallel, as a busy cluster's
// clients do.
const workers = 4

func BenchmarkTenantAuthorization(b *testing.B) {
	ctrl.SetLogger(logr.Discard())
	for _, grant := range []string{"per-agent", "group"} {
		for _, n := range []int{10, 1000} {
			b.Run(fmt.Sprintf("%s/agents=%d", grant, n), func(b *testing.B) { measure(b, grant, n) })
		}
	}
}

func measure(b *testing.B, grant string, n int) {
	ctx := context.Background()
	env, err := harness.Start()
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = env.Stop() })
	for _, f := range []string{"config/rbac/agent_role.yaml", "config/rbac/tenant_roles.yaml"} {
		if err := env.ApplyYAML(ctx, f); err != nil {
			b.Fatal(err)
		}
	}
	ns := harness.AgentsNamespace
	if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		b.Fatal(err)
	}
	if err := enrollAgents(ctx, env.Client, ns, n, grant == "per-agent"); err != nil {
		b.Fatal(err)
	}
	if grant == "group" {
		for _, o := range enroll.GroupBindings(ns) {
			if err := env.Client.Create(ctx, o); err != nil {
				b.Fatal(err)
			}
		}
	}
	crbs := &rbacv1.ClusterRoleBindingList{}
	if err := env.Client.List(ctx, crbs); err != nil {
		b.Fatal(err)
	}
	tenant, err := env.NewTenant(ctx, "bench-tenant")
	if err != nil {
		b.Fatal(err)
	}
	if err := harness.WaitAllowed(ctx, tenant.Client, authorizationv1.ResourceAttributes{Verb: "list", Namespace: tenant.Namespace, Resource: "pods"}); err != nil {
		b.Fatal(err)
	}
	get := func() error { return tenant.Client.List(ctx, &corev1.PodList{}, client.InNamespace(tenant.Namespace)) }
	for range 200 { // warm the watch cache and the connections
		if err := get(); err != nil {
			b.Fatal(err)
		}
	}

	cs, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		b.Fatal(err)
	}
	var done atomic.Bool
	var requests atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !done.Load() {
				if err := get(); err != nil {
					errs <- err
					return
				}
				requests.Add(1)
			}
		}()
	}
	raw, perr := cs.CoreV1().RESTClient().Get().AbsPath("/debug/pprof/profile").
		Param("seconds", strconv.Itoa(profileSeconds)).Timeout(time.Duration(profileSeconds+30) * time.Second).DoRaw(ctx)
	done.Store(true)
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	if perr != nil {
		b.Fatalf("the API server's CPU profile: %v", perr)
	}
	if dir := os.Getenv("RBACCOST_PROFILE_DIR"); dir != "" {
		name := filepath.Join(dir, fmt.Sprintf("kube-apiserver-%s-%d.pprof", grant, n))
		if err := os.WriteFile(name, raw, 0o600); err != nil {
			b.Fatal(err)
		}
	}
	p, err := profile.Parse(bytes.NewReader(raw))
	if err != nil {
		b.Fatal(err)
	}
	total, visit := cpu(p, "VisitRulesFor")
	if total == 0 {
		b.Fatal("the API server's profile holds no CPU sample")
	}
	reqs := requests.Load()
	b.ReportMetric(float64(len(crbs.Items)), "clusterrolebindings")
	b.ReportMetric(float64(reqs)/profileSeconds, "req/s")
	b.ReportMetric(100*float64(visit)/float64(total), "%VisitRulesFor")
	b.ReportMetric(float64(total)/float64(reqs)/1e3, "apiserver-µs/req")
	b.ReportMetric(float64(visit)/float64(reqs)/1e3, "VisitRulesFor-µs/req")
}

// enrollAgents creates n agents' ServiceAccounts, as enrolment does, and,
// if perAgent, the four bindings enrolment wrote for each before.
func enrollAgents(ctx context.Context, c client.Client, ns string, n int, perAgent bool) error {
	sem := make(chan struct{}, 16)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var first error
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			node := enroll.NodeName(fmt.Sprintf("C02R%08d", i))
			objs := []client.Object{&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: fleetv1alpha1.AgentServiceAccountPrefix + node, Namespace: ns}}}
			if perAgent {
				objs = append(objs, perAgentBindings(node, ns)...)
			}
			for _, o := range objs {
				if err := c.Create(ctx, o); err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
					return
				}
			}
		}()
	}
	wg.Wait()
	return first
}

// perAgentBindings are the bindings enrolment wrote for one agent before
// the group's: one ClusterRoleBinding and three RoleBindings, each to the
// agent's ServiceAccount alone.
func perAgentBindings(node, ns string) []client.Object {
	meta := func(namespace string) metav1.ObjectMeta {
		return metav1.ObjectMeta{Name: enroll.LegacyBindingPrefix + node, Namespace: namespace,
			Labels: map[string]string{"app.kubernetes.io/part-of": "macrack", fleetv1alpha1.SerialLabel: strings.ToUpper(node)}}
	}
	subjects := []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: fleetv1alpha1.AgentServiceAccountPrefix + node, Namespace: ns}}
	role := func(r string) rbacv1.RoleRef {
		return rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: r}
	}
	return []client.Object{
		&rbacv1.ClusterRoleBinding{ObjectMeta: meta(""), RoleRef: role(enroll.AgentRole), Subjects: subjects},
		&rbacv1.RoleBinding{ObjectMeta: meta(ns), RoleRef: role(enroll.AgentTokenRole), Subjects: subjects},
		&rbacv1.RoleBinding{ObjectMeta: meta(enroll.EventsNamespace), RoleRef: role(enroll.AgentEventsRole), Subjects: subjects},
		&rbacv1.RoleBinding{ObjectMeta: meta(fleetv1alpha1.HeartbeatNamespace), RoleRef: role(enroll.AgentHeartbeatRole), Subjects: subjects},
	}
}

// cpu sums the profile's CPU time, and the part of it spent in (or under)
// a function whose name contains fn, each sample counted once.
func cpu(p *profile.Profile, fn string) (total, in int64) {
	idx := len(p.SampleType) - 1 // cpu/nanoseconds
	for _, s := range p.Sample {
		v := s.Value[idx]
		total += v
	stack:
		for _, loc := range s.Location {
			for _, l := range loc.Line {
				if l.Function != nil && strings.Contains(l.Function.Name, fn) {
					in += v
					break stack
				}
			}
		}
	}
	return total, in
}
