// Package vap replays the shared policy vectors through a real API server
// that has the generated ValidatingAdmissionPolicies and no webhook at all:
// every verdict here is the API server's own CEL.
package vap

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	authorizationv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/boualleiguie/macrack-operator/internal/policy"
	"github.com/boualleiguie/macrack-operator/internal/policy/vectors"
	"github.com/boualleiguie/macrack-operator/policies"
	"github.com/boualleiguie/macrack-operator/test/envtest/harness"
)

const (
	paramsNamespace = "macrack-system"
	// replayGroup is given cluster-admin, so that RBAC never refuses a
	// replayed request: only the policies may.
	replayGroup = "macrack:replay"
)

var (
	env    *harness.Env
	admin  client.Client
	engine *policy.Engine
	ctx    = context.Background()
	params = policy.Params{AgentsNamespace: "macrack-agents", OperatorUsername: "system:serviceaccount:macrack-system:macrack-operator",
		AgentTokenAudiences: "https://kubernetes.default.svc.cluster.local"}
	cases = mustLoadCases()
)

func mustLoadCases() []vectors.Case {
	cs, err := vectors.Load(os.DirFS(filepath.Join(harness.RepoRoot(), "test", "policy")))
	if err != nil {
		panic(err)
	}
	return cs
}

func TestVAP(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "ValidatingAdmissionPolicy replay suite")
}

var _ = BeforeSuite(func() {
	var err error
	engine, err = policy.Load(ctx, policies.FS)
	Expect(err).NotTo(HaveOccurred())
	env, err = harness.Start()
	Expect(err).NotTo(HaveOccurred())
	admin = env.Client
	Expect(harness.InstallAdmissionPolicies(ctx, admin, engine, paramsNamespace, params)).To(Succeed())
	Expect(admin.Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "replay-admin"},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "cluster-admin"},
		Subjects:   []rbacv1.Subject{{Kind: "Group", APIGroup: "rbac.authorization.k8s.io", Name: replayGroup}},
	})).To(Succeed())
	// The binding reaches the RBAC authorizer through an informer: wait until
	// it is in force, so that no replay is refused 403 by RBAC instead.
	replayer, err := env.ClientAs("replay-probe", replayGroup)
	Expect(err).NotTo(HaveOccurred())
	Expect(harness.WaitAllowed(ctx, replayer, authorizationv1.ResourceAttributes{Verb: "update", Resource: "nodes", Subresource: "status"})).To(Succeed())
})

var _ = AfterSuite(func() {
	Expect(env.Stop()).To(Succeed())
})
