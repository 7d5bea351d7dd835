package instances

import (
	"os"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	computev1alpha1 "github.com/boualleiguie/macrack-operator/api/compute/v1alpha1"
	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
	leasingv1alpha1 "github.com/boualleiguie/macrack-operator/api/leasing/v1alpha1"
	"github.com/boualleiguie/macrack-operator/test/envtest/harness"
)

// A tenant's quantity is stored as the tenant wrote it: the API server does
// not canonicalise a custom resource's strings, and agent.scope compares the
// spec as stored. An agent that wrote an instance back through a typed
// object would turn 8192Mi into 8Gi, a spec change agent.scope refuses; so
// these instances are created unstructured, with their memory spelt out.
//
// The container has its own class, image and chassis, so that it depends on
// nothing the suite's other containers do, and it runs first (SpecPriority):
// the main container moves the operator's fake clock a day on, after which a
// new chassis' heartbeat would look stale.
var _ = Describe("Instances whose quantities are valid but not canonical", Ordered, SpecPriority(1), func() {
	const (
		qClass = "m4-sim-quantities"
		qImage = "sequoia-15.5-xcode-16.4-quantities"
		qLease = "quantities"
	)
	var tenant *harness.Tenant

	// create makes an instance of the lease as the tenant, memory verbatim.
	create := func(name, memory string) client.ObjectKey {
		GinkgoHelper()
		u := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": computev1alpha1.GroupVersion.String(),
			"kind":       "MacOSInstance",
			"metadata":   map[string]any{"name": name, "namespace": tenant.Namespace},
			"spec": map[string]any{"leaseName": qLease, "imageName": qImage, "cpu": int64(4),
				"memory": memory, "disk": "200Gi"},
		}}
		Expect(tenant.Client.Create(ctx, u)).To(Succeed())
		return client.ObjectKeyFromObject(u)
	}
	// storedMemory is spec.memory as the API server stores it.
	storedMemory := func(key client.ObjectKey) string {
		GinkgoHelper()
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(computev1alpha1.GroupVersion.WithKind("MacOSInstance"))
		Expect(admin.Get(ctx, key, u)).To(Succeed())
		m, _, err := unstructured.NestedFieldNoCopy(u.Object, "spec", "memory")
		Expect(err).NotTo(HaveOccurred())
		s, ok := m.(string)
		Expect(ok).To(BeTrue(), "spec.memory is stored as %T %v", m, m)
		return s
	}
	rtOf := func(key client.ObjectKey) func() *computev1alpha1.RuntimeStatus {
		return func() *computev1alpha1.RuntimeStatus {
			i := &computev1alpha1.MacOSInstance{}
			if err := admin.Get(ctx, key, i); err != nil {
				return nil
			}
			return i.Status.Runtime
		}
	}
	running := func(key client.ObjectKey) {
		GinkgoHelper()
		Eventually(rtOf(key), "30s").Should(HaveField("Phase", computev1alpha1.VMRunning),
			"%s never ran; the agent's log says why", key.Name)
		i := &computev1alpha1.MacOSInstance{}
		Expect(admin.Get(ctx, key, i)).To(Succeed())
		Expect(i.Finalizers).To(ContainElement(fleetv1alpha1.DiskWipeFinalizer))
	}
	// remove deletes an instance and waits until the agent has wiped it.
	remove := func(key client.ObjectKey) {
		GinkgoHelper()
		i := &computev1alpha1.MacOSInstance{ObjectMeta: metav1.ObjectMeta{Name: key.Name, Namespace: key.Namespace}}
		Expect(client.IgnoreNotFound(tenant.Client.Delete(ctx, i))).To(Succeed())
		Eventually(func() bool { return apierrors.IsNotFound(admin.Get(ctx, key, i)) }, "30s").Should(BeTrue(),
			"%s kept its finalizer", key.Name)
	}

	BeforeAll(func() {
		_, err := harness.CreateClass(ctx, admin, qClass, 2)
		Expect(err).NotTo(HaveOccurred())
		Expect(env.CreateImage(ctx, admin, qImage, "60Gi")).To(Succeed())
		// Not in the suite's agents: the main container picks its silent
		// chassis among those.
		a, err := env.StartAgent(harness.AgentOptions{Serial: harness.NewSerial(), Class: qClass, HelperPath: helperPath,
			Heartbeat: 2 * time.Second, Log: zap.New(zap.WriteTo(GinkgoWriter), zap.UseDevMode(true)).WithName("quantities")})
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(func() {
			_ = a.Stop()
			a.KillHelpers()
			_ = os.RemoveAll(a.StateDir)
		})
		Eventually(func() fleetv1alpha1.MacNodePhase {
			mn := &fleetv1alpha1.MacNode{}
			if admin.Get(ctx, client.ObjectKey{Name: a.Node}, mn) != nil {
				return ""
			}
			return mn.Status.Phase
		}).Should(Equal(fleetv1alpha1.MacNodeReady))
		tenant, err = env.NewTenant(ctx, "quantities")
		Expect(err).NotTo(HaveOccurred())
		l := &leasingv1alpha1.MacNodeLease{ObjectMeta: metav1.ObjectMeta{Name: qLease, Namespace: tenant.Namespace},
			Spec: leasingv1alpha1.MacNodeLeaseSpec{NodeClassName: qClass, MinimumDuration: "24h"}}
		Expect(tenant.Client.Create(ctx, l)).To(Succeed())
		Eventually(func() leasingv1alpha1.MacNodeLeasePhase {
			Expect(admin.Get(ctx, client.ObjectKeyFromObject(l), l)).To(Succeed())
			return l.Status.Phase
		}).Should(Equal(leasingv1alpha1.LeaseBound))
		Expect(l.Status.NodeName).To(Equal(a.Node))
	})

	It("runs an instance of memory 8192Mi, and one of 8589934592, and keeps their spec as written", func() {
		mebi, bytes := create("mem-8192mi", "8192Mi"), create("mem-bytes", "8589934592")
		DeferCleanup(func() { remove(mebi); remove(bytes) })
		running(mebi)
		running(bytes)
		Expect(storedMemory(mebi)).To(Equal("8192Mi"), "a write rewrote the tenant's spec")
		Expect(storedMemory(bytes)).To(Equal("8589934592"), "a write rewrote the tenant's spec")
	})

	It("runs an instance of memory 8Gi (the canonical spelling: the positive control)", func() {
		gibi := create("mem-8gi", "8Gi")
		DeferCleanup(func() { remove(gibi) })
		running(gibi)
		Expect(storedMemory(gibi)).To(Equal("8Gi"))
	})

	It("says why in status.runtime when an instance of memory 1000Ei cannot run, rather than only in the agent's log", func() {
		huge := create("mem-1000ei", "1000Ei")
		DeferCleanup(func() { remove(huge) })
		Eventually(rtOf(huge), "30s").Should(And(HaveField("Phase", computev1alpha1.VMFailed),
			HaveField("Message", ContainSubstring("invalid memory size"))))
		Expect(storedMemory(huge)).To(Equal("1000Ei"))
		i := &computev1alpha1.MacOSInstance{}
		Expect(admin.Get(ctx, huge, i)).To(Succeed())
		Expect(i.Finalizers).To(ContainElement(fleetv1alpha1.DiskWipeFinalizer), "the agent holds the instance until it has wiped it")
	})
})
