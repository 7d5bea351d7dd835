package bench

import (
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	computev1alpha1 "github.com/boualleiguie/macrack-operator/api/compute/v1alpha1"
	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
	leasingv1alpha1 "github.com/boualleiguie/macrack-operator/api/leasing/v1alpha1"
	"github.com/boualleiguie/macrack-operator/test/envtest/harness"
)

// simReboot is the sim host's reboot time the target is set against: the
// loop should take at most the reboot plus 10 s.
const simReboot = 5 * time.Second

// BenchmarkQuarantineRecovery measures, in the sim, the quota-stuck loop
// from the code-6 refusal to the chassis Ready again for the same tenant,
// with a sim reboot of 5 s, and reports each step. Each iteration leases a
// fresh chassis running one VM, sticks its kernel counter and asks for a
// second VM, whose start the kernel refuses.
func BenchmarkQuarantineRecovery(b *testing.B) {
	env, err := harness.Start(harness.WithWebhooks)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = env.Stop() })
	admin := env.Client
	helperPath, err := harness.BuildVMHelper(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	if err := admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: harness.AgentsNamespace}}); err != nil {
		b.Fatal(err)
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
	const class = "m4-quarantine"
	if _, err := harness.CreateClass(ctx, admin, class, 2); err != nil {
		b.Fatal(err)
	}
	if err := env.CreateImage(ctx, admin, "quarantine", "60Gi"); err != nil {
		b.Fatal(err)
	}
	instance := func(ns, name, lease string) *computev1alpha1.MacOSInstance {
		return &computev1alpha1.MacOSInstance{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: computev1alpha1.MacOSInstanceSpec{LeaseName: lease, ImageName: "quarantine", CPU: 4,
				Memory: resource.MustParse("8Gi"), Disk: resource.MustParse("100Gi")}}
	}
	steps := []string{"fence", "stop", "reboot", "reattach", "probe"}
	total := map[string]time.Duration{}
	var loops time.Duration
	b.ResetTimer()
	for i := range b.N {
		b.StopTimer()
		a, err := env.StartAgent(harness.AgentOptions{Serial: harness.NewSerial(), Class: class, HelperPath: helperPath,
			Heartbeat: time.Second, RebootTime: simReboot})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() {
			_ = a.Stop()
			a.KillHelpers()
		})
		node := func() *fleetv1alpha1.MacNode {
			mn := &fleetv1alpha1.MacNode{}
			if admin.Get(ctx, client.ObjectKey{Name: a.Node}, mn) != nil {
				return &fleetv1alpha1.MacNode{}
			}
			return mn
		}
		poll(b, "chassis Ready", func() bool { return node().Status.Phase == fleetv1alpha1.MacNodeReady })
		tenant, err := env.NewTenant(ctx, "quarantine")
		if err != nil {
			b.Fatal(err)
		}
		lease := &leasingv1alpha1.MacNodeLease{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("l%d", i), Namespace: tenant.Namespace},
			Spec: leasingv1alpha1.MacNodeLeaseSpec{NodeClassName: class, MinimumDuration: "24h"}}
		if err := tenant.Client.Create(ctx, lease); err != nil {
			b.Fatal(err)
		}
		poll(b, "bound", func() bool {
			return admin.Get(ctx, client.ObjectKeyFromObject(lease), lease) == nil && lease.Status.NodeName == a.Node
		})
		first := instance(tenant.Namespace, "first", lease.Name)
		if err := tenant.Client.Create(ctx, first); err != nil {
			b.Fatal(err)
		}
		poll(b, "running", func() bool {
			return admin.Get(ctx, client.ObjectKeyFromObject(first), first) == nil && first.Status.Runtime != nil &&
				first.Status.Runtime.Phase == computev1alpha1.VMRunning
		})
		if _, err := a.StickQuota(); err != nil {
			b.Fatal(err)
		}
		if err := tenant.Client.Create(ctx, instance(tenant.Namespace, "second", lease.Name)); err != nil {
			b.Fatal(err)
		}
		poll(b, "code 6 reported", func() bool {
			r := node().Status.Reported
			return r != nil && r.Quota != nil && r.Quota.State == fleetv1alpha1.QuotaStuck
		})
		b.StartTimer()
		start := time.Now()
		at := map[string]time.Time{}
		mark := func(step string, cond func(mn *fleetv1alpha1.MacNode) bool) {
			poll(b, step, func() bool { return cond(node()) })
			at[step] = time.Now()
		}
		var boot string
		mark("fence", func(mn *fleetv1alpha1.MacNode) bool {
			boot = mn.Status.Reported.BootID
			return mn.Status.Phase == fleetv1alpha1.MacNodeQuarantined
		})
		mark("stop", func(mn *fleetv1alpha1.MacNode) bool { return mn.Status.Phase == fleetv1alpha1.MacNodeRebooting })
		mark("reboot", func(mn *fleetv1alpha1.MacNode) bool {
			return mn.Status.Reported != nil && mn.Status.Reported.BootID != boot
		})
		mark("reattach", func(mn *fleetv1alpha1.MacNode) bool {
			return mn.Status.Quarantine != nil && mn.Status.Quarantine.RebootedAt != nil
		})
		mark("probe", func(mn *fleetv1alpha1.MacNode) bool {
			return mn.Status.Phase == fleetv1alpha1.MacNodeLeased && apimeta.IsStatusConditionTrue(mn.Status.Conditions, fleetv1alpha1.ConditionReady) &&
				mn.Status.Binding != nil && mn.Status.Binding.LeaseUID == lease.UID
		})
		b.StopTimer()
		prev := start
		for _, s := range steps {
			total[s] += at[s].Sub(prev)
			prev = at[s]
		}
		loops += at["probe"].Sub(start)
		b.StartTimer()
	}
	b.StopTimer()
	n := float64(b.N)
	for _, s := range steps {
		b.ReportMetric(total[s].Seconds()/n, s+"-s")
	}
	b.ReportMetric(loops.Seconds()/n, "code6-to-ready-s")
	b.ReportMetric((loops.Seconds()/n)-simReboot.Seconds(), "beyond-reboot-s")
}
