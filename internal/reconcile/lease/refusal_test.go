package lease

import (
	"context"
	"errors"
	"io/fs"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	leasingv1alpha1 "github.com/boualleiguie/macrack-operator/api/leasing/v1alpha1"
	"github.com/boualleiguie/macrack-operator/internal/policy"
	"github.com/boualleiguie/macrack-operator/policies"
)

// refusingBundle is MacRack's bundle plus one rule that refuses every lease
// status write marking a lease Released.
func refusingBundle(t *testing.T) fs.FS {
	t.Helper()
	bundle := fstest.MapFS{}
	err := fs.WalkDir(policies.FS, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := fs.ReadFile(policies.FS, p)
		bundle[p] = &fstest.MapFile{Data: data}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	bundle["test/refuse_release.rego"] = &fstest.MapFile{Data: []byte(strings.TrimSpace(`
# METADATA
# title: test.refuse-release
# custom:
#   id: test.refuse-release
#   kinds:
#   - leasing.macrack.io/MacNodeLease
#   engines: [rego]
package macrack.test.refuse_release

violations contains {"code": "test.refuse-release", "message": "test.refuse-release: no release today"} if {
	input.object.status.phase == "Released"
}
`) + "\n")}
	return bundle
}

func TestAPolicyRefusalIsAConditionAndATerminalResult(t *testing.T) {
	f := newFixture(t, class("m4"), readyNode("a", nil), newLease("24h"))
	engine, err := policy.Load(context.Background(), refusingBundle(t), policy.WithTimeout(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	f.r.Engine = engine
	f.r.Recorder = events.NewFakeRecorder(100)
	f.reconcile(t)
	f.deleteLeaseAfter(t, 25*time.Hour)
	_, err = f.r.Reconcile(context.Background(), ctrl.Request{NamespacedName: types.NamespacedName{Namespace: "tenant-a", Name: "l1"}})
	if !errors.Is(err, reconcile.TerminalError(nil)) {
		t.Fatalf("want a terminal error, which retrying cannot change, got %v", err)
	}
	c := findCondition(f.lease(t).Status.Conditions, leasingv1alpha1.ConditionReleased)
	if c == nil || c.Reason != leasingv1alpha1.ReasonPolicyDenied || !strings.Contains(c.Message, "test.refuse-release: no release today") {
		t.Fatalf("want Released=False PolicyDenied naming the rule, got %+v", c)
	}

	// Positive control: the same lease with MacRack's bundle alone releases.
	g := newFixture(t, class("m4"), readyNode("a", nil), newLease("24h"))
	g.reconcile(t)
	g.clock.Step(25 * time.Hour)
	if err := g.c.Delete(context.Background(), g.lease(t)); err != nil {
		t.Fatal(err)
	}
	if _, err := g.r.Reconcile(context.Background(), ctrl.Request{NamespacedName: types.NamespacedName{Namespace: "tenant-a", Name: "l1"}}); err != nil {
		t.Fatalf("positive control: %v", err)
	}
}
