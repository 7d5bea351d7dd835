package schema

import (
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// pinned is a digest-pinned golden reference.
const pinned = "registry.example.com/macrack/sequoia@sha256:" +
	"0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

func macOSImage(name, source string) *unstructured.Unstructured {
	return obj("fleet.macrack.io/v1alpha1", "MacOSImage", name, map[string]any{"source": source})
}

var _ = Describe("MacOSImage.spec.source", func() {
	const digestMessage = "source must be an OCI reference pinned by digest"

	It("accepts a reference pinned by digest, with or without a port or a tag beside the digest", func() {
		for i, source := range []string{
			pinned,
			"127.0.0.1:5000/macrack/sequoia-15.5@sha256:" + strings.Repeat("a", 64),
			"registry.example.com/macrack/sequoia:15.5@sha256:" + strings.Repeat("b", 64),
		} {
			Expect(k8s.Create(ctx, macOSImage("src-ok-"+string(rune('a'+i)), source))).To(Succeed(), source)
		}
	})

	It("refuses a tag without a digest, saying to pin by digest", func() {
		err := k8s.Create(ctx, macOSImage("src-tag", "registry.example.com/macrack/x:15.5"))
		expectSchemaRefusal(err, "spec.source", metav1.CauseTypeFieldValueInvalid, digestMessage)
		Expect(err.Error()).To(ContainSubstring("a tag alone can move under a running fleet"))
	})

	It("refuses a URL rather than a reference", func() {
		for i, source := range []string{
			"oras://registry.example.com/macrack/sequoia@sha256:" + strings.Repeat("c", 64),
			"https://registry.example.com/macrack/sequoia@sha256:" + strings.Repeat("d", 64),
		} {
			err := k8s.Create(ctx, macOSImage("src-url-"+string(rune('a'+i)), source))
			expectSchemaRefusal(err, "spec.source", metav1.CauseTypeFieldValueInvalid, digestMessage)
		}
	})

	It("refuses a digest that is not sha256 of 64 hex digits", func() {
		for i, source := range []string{
			"registry.example.com/macrack/sequoia@sha256:" + strings.Repeat("e", 63),
			"registry.example.com/macrack/sequoia@sha512:" + strings.Repeat("f", 128),
			"registry.example.com/macrack/sequoia@sha256:" + strings.Repeat("A", 64),
		} {
			err := k8s.Create(ctx, macOSImage("src-digest-"+string(rune('a'+i)), source))
			expectSchemaRefusal(err, "spec.source", metav1.CauseTypeFieldValueInvalid, digestMessage)
		}
	})

	It("is immutable, while the image's other fields change", func() {
		img := macOSImage("src-immutable", pinned)
		Expect(k8s.Create(ctx, img)).To(Succeed())

		// Positive control: another field changes.
		Expect(unstructured.SetNestedField(img.Object, "registry-credentials", "spec", "pullSecretName")).To(Succeed())
		Expect(unstructured.SetNestedStringSlice(img.Object, []string{"m4-16g-1t"}, "spec", "prePull", "nodeClassNames")).To(Succeed())
		Expect(k8s.Update(ctx, img)).To(Succeed(), "the pull Secret and the pre-pull change")

		changed := img.DeepCopy()
		Expect(unstructured.SetNestedField(changed.Object, strings.Replace(pinned, "0123456789abcdef", "fedcba9876543210", 1),
			"spec", "source")).To(Succeed())
		err := k8s.Update(ctx, changed)
		expectSchemaRefusal(err, "spec.source", metav1.CauseTypeFieldValueInvalid, "source is immutable")
	})
})
