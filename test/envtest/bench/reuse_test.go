package bench

import (
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	computev1alpha1 "github.com/boualleiguie/macrack-operator/api/compute/v1alpha1"
	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
	leasingv1alpha1 "github.com/boualleiguie/macrack-operator/api/leasing/v1alpha1"
	"github.com/boualleiguie/macrack-operator/test/envtest/harness"
)

// BenchmarkChassisReuse measures, in the sim, a chassis' return from one
// tenant to the pool: from the release of a lease whose instance ran (its
// minimum duration over) to the chassis Ready for the next tenant, the
// instance's VM stopped and its disk wiped on the way. Each iteration binds
// a lease, runs an instance from a cached golden, then times the release.
func BenchmarkChassisReuse(b *testing.B) {
	env, err := harness.Start(harness.WithWebhooks)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = env.Stop() })
	admin := env.Client
	dir := b.TempDir()
	helperPath, err := harness.BuildVMHelper(dir)
	if err != nil {
		b.Fatal(err)
	}
	for _, ns := range []string{harness.AgentsNamespace} {
		if err := admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			b.Fatal(err)
		}
	}
	for _, f := range []string{"config/rbac/agent_role.yaml", "config/rbac/tenant_roles.yaml"} {
		if err := env.ApplyYAML(ctx, f); err != nil {
			b.Fatal(err)
		}
	}
	op, err := env.StartOperator(harness.OperatorOptions{Start: time.Now(), Webhooks: true})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = op.Stop() })
	const class = "m4-reuse"
	if _, err := harness.CreateClass(ctx, admin, class, 2); err != nil {
		b.Fatal(err)
	}
	if err := env.CreateImage(ctx, admin, "reuse", "60Gi"); err != nil {
		b.Fatal(err)
	}
	a, err := env.StartAgent(harness.AgentOptions{Serial: harness.NewSerial(), Class: class, HelperPath: helperPath, Heartbeat: time.Second})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		_ = a.Stop()
		a.KillHelpers()
	})
	phase := func() fleetv1alpha1.MacNodePhase {
		mn := &fleetv1alpha1.MacNode{}
		if admin.Get(ctx, client.ObjectKey{Name: a.Node}, mn) != nil {
			return ""
		}
		return mn.Status.Phase
	}
	tenant, err := env.NewTenant(ctx, "reuse")
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := range b.N {
		b.StopTimer()
		lease := &leasingv1alpha1.MacNodeLease{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("l%d", i), Namespace: tenant.Namespace},
			Spec: leasingv1alpha1.MacNodeLeaseSpec{NodeClassName: class, MinimumDuration: "24h"}}
		if err := tenant.Client.Create(ctx, lease); err != nil {
			b.Fatal(err)
		}
		poll(b, "bound", func() bool {
			return admin.Get(ctx, client.ObjectKeyFromObject(lease), lease) == nil && lease.Status.Phase == leasingv1alpha1.LeaseBound
		})
		inst := &computev1alpha1.MacOSInstance{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("i%d", i), Namespace: tenant.Namespace},
			Spec: computev1alpha1.MacOSInstanceSpec{LeaseName: lease.Name, ImageName: "reuse", CPU: 4,
				Memory: resource.MustParse("8Gi"), Disk: resource.MustParse("100Gi")}}
		if err := tenant.Client.Create(ctx, inst); err != nil {
			b.Fatal(err)
		}
		poll(b, "running", func() bool {
			return admin.Get(ctx, client.ObjectKeyFromObject(inst), inst) == nil && inst.Status.Runtime != nil &&
				inst.Status.Runtime.Phase == computev1alpha1.VMRunning
		})
		if err := tenant.Client.Delete(ctx, lease); err != nil {
			b.Fatal(err)
		}
		poll(b, "held", func() bool {
			return admin.Get(ctx, client.ObjectKeyFromObject(lease), lease) == nil && lease.Status.Phase == leasingv1alpha1.LeaseHeld
		})
		b.StartTimer()
		op.Step(25*time.Hour, lease)
		poll(b, "chassis Ready again", func() bool { return phase() == fleetv1alpha1.MacNodeReady })
	}
}

func poll(b *testing.B, what string, cond func() bool) {
	b.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			b.Fatalf("timed out waiting: %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
