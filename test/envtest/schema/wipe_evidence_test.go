package schema

import (
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// The agent writes wipe evidence into its MacNode, and the operator copies
// it into the chassis' history: a compromised agent may not make it say
// anything, nor make it huge.
var _ = Describe("MacNode.status.reported.wipes", func() {
	wipe := func(method, name string) map[string]any {
		return map[string]any{"namespace": "tenant-a", "name": name, "uid": "u-1", "leaseName": "build",
			"files": []any{"disk.img"}, "bytes": int64(4096), "method": method, "wipedAt": "2026-06-01T12:00:00Z"}
	}
	report := func(node string, w map[string]any) error {
		u := &unstructured.Unstructured{}
		u.SetAPIVersion("fleet.macrack.io/v1alpha1")
		u.SetKind("MacNode")
		Expect(k8s.Get(ctx, client.ObjectKey{Name: node}, u)).To(Succeed())
		Expect(unstructured.SetNestedSlice(u.Object, []any{w}, "status", "reported", "wipes")).To(Succeed())
		return k8s.Status().Update(ctx, u)
	}

	It("takes the evidence of a wipe by one of the three methods", func() {
		node := obj("fleet.macrack.io/v1alpha1", "MacNode", "c02wipe00001", map[string]any{"serial": "C02WIPE00001", "nodeClassName": "m4"})
		Expect(k8s.Create(ctx, node)).To(Succeed())
		Expect(report("c02wipe00001", wipe("apfs-clone-unlink", "ci-1"))).To(Succeed())

		err := report("c02wipe00001", wipe("shred -n 35", "ci-1"))
		expectSchemaRefusal(err, "status.reported.wipes[0].method", metav1.CauseTypeFieldValueNotSupported, "")

		err = report("c02wipe00001", wipe("unlink", strings.Repeat("n", 254)))
		expectSchemaRefusal(err, "status.reported.wipes[0].name", metav1.CauseTypeTooLong, "")
	})
})
