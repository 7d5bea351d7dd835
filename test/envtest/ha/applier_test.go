package ha

import (
	"context"
	"strconv"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/boualleiguie/macrack-operator/internal/admission"
	"github.com/boualleiguie/macrack-operator/test/envtest/harness"
)

// staleReader answers one object from a snapshot, as a cache does that has
// not yet seen the latest write, and everything else from the API server.
type staleReader struct {
	client.Reader
	key      client.ObjectKey
	snapshot *admissionregistrationv1.ValidatingAdmissionPolicy
}

func (s staleReader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok || key != s.key || u.GetKind() != "ValidatingAdmissionPolicy" {
		return s.Reader.Get(ctx, key, obj, opts...)
	}
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(s.snapshot)
	if err != nil {
		return err
	}
	u.Object = m
	return nil
}

// This runs apart from the replicas (a container of its own, which Ginkgo
// may order before or after theirs): it drives the applier's Reconcile
// directly, so that a read that lags a write is certain, not a race.
var _ = Describe("the admission policy applier, reading a cache that lags a newer bundle's write", Ordered, func() {
	var (
		key    client.ObjectKey
		want   []admissionregistrationv1.Validation
		newer  = []admissionregistrationv1.Validation{{Expression: "true", Message: "a newer bundle's rule"}}
		vap    = &admissionregistrationv1.ValidatingAdmissionPolicy{}
		stale  *admissionregistrationv1.ValidatingAdmissionPolicy
		reader client.Reader
	)
	applier := func(r client.Reader) *admission.PolicyApplier {
		return &admission.PolicyApplier{Client: admin, Reader: r, Engine: engine, Namespace: harness.OperatorNamespace, Params: params}
	}
	live := func() *admissionregistrationv1.ValidatingAdmissionPolicy {
		GinkgoHelper()
		Expect(admin.Get(ctx, key, vap)).To(Succeed())
		return vap
	}

	BeforeAll(func() {
		reader = admin
		aps, err := engine.AdmissionPolicies(params)
		Expect(err).NotTo(HaveOccurred())
		key = client.ObjectKey{Name: aps[0].Policy.Name}
		res, err := applier(reader).Reconcile(ctx, reconcile.Request{})
		Expect(err).NotTo(HaveOccurred())
		Expect(res.IsZero()).To(BeTrue())
		want = live().Spec.Validations
		Expect(want).NotTo(Equal(newer))
		DeferCleanup(func() {
			// The replicas' first spec proves that none applies a policy
			// before it leads: leave nothing applied.
			for _, o := range policyObjects() {
				Expect(client.IgnoreNotFound(admin.Delete(ctx, o.obj))).To(Succeed())
			}
		})

		By("a newer bundle rewrites it, with a higher serial, after the applier's cache read it")
		stale = live().DeepCopy()
		before := vap.DeepCopy()
		vap.Annotations[admission.SerialAnnotation] = strconv.FormatInt(engine.Serial()+1, 10)
		vap.Spec.Validations = newer
		Expect(admin.Patch(ctx, vap, client.MergeFrom(before))).To(Succeed())
	})

	It("does not overwrite the write it has not seen, and reads again", func() {
		res, err := applier(staleReader{Reader: admin, key: key, snapshot: stale}).Reconcile(ctx, reconcile.Request{})
		Expect(err).NotTo(HaveOccurred())
		Expect(live().Spec.Validations).To(Equal(newer), "the newer bundle's rule is still installed")
		Expect(vap.Annotations[admission.SerialAnnotation]).To(Equal(strconv.FormatInt(engine.Serial()+1, 10)))
		Expect(res.RequeueAfter).To(BeNumerically(">", 0), "the applier asks to read again")
	})

	It("leaves it, once it reads the newer serial", func() {
		res, err := applier(reader).Reconcile(ctx, reconcile.Request{})
		Expect(err).NotTo(HaveOccurred())
		Expect(res.IsZero()).To(BeTrue())
		Expect(live().Spec.Validations).To(Equal(newer))
	})

	It("positive control: restores the same edit under its own serial", func() {
		before := live().DeepCopy()
		vap.Annotations[admission.SerialAnnotation] = strconv.FormatInt(engine.Serial(), 10)
		Expect(admin.Patch(ctx, vap, client.MergeFrom(before))).To(Succeed())
		res, err := applier(reader).Reconcile(ctx, reconcile.Request{})
		Expect(err).NotTo(HaveOccurred())
		Expect(res.IsZero()).To(BeTrue())
		Expect(live().Spec.Validations).To(Equal(want))
	})
})
