package runnersecret

import (
	"fmt"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	workloadsv1alpha1 "github.com/boualleiguie/macrack-operator/api/workloads/v1alpha1"
	"github.com/boualleiguie/macrack-operator/test/envtest/harness"
)

// ownCA stands for the requester's own CA: with it, a server of theirs
// could pass for an allowed host.
const ownCA = "-----BEGIN CERTIFICATE-----\nMIIBmine\n-----END CERTIFICATE-----\n"

// ns is a tenant's namespace holding the runner token Secret, with two
// people: mallory, who holds macrack-tenant-edit alone and so cannot read
// Secrets, and owner, who may also get the token Secret by name.
type ns struct {
	name           string
	mallory, owner client.Client
}

func newNamespace() ns {
	GinkgoHelper()
	t, err := env.NewTenant(ctx, "mallory")
	Expect(err).NotTo(HaveOccurred())
	Expect(admin.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "runner-token", Namespace: t.Namespace},
		StringData: map[string]string{workloadsv1alpha1.RunnerTokenKey: "glrt-secretZx9"}})).To(Succeed())
	subject := []rbacv1.Subject{{Kind: "User", APIGroup: rbacv1.GroupName, Name: "owner"}}
	Expect(admin.Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "owner-edit", Namespace: t.Namespace},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "macrack-tenant-edit"},
		Subjects: subject})).To(Succeed())
	Expect(admin.Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "runner-token-reader", Namespace: t.Namespace},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"secrets"}, ResourceNames: []string{"runner-token"}, Verbs: []string{"get"}}}})).To(Succeed())
	Expect(admin.Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "owner-token", Namespace: t.Namespace},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "runner-token-reader"},
		Subjects: subject})).To(Succeed())
	owner, err := env.ClientAs("owner")
	Expect(err).NotTo(HaveOccurred())
	for _, attrs := range []authorizationv1.ResourceAttributes{
		{Namespace: t.Namespace, Verb: "get", Resource: "secrets", Name: "runner-token"},
		{Namespace: t.Namespace, Verb: "create", Group: workloadsv1alpha1.GroupVersion.Group, Resource: "gitlabrunners"},
	} {
		Expect(harness.WaitAllowed(ctx, owner, attrs)).To(Succeed())
	}
	return ns{name: t.Namespace, mallory: t.Client, owner: owner}
}

func (n ns) runner(url, ca string) *workloadsv1alpha1.GitLabRunner {
	return &workloadsv1alpha1.GitLabRunner{
		ObjectMeta: metav1.ObjectMeta{Name: "ios", Namespace: n.name},
		Spec: workloadsv1alpha1.GitLabRunnerSpec{
			LeaseName: "build", ImageName: "sequoia-15.5-xcode-16.4", Concurrency: 1,
			Template: workloadsv1alpha1.InstanceTemplate{CPU: 4, Memory: resource.MustParse("8Gi"), Disk: resource.MustParse("200Gi")},
			GitLab: workloadsv1alpha1.GitLabSpec{URL: url, CABundle: ca,
				TokenSecretRef: workloadsv1alpha1.SecretKeyRef{Name: "runner-token", Key: workloadsv1alpha1.RunnerTokenKey}},
			MaxJobDuration: metav1.Duration{Duration: time.Hour},
		},
	}
}

// refusedByTheRule: the webhook refused, 403, naming the rule, the user and
// the Secret.
func refusedByTheRule(err error, user, namespace string) {
	GinkgoHelper()
	Expect(err).To(HaveOccurred())
	Expect(apierrors.IsForbidden(err)).To(BeTrue(), "want 403, got %v", err)
	Expect(err.Error()).To(ContainSubstring(`admission webhook "vgitlabrunner.macrack.io" denied the request`))
	Expect(err.Error()).To(ContainSubstring(fmt.Sprintf("runner.secret: %s may not create or repoint GitLabRunner ios: %s may not get Secret %s/runner-token", user, user, namespace)))
}

var _ = Describe("A GitLabRunner's token Secret", func() {
	It("refuses a tenant who cannot read the Secret, naming runner.secret, and admits one who can", Label("proves:runner.secret"), func() {
		n := newNamespace()
		// The premise of the exfiltration: mallory cannot read the token.
		err := n.mallory.Get(ctx, client.ObjectKey{Namespace: n.name, Name: "runner-token"}, &corev1.Secret{})
		Expect(apierrors.IsForbidden(err)).To(BeTrue(), "mallory reads the Secret: %v", err)

		// The repro: her own server, her own CA, the namespace's token.
		refusedByTheRule(n.mallory.Create(ctx, n.runner("https://127.0.0.1:8443", ownCA)), "mallory", n.name)
		refusedByTheRule(n.mallory.Create(ctx, n.runner("https://gitlab.com", "")), "mallory", n.name)
		Expect(apierrors.IsNotFound(admin.Get(ctx, client.ObjectKey{Namespace: n.name, Name: "ios"}, &workloadsv1alpha1.GitLabRunner{}))).To(BeTrue())

		// The positive control: the same runner, by a requester who may
		// get the Secret.
		Expect(n.owner.Create(ctx, n.runner("https://127.0.0.1:8443", ownCA))).To(Succeed())
	})

	It("refuses changes to url, caBundle or tokenSecretRef by a requester who cannot read the Secret, and admits an unrelated change", Label("proves:runner.secret"), func() {
		n := newNamespace()
		Expect(n.owner.Create(ctx, n.runner("https://gitlab.com", ""))).To(Succeed())

		for name, change := range map[string]func(*workloadsv1alpha1.GitLabRunner){
			"url":                 func(r *workloadsv1alpha1.GitLabRunner) { r.Spec.GitLab.URL = "https://127.0.0.1:8443" },
			"caBundle":            func(r *workloadsv1alpha1.GitLabRunner) { r.Spec.GitLab.CABundle = ownCA },
			"tokenSecretRef.name": func(r *workloadsv1alpha1.GitLabRunner) { r.Spec.GitLab.TokenSecretRef.Name = "runner-token-2" },
		} {
			By("changing " + name)
			r := &workloadsv1alpha1.GitLabRunner{}
			Expect(n.mallory.Get(ctx, client.ObjectKey{Namespace: n.name, Name: "ios"}, r)).To(Succeed())
			change(r)
			err := n.mallory.Update(ctx, r)
			Expect(err).To(HaveOccurred())
			Expect(apierrors.IsForbidden(err)).To(BeTrue(), "%s: want 403, got %v", name, err)
			Expect(err.Error()).To(ContainSubstring("runner.secret: mallory may not create or repoint GitLabRunner ios"))
		}

		By("changing what names no token")
		r := &workloadsv1alpha1.GitLabRunner{}
		Expect(n.mallory.Get(ctx, client.ObjectKey{Namespace: n.name, Name: "ios"}, r)).To(Succeed())
		r.Spec.Concurrency = 2
		r.Spec.Tags = []string{"macos"}
		Expect(n.mallory.Update(ctx, r)).To(Succeed())

		By("the owner changing the url")
		Expect(n.owner.Get(ctx, client.ObjectKey{Namespace: n.name, Name: "ios"}, r)).To(Succeed())
		r.Spec.GitLab.URL = "https://gitlab.example.com"
		r.Spec.GitLab.CABundle = ownCA
		Expect(n.owner.Update(ctx, r)).To(Succeed())
	})
})
