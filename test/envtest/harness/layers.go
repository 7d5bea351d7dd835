package harness

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// The layers a refusal comes from, and how each reads: every denial test
// asserts which layer refused (DESIGN, "Testing notes").

// ExpectPolicyDenial asserts that rule's ValidatingAdmissionPolicy refused.
func ExpectPolicyDenial(err error, rule string) {
	ginkgo.GinkgoHelper()
	gomega.Expect(err).To(gomega.HaveOccurred(), "want a %s denial", rule)
	vap := fmt.Sprintf("ValidatingAdmissionPolicy 'macrack-%s'", strings.NewReplacer(".", "-").Replace(rule))
	gomega.Expect(err.Error()).To(gomega.ContainSubstring(vap), "refused by another layer: %v", err)
	gomega.Expect(err.Error()).To(gomega.ContainSubstring(rule + ": "))
}

// ExpectWebhookDenial asserts that webhook refused with the rule's own code:
// a twin that lost the rule turns the answer into policy.disagreement, and
// that must fail here.
func ExpectWebhookDenial(err error, webhook, code string) {
	ginkgo.GinkgoHelper()
	gomega.Expect(err).To(gomega.HaveOccurred(), "want a denial with %s", code)
	gomega.Expect(err.Error()).To(gomega.ContainSubstring(fmt.Sprintf("admission webhook %q denied the request", webhook)), "refused by another layer: %v", err)
	gomega.Expect(err.Error()).To(gomega.MatchRegexp(`(denied the request: |; )`+regexp.QuoteMeta(code)+`: `), "refused without the rule code %s: %v", code, err)
	gomega.Expect(err.Error()).NotTo(gomega.ContainSubstring("policy.disagreement"))
	gomega.Expect(err.Error()).NotTo(gomega.ContainSubstring("policy.error"))
}

// ExpectRBACDenial asserts that RBAC refused verb on resource.
func ExpectRBACDenial(err error, verb, resource string) {
	ginkgo.GinkgoHelper()
	gomega.Expect(err).To(gomega.HaveOccurred(), "want RBAC to refuse %s %s", verb, resource)
	gomega.Expect(apierrors.IsForbidden(err)).To(gomega.BeTrue(), "want 403, got %v", err)
	gomega.Expect(err.Error()).To(gomega.ContainSubstring(fmt.Sprintf("cannot %s resource %q", verb, resource)), "not RBAC: %v", err)
	gomega.Expect(err.Error()).NotTo(gomega.ContainSubstring("ValidatingAdmissionPolicy"))
	gomega.Expect(err.Error()).NotTo(gomega.ContainSubstring("admission webhook"))
}
