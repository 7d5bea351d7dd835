package schema

import (
	"fmt"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// A tenant writes spec.images; the chassis pulls and pins what it names, so
// the list is bounded and fixed once written.
var _ = Describe("MacNodeLease.spec.images", func() {
	lease := func(ns, name string, images ...any) *unstructured.Unstructured {
		u := obj("leasing.macrack.io/v1alpha1", "MacNodeLease", name, map[string]any{
			"nodeClassName": "m4", "minimumDuration": "24h", "images": images})
		u.SetNamespace(ns)
		return u
	}

	It("takes up to 8 images, and refuses a ninth", func() {
		ns := newNamespace()
		eight := make([]any, 8)
		for i := range eight {
			eight[i] = fmt.Sprintf("img-%d", i)
		}
		Expect(k8s.Create(ctx, lease(ns, "eight", eight...))).To(Succeed())
		err := k8s.Create(ctx, lease(ns, "nine", append(eight, "img-8")...))
		expectSchemaRefusal(err, "spec.images", metav1.CauseTypeTooMany, "must have at most 8 items")
	})

	It("is immutable once written, while the lease's other fields change", func() {
		ns := newNamespace()
		u := lease(ns, "booked", "sequoia")
		Expect(k8s.Create(ctx, u)).To(Succeed())
		changed := u.DeepCopy()
		Expect(unstructured.SetNestedStringSlice(changed.Object, []string{"sonoma"}, "spec", "images")).To(Succeed())
		err := k8s.Update(ctx, changed)
		expectSchemaRefusal(err, "spec.images", metav1.CauseTypeFieldValueInvalid, "images is immutable")
		// Positive control: the same object with a longer minimum duration.
		By("adding or removing the list is refused too: the rule sits on the spec")
		removed := u.DeepCopy()
		unstructured.RemoveNestedField(removed.Object, "spec", "images")
		expectSchemaRefusal(k8s.Update(ctx, removed), "spec.images", metav1.CauseTypeFieldValueInvalid, "images is immutable")
		none := lease(ns, "unbooked")
		unstructured.RemoveNestedField(none.Object, "spec", "images")
		Expect(k8s.Create(ctx, none)).To(Succeed())
		added := none.DeepCopy()
		Expect(unstructured.SetNestedStringSlice(added.Object, []string{"sequoia"}, "spec", "images")).To(Succeed())
		expectSchemaRefusal(k8s.Update(ctx, added), "spec.images", metav1.CauseTypeFieldValueInvalid, "images is immutable")
		longer := u.DeepCopy()
		Expect(unstructured.SetNestedField(longer.Object, "48h", "spec", "minimumDuration")).To(Succeed())
		Expect(k8s.Update(ctx, longer)).To(Succeed())
	})
})
