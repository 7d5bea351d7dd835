package fleet

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	computev1alpha1 "github.com/boualleiguie/macrack-operator/api/compute/v1alpha1"
	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
	leasingv1alpha1 "github.com/boualleiguie/macrack-operator/api/leasing/v1alpha1"
	"github.com/boualleiguie/macrack-operator/internal/agent/host"
	"github.com/boualleiguie/macrack-operator/internal/conditions"
	"github.com/boualleiguie/macrack-operator/internal/enroll"
	"github.com/boualleiguie/macrack-operator/internal/simfleet"
	"github.com/boualleiguie/macrack-operator/test/envtest/harness"
)

// TestInProcessFleet runs three minis in this process with simfleet, as
// `make run FLEET=N` does past a few: each agent is its own ServiceAccount
// with its own token, its chassis comes Ready, a tenant's two instances
// run on one, and a mini whose agent stops is marked NotReady within the
// heartbeat grace while the others stay Ready. The operator runs under
// its own ClusterRole and Role, not as a cluster administrator.
func TestInProcessFleet(t *testing.T) {
	ctx := context.Background()
	env, err := harness.Start(harness.WithWebhooks)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	admin := env.Client
	if err := admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: harness.AgentsNamespace}}); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"config/rbac/agent_role.yaml", "config/rbac/tenant_roles.yaml"} {
		if err := env.ApplyYAML(ctx, f); err != nil {
			t.Fatal(err)
		}
	}
	const beat, grace = time.Second, 4 * time.Second
	clk := &harness.OffsetClock{}
	// The operator holds config/rbac's roles and nothing more, as its
	// Deployment does: a permission the lease's life needs and the role
	// lacks fails this test.
	op, err := env.StartOperator(harness.OperatorOptions{Webhooks: true, Clock: clk, HeartbeatGrace: grace, MaxConcurrentReconciles: 4,
		AsServiceAccount: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = op.Stop() })
	if _, err := harness.CreateClass(ctx, admin, fleetClass, 2); err != nil {
		t.Fatal(err)
	}
	if err := env.CreateImage(ctx, admin, fleetImage, "60Gi"); err != nil {
		t.Fatal(err)
	}

	root, err := os.MkdirTemp("", "mf")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(root) })
	var hosts []simfleet.Host
	for i := range 3 {
		serial := fmt.Sprintf("C02P%08d", i+1)
		kc, err := enroll.Enroll(ctx, admin, env.Config, enroll.Options{Serial: serial, Class: fleetClass,
			AgentsNamespace: harness.AgentsNamespace, TokenTTL: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		dir := filepath.Join(root, enroll.NodeName(serial))
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, simfleet.BootstrapKubeconfig), kc, 0o600); err != nil {
			t.Fatal(err)
		}
		hosts = append(hosts, simfleet.Host{Serial: serial, StateDir: dir})
	}
	// Two fleets: the first two minis, and the third alone, whose agent the
	// test stops.
	run := func(hs []simfleet.Host) (stop func()) {
		fctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() {
			done <- simfleet.Run(fctx, simfleet.Options{Hosts: hs, AgentsNamespace: harness.AgentsNamespace,
				HeartbeatInterval: beat, Clock: clk, RebootTime: time.Second})
		}()
		return func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("fleet: %v", err)
			}
		}
	}
	stopPair := run(hosts[:2])
	t.Cleanup(stopPair)
	stopThird := run(hosts[2:])
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			stopThird()
		}
	})

	macNode := func(h simfleet.Host) *fleetv1alpha1.MacNode {
		mn := &fleetv1alpha1.MacNode{}
		if err := admin.Get(ctx, client.ObjectKey{Name: enroll.NodeName(h.Serial)}, mn); err != nil {
			t.Fatal(err)
		}
		return mn
	}
	agentReady := func(h simfleet.Host) bool {
		return conditions.IsTrue(macNode(h).Status.Conditions, fleetv1alpha1.ConditionAgentReady)
	}
	eventually(t, time.Minute, "every chassis Ready", func() bool {
		for _, h := range hosts {
			if macNode(h).Status.Phase != fleetv1alpha1.MacNodeReady {
				return false
			}
		}
		return true
	})

	// Each agent renewed its own token, and the API server knows it as its
	// own ServiceAccount, none other.
	seen := map[string]bool{}
	for _, h := range hosts {
		token, err := os.ReadFile(filepath.Join(h.StateDir, "token"))
		if err != nil {
			t.Fatal(err)
		}
		review := &authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: string(token)}}
		if err := admin.Create(ctx, review); err != nil {
			t.Fatal(err)
		}
		want := fmt.Sprintf("system:serviceaccount:%s:%s", harness.AgentsNamespace, host.ServiceAccountName(enroll.NodeName(h.Serial)))
		if !review.Status.Authenticated || review.Status.User.Username != want {
			t.Errorf("%s's token authenticates as %q (%v), want %q", h.Serial, review.Status.User.Username, review.Status.Authenticated, want)
		}
		if seen[review.Status.User.Username] {
			t.Errorf("two agents share the identity %s", review.Status.User.Username)
		}
		seen[review.Status.User.Username] = true
	}

	// A tenant's lease and two instances, running in the fleet's process.
	tenant, err := env.NewTenant(ctx, "fleet")
	if err != nil {
		t.Fatal(err)
	}
	lease := &leasingv1alpha1.MacNodeLease{ObjectMeta: metav1.ObjectMeta{Name: "l", Namespace: tenant.Namespace},
		Spec: leasingv1alpha1.MacNodeLeaseSpec{NodeClassName: fleetClass, MinimumDuration: "24h"}}
	if err := tenant.Client.Create(ctx, lease); err != nil {
		t.Fatal(err)
	}
	eventually(t, time.Minute, "the lease Bound", func() bool {
		return admin.Get(ctx, client.ObjectKeyFromObject(lease), lease) == nil && lease.Status.Phase == leasingv1alpha1.LeaseBound
	})
	var insts []*computev1alpha1.MacOSInstance
	for i := 1; i <= 2; i++ {
		inst := &computev1alpha1.MacOSInstance{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("i%d", i), Namespace: tenant.Namespace},
			Spec: computev1alpha1.MacOSInstanceSpec{LeaseName: "l", ImageName: fleetImage, CPU: 4,
				Memory: resource.MustParse("8Gi"), Disk: resource.MustParse("100Gi")}}
		if err := tenant.Client.Create(ctx, inst); err != nil {
			t.Fatal(err)
		}
		insts = append(insts, inst)
	}
	eventually(t, 2*time.Minute, "both instances Running on the bound chassis", func() bool {
		for _, inst := range insts {
			if admin.Get(ctx, client.ObjectKeyFromObject(inst), inst) != nil || inst.Status.Runtime == nil ||
				inst.Status.Runtime.Phase != computev1alpha1.VMRunning || inst.Status.NodeName != lease.Status.NodeName {
				return false
			}
		}
		return true
	})

	// The third mini's agent stops: NotReady within the grace and a beat;
	// the two others stay Ready all along.
	stopThird()
	stopped = true
	start := time.Now()
	eventually(t, grace+2*beat+5*time.Second, "the silent mini NotReady", func() bool {
		if agentReady(hosts[0]) && agentReady(hosts[1]) {
			return !agentReady(hosts[2])
		}
		t.Fatalf("a mini whose agent runs went NotReady")
		return false
	})
	took := time.Since(start)
	if took > grace+2*beat {
		t.Errorf("the silent mini went NotReady after %s, more than the %s grace and two beats", took, grace)
	}
	if r := meta.FindStatusCondition(macNode(hosts[2]).Status.Conditions, fleetv1alpha1.ConditionAgentReady); r == nil || r.Reason != fleetv1alpha1.ReasonHeartbeatMissed {
		t.Errorf("the silent mini's AgentReady is %+v, want reason %s", r, fleetv1alpha1.ReasonHeartbeatMissed)
	}
	// Positive control, after the wait: the running minis are still Ready.
	for _, h := range hosts[:2] {
		if !agentReady(h) {
			t.Errorf("%s is not Ready while its agent runs", h.Serial)
		}
	}
}

func eventually(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s: %s", within, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
