package vap

import (
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/boualleiguie/macrack-operator/test/envtest/harness"
)

// agent.scope names no review: the API server runs no admission on
// TokenReviews and SubjectAccessReviews, so neither a VAP nor a webhook
// could refuse one, and RBAC alone decides who creates them. This proves
// it, against the real API server.
var _ = Describe("Reviews at the API server", Ordered, func() {
	const (
		probeUser = "review-probe"
		probeNS   = "review-probe"
		refuser   = "refuse-review-probe"
	)
	// Both refuse every create of the probe user: the VAP also on
	// ConfigMaps, the webhook also on Secrets, as the controls that each
	// is in force.
	reviews := admissionregistrationv1.Rule{
		APIGroups: []string{"authentication.k8s.io", "authorization.k8s.io"}, APIVersions: []string{"v1"},
		Resources: []string{"tokenreviews", "subjectaccessreviews", "localsubjectaccessreviews"},
	}
	rule := func(r admissionregistrationv1.Rule) admissionregistrationv1.RuleWithOperations {
		return admissionregistrationv1.RuleWithOperations{Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create}, Rule: r}
	}
	core := func(resource string) admissionregistrationv1.Rule {
		return admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{resource}}
	}
	onlyTheProbe := "request.userInfo.username == '" + probeUser + "'"
	var probe client.Client

	BeforeAll(func() {
		ensureNamespace(probeNS)
		var err error
		// In the replay group: RBAC allows the probe everything, so that
		// only admission could refuse it.
		probe, err = env.ClientAs(probeUser, replayGroup)
		Expect(err).NotTo(HaveOccurred())

		fail := admissionregistrationv1.Fail
		objects := []client.Object{
			&admissionregistrationv1.ValidatingAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: refuser},
				Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
					FailurePolicy: &fail,
					MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{
						{RuleWithOperations: rule(reviews)}, {RuleWithOperations: rule(core("configmaps"))}}},
					MatchConditions: []admissionregistrationv1.MatchCondition{{Name: "probe", Expression: onlyTheProbe}},
					Validations:     []admissionregistrationv1.Validation{{Expression: "false", Message: refuser + " refuses it"}},
				}},
			&admissionregistrationv1.ValidatingAdmissionPolicyBinding{ObjectMeta: metav1.ObjectMeta{Name: refuser},
				Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: refuser,
					ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny}}},
			// Nothing listens on port 1 of loopback: a call fails at once,
			// and failurePolicy Fail refuses the request.
			&admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: refuser},
				Webhooks: []admissionregistrationv1.ValidatingWebhook{{
					Name:                    "refuse.review-probe.macrack.io",
					ClientConfig:            admissionregistrationv1.WebhookClientConfig{URL: ptr.To("https://127.0.0.1:1/refuse")},
					Rules:                   []admissionregistrationv1.RuleWithOperations{rule(reviews), rule(core("secrets"))},
					MatchConditions:         []admissionregistrationv1.MatchCondition{{Name: "probe", Expression: onlyTheProbe}},
					FailurePolicy:           &fail,
					SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
					AdmissionReviewVersions: []string{"v1"},
					TimeoutSeconds:          ptr.To(int32(2)),
				}}},
		}
		for _, o := range objects {
			Expect(admin.Create(ctx, o)).To(Succeed())
			DeferCleanup(func() { Expect(client.IgnoreNotFound(admin.Delete(ctx, o))).To(Succeed()) })
		}
		// Admission configuration loads asynchronously.
		Eventually(func() error {
			return probe.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{GenerateName: "probe-", Namespace: probeNS}})
		}).WithTimeout(30*time.Second).Should(MatchError(ContainSubstring("ValidatingAdmissionPolicy '"+refuser+"'")),
			"control: the VAP refuses the probe's ConfigMap")
		Eventually(func() error {
			return probe.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{GenerateName: "probe-", Namespace: probeNS}})
		}).WithTimeout(30*time.Second).Should(MatchError(ContainSubstring("failed calling webhook")),
			"control: the webhook is called on the probe's Secret, and refuses it")
	})

	It("admits the probe's TokenReview, SubjectAccessReview and LocalSubjectAccessReview that both refuse", func() {
		Expect(probe.Create(ctx, &authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: "not-a-real-token"}})).
			To(Succeed(), "a TokenReview reached neither the VAP nor the webhook")
		Expect(probe.Create(ctx, &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{User: "alice",
			ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: "get", Version: "v1", Resource: "secrets", Namespace: "kube-system"}}})).
			To(Succeed(), "a SubjectAccessReview reached neither the VAP nor the webhook")
		Expect(probe.Create(ctx, &authorizationv1.LocalSubjectAccessReview{ObjectMeta: metav1.ObjectMeta{Namespace: probeNS},
			Spec: authorizationv1.SubjectAccessReviewSpec{User: "alice",
				ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: "get", Version: "v1", Resource: "secrets", Namespace: probeNS}}})).
			To(Succeed(), "a LocalSubjectAccessReview reached neither the VAP nor the webhook")
	})

	It("leaves them to RBAC: a ServiceAccount of the agents' namespace that no role grants them is refused 403", func() {
		stray, err := env.ClientAsServiceAccount(params.AgentsNamespace, "stray")
		Expect(err).NotTo(HaveOccurred())
		harness.ExpectRBACDenial(stray.Create(ctx, &authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: "not-a-real-token"}}),
			"create", "tokenreviews")
		harness.ExpectRBACDenial(stray.Create(ctx, &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{User: "alice",
			ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: "get", Version: "v1", Resource: "secrets", Namespace: "kube-system"}}}),
			"create", "subjectaccessreviews")
	})
})
