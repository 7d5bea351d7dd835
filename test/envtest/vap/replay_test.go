package vap

import (
	"fmt"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/boualleiguie/macrack-operator/internal/policy"
	"github.com/boualleiguie/macrack-operator/internal/policy/vectors"
)

// as returns a client that impersonates the vector's requester, in the
// replay group so that RBAC admits it.
func as(in policy.Input) client.Client {
	GinkgoHelper()
	cfg := rest.CopyConfig(env.Config)
	groups := append([]string{replayGroup}, in.Request.UserInfo.Groups...)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: in.Request.UserInfo.Username, Groups: groups}
	c, err := client.New(cfg, client.Options{Scheme: env.Scheme})
	Expect(err).NotTo(HaveOccurred())
	return c
}

// fresh strips what the API server owns, so that a vector's object can be
// written.
func fresh(obj map[string]any) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: runtimeCopy(obj)}
	for _, f := range []string{"uid", "resourceVersion", "creationTimestamp", "deletionTimestamp", "managedFields", "generation"} {
		unstructured.RemoveNestedField(u.Object, "metadata", f)
	}
	return u
}

func runtimeCopy(m map[string]any) map[string]any {
	return (&unstructured.Unstructured{Object: m}).DeepCopy().Object
}

func ensureNamespace(name string) {
	GinkgoHelper()
	if name == "" {
		return
	}
	err := admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		Fail(err.Error())
	}
}

// remove deletes an object as the administrator, finalizers and all, and
// waits until it is gone, so that the next vector starts clean. The
// finalizers come off as the operator: instance.wipe lets no one else
// remove macrack.io/disk-wipe from an instance not wiped.
func remove(u *unstructured.Unstructured) {
	GinkgoHelper()
	cur := &unstructured.Unstructured{}
	cur.SetGroupVersionKind(u.GroupVersionKind())
	key := client.ObjectKeyFromObject(u)
	if err := admin.Get(ctx, key, cur); apierrors.IsNotFound(err) {
		return
	}
	if len(cur.GetFinalizers()) > 0 {
		patch := []byte(`{"metadata":{"finalizers":null}}`)
		asOperator, err := env.ClientAs(params.OperatorUsername, replayGroup)
		Expect(err).NotTo(HaveOccurred())
		Expect(asOperator.Patch(ctx, cur, client.RawPatch(types.MergePatchType, patch))).To(Succeed())
	}
	_ = admin.Delete(ctx, cur)
	Eventually(func() bool { return apierrors.IsNotFound(admin.Get(ctx, key, cur)) }).
		WithTimeout(10 * time.Second).WithPolling(50 * time.Millisecond).Should(BeTrue())
}

// setUp stores the vector's oldObject as the administrator, status
// included: first as storedAs makes it, where the vector says, then its
// spec as the oldObject has it. It removes the object when the vector is
// done, whatever happens.
func setUp(old, storedAs map[string]any) *unstructured.Unstructured {
	GinkgoHelper()
	u := fresh(old)
	if storedAs != nil {
		u = fresh(vectors.Merge(old, storedAs))
	}
	ensureNamespace(u.GetNamespace())
	status, hasStatus := u.Object["status"]
	Expect(admin.Create(ctx, u)).To(Succeed(), "setting up the vector's oldObject")
	DeferCleanup(remove, u)
	if hasStatus && u.GetKind() != "Node" {
		u.Object["status"] = status
		Expect(admin.Status().Update(ctx, u)).To(Succeed(), "setting up the vector's oldObject status")
	}
	if storedAs != nil {
		u.Object["spec"] = runtimeCopy(map[string]any{"spec": old["spec"]})["spec"]
		Expect(admin.Update(ctx, u)).To(Succeed(), "setting up the vector's oldObject spec, after its status")
	}
	return u
}

// replay sends the vector's request to the API server and returns the
// objects to clean up and the API server's error.
func replay(c vectors.Case, in policy.Input) (cleanup []*unstructured.Unstructured, err error) {
	GinkgoHelper()
	user := as(in)
	req := in.Request
	if req.Kind.Kind == "TokenRequest" {
		ensureNamespace(req.Namespace)
		for _, sa := range []string{"agent-c02aaaaaaaa1", "agent-c02bbbbbbbb2", "macrack-operator"} {
			_ = admin.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa, Namespace: req.Namespace}})
		}
		sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: req.Name, Namespace: req.Namespace}}
		tr := &authenticationv1.TokenRequest{}
		Expect(runtime.DefaultUnstructuredConverter.FromUnstructured(fresh(in.Object).Object, tr)).To(Succeed())
		return nil, user.SubResource("token").Create(ctx, sa, tr)
	}
	switch req.Operation {
	case "CREATE":
		u := fresh(in.Object)
		ensureNamespace(u.GetNamespace())
		return []*unstructured.Unstructured{u}, user.Create(ctx, u)
	case "UPDATE":
		stored := setUp(in.OldObject, c.StoredAs)
		u := fresh(in.Object)
		u.SetResourceVersion(stored.GetResourceVersion())
		if req.SubResource == "status" {
			return []*unstructured.Unstructured{stored}, user.Status().Update(ctx, u)
		}
		return []*unstructured.Unstructured{stored}, user.Update(ctx, u)
	case "DELETE":
		stored := setUp(in.OldObject, c.StoredAs)
		return []*unstructured.Unstructured{stored}, user.Delete(ctx, stored)
	}
	Fail(fmt.Sprintf("%s: cannot replay operation %s", c.ID(), req.Operation))
	return nil, nil
}

