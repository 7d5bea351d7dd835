package instances

import (
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// The suite's kube-controller-manager is the real one: what envtest alone
// lacks, it does. Namespace finalisation is shown by the Held lease's spec
// (a deleted namespace waits 5s before the namespace controller starts).
var _ = Describe("kube-controller-manager", func() {
	It("gives a new namespace its default ServiceAccount, and collects garbage", func() {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "kcm-"}}
		Expect(admin.Create(ctx, ns)).To(Succeed())
		DeferCleanup(func() { Expect(client.IgnoreNotFound(admin.Delete(ctx, ns))).To(Succeed()) })
		Eventually(func() error {
			return admin.Get(ctx, client.ObjectKey{Namespace: ns.Name, Name: "default"}, &corev1.ServiceAccount{})
		}).Should(Succeed(), "the ServiceAccount controller")

		owner := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "owner", Namespace: ns.Name}}
		Expect(admin.Create(ctx, owner)).To(Succeed())
		dependent := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "dependent", Namespace: ns.Name,
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: owner.Name, UID: owner.UID}}}}
		Expect(admin.Create(ctx, dependent)).To(Succeed())
		Expect(admin.Delete(ctx, owner)).To(Succeed())
		Eventually(func() bool {
			return apierrors.IsNotFound(admin.Get(ctx, client.ObjectKeyFromObject(dependent), &corev1.ConfigMap{}))
		}).Should(BeTrue(), "the garbage collector deletes the dependent of a deleted owner")
		Expect(kcm.Done()).NotTo(BeClosed(), "kube-controller-manager is still running")
	})
})
