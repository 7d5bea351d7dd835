// Package schema proves the CRD schemas alone: no webhook and no
// ValidatingAdmissionPolicy is ever installed in this suite, so every refusal
// here comes from the OpenAPI schema or its x-kubernetes-validations rules.
package schema

import (
	"context"
	"testing"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/boualleiguie/macrack-operator/test/envtest/harness"
)

var (
	env *harness.Env
	k8s client.Client
	ctx context.Context
)

func TestSchema(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "CRD schema suite")
}

var _ = BeforeSuite(func() {
	ctx = context.Background()
	var err error
	env, err = harness.Start()
	Expect(err).NotTo(HaveOccurred())
	k8s = env.Client
})

var _ = AfterSuite(func() {
	Expect(env.Stop()).To(Succeed())
})