var _ = Describe("The generated ValidatingAdmissionPolicies, with no webhook installed", Ordered, ContinueOnFailure, func() {
	BeforeAll(func() {
		// The API server loads new policies asynchronously; wait until the
		// floor bites before replaying anything.
		probe := func(d string) error {
			ensureNamespace("vap-probe")
			u := &unstructured.Unstructured{Object: map[string]any{
				"apiVersion": "leasing.macrack.io/v1alpha1", "kind": "MacNodeLease",
				"metadata": map[string]any{"generateName": "probe-", "namespace": "vap-probe"},
				"spec":     map[string]any{"nodeClassName": "m4", "minimumDuration": d},
			}}
			return admin.Create(ctx, u)
		}
		Eventually(func() error { return probe("23h") }).WithTimeout(30 * time.Second).Should(
			MatchError(ContainSubstring("lease.floor: minimumDuration 23h is below the 24h floor")))
		Expect(probe("24h")).To(Succeed(), "positive control: a 24h lease is admitted")
	})

	replayed := 0
	for _, c := range cases {
		It("replays "+c.ID(), func() {
			r, ok := engine.Rule(c.Rule)
			Expect(ok).To(BeTrue())
			in, err := c.Input()
			Expect(err).NotTo(HaveOccurred())
			_, _, celApplies, err := engine.Answers(ctx, c.Rule, in)
			Expect(err).NotTo(HaveOccurred())
			if !r.HasCEL() || !celApplies || !c.Replay {
				// Not a verdict the API server gives; nothing to replay. The
				// count below proves the suite replays enough of them.
				return
			}
			replayed++
			cleanup, err := replay(c, in)
			DeferCleanup(func() {
				for _, u := range cleanup {
					remove(u)
				}
			})
			if len(c.Expect) == 0 {
				Expect(err).NotTo(HaveOccurred(), "%s: the API server refused a vector the policies admit", c.ID())
				return
			}
			Expect(err).To(HaveOccurred(), "%s: the API server admitted a vector the policies refuse", c.ID())
			msg := err.Error()
			Expect(msg).To(ContainSubstring("ValidatingAdmissionPolicy 'macrack-"+strings.NewReplacer(".", "-").Replace(r.ID)+"'"),
				"%s: refused by something other than the rule's VAP: %s", c.ID(), msg)
			for _, code := range c.Expect {
				Expect(msg).To(ContainSubstring(code+":"), "%s: the VAP's message lacks the code %s", c.ID(), code)
			}
		})
	}

	It("replayed most vectors of the VAP-bound rules", func() {
		Expect(replayed).To(BeNumerically(">=", 50))
	})
})

var _ = Describe("The lease floor at the API server alone", func() {
	// The webhook configurations are absent (this suite never installs
	// them): what refuses here is the VAP or the schema.
	lease := func(ns, name string, spec map[string]any) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "leasing.macrack.io/v1alpha1", "kind": "MacNodeLease",
			"metadata": map[string]any{"name": name, "namespace": ns},
			"spec":     spec,
		}}
	}
	It("refuses a 23h lease with the VAP's message, an unset duration with the schema's required error, and admits 24h", func() {
		ensureNamespace("floor-alone")
		// The API server loads policies asynchronously.
		Eventually(func() error {
			return admin.Create(ctx, lease("floor-alone", "short", map[string]any{"nodeClassName": "m4", "minimumDuration": "23h"}))
		}).WithTimeout(30 * time.Second).Should(MatchError(ContainSubstring("ValidatingAdmissionPolicy 'macrack-lease-floor' with binding 'macrack-lease-floor' denied request: lease.floor: minimumDuration 23h is below the 24h floor")))

		err := admin.Create(ctx, lease("floor-alone", "unset", map[string]any{"nodeClassName": "m4"}))
		Expect(apierrors.IsInvalid(err)).To(BeTrue(), "want the schema's 422, got %v", err)
		Expect(err.Error()).To(ContainSubstring("spec.minimumDuration: Required value"))
		Expect(err.Error()).NotTo(ContainSubstring("ValidatingAdmissionPolicy"))

		Expect(admin.Create(ctx, lease("floor-alone", "day", map[string]any{"nodeClassName": "m4", "minimumDuration": "24h"}))).To(Succeed())
	})
})
