package leases

import (
	"fmt"
	"sync/atomic"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	computev1alpha1 "github.com/boualleiguie/macrack-operator/api/compute/v1alpha1"
	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
	leasingv1alpha1 "github.com/boualleiguie/macrack-operator/api/leasing/v1alpha1"
	"github.com/boualleiguie/macrack-operator/test/envtest/harness"
)

var names atomic.Int64

func unique(prefix string) string { return fmt.Sprintf("%s-%d", prefix, names.Add(1)) }

// newClass creates a class with n Ready chassis and returns the class and
// the chassis' names.
func newClass(n int) (string, []string) {
	GinkgoHelper()
	class := unique("m4")
	_, err := harness.CreateClass(ctx, admin, class, 2)
	Expect(err).NotTo(HaveOccurred())
	var nodes []string
	for i := 0; i < n; i++ {
		name, err := harness.CreateChassis(ctx, admin, class, harness.GoodFacts())
		Expect(err).NotTo(HaveOccurred())
		nodes = append(nodes, name)
	}
	for _, name := range nodes {
		Eventually(func() fleetv1alpha1.MacNodePhase { return macNode(name).Status.Phase }).Should(Equal(fleetv1alpha1.MacNodeReady))
	}
	return class, nodes
}

func macNode(name string) *fleetv1alpha1.MacNode {
	GinkgoHelper()
	mn := &fleetv1alpha1.MacNode{}
	Expect(admin.Get(ctx, client.ObjectKey{Name: name}, mn)).To(Succeed())
	return mn
}

func node(name string) *corev1.Node {
	GinkgoHelper()
	n := &corev1.Node{}
	Expect(admin.Get(ctx, client.ObjectKey{Name: name}, n)).To(Succeed())
	return n
}

func newLease(ns, name, class, duration string) *leasingv1alpha1.MacNodeLease {
	return &leasingv1alpha1.MacNodeLease{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec:       leasingv1alpha1.MacNodeLeaseSpec{NodeClassName: class, MinimumDuration: duration},
	}
}

func getLease(ns, name string) *leasingv1alpha1.MacNodeLease {
	GinkgoHelper()
	l := &leasingv1alpha1.MacNodeLease{}
	Expect(admin.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, l)).To(Succeed())
	return l
}

func leasePhase(ns, name string) func() leasingv1alpha1.MacNodeLeasePhase {
	return func() leasingv1alpha1.MacNodeLeasePhase {
		l := &leasingv1alpha1.MacNodeLease{}
		if err := admin.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, l); err != nil {
			return "gone"
		}
		return l.Status.Phase
	}
}

func newInstance(ns, name, lease string) *computev1alpha1.MacOSInstance {
	return &computev1alpha1.MacOSInstance{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: computev1alpha1.MacOSInstanceSpec{LeaseName: lease, ImageName: "sequoia-15.5-xcode-16.4", CPU: 4,
			Memory: resource.MustParse("8Gi"), Disk: resource.MustParse("200Gi")},
	}
}

// tick steps the fake clock and enqueues the leases, as time passing would.
func tick(d string, leases ...*leasingv1alpha1.MacNodeLease) {
	GinkgoHelper()
	dur, err := time.ParseDuration(d)
	Expect(err).NotTo(HaveOccurred())
	objs := make([]client.Object, len(leases))
	for i, l := range leases {
		objs[i] = l
	}
	op.Step(dur, objs...)
}

func hasTaint(n *corev1.Node, key, value string) bool {
	for _, t := range n.Spec.Taints {
		if t.Key == key && t.Value == value {
			return true
		}
	}
	return false
}
