package agent

import (
	"context"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
	"github.com/boualleiguie/macrack-operator/internal/agent/host"
	"github.com/boualleiguie/macrack-operator/internal/agent/report"
	macrackscheme "github.com/boualleiguie/macrack-operator/internal/scheme"
)

// The guest key's public half is published with the facts, in the facts'
// one write: no write of its own, on a report or after. The control: a
// facts source without the key publishes none.
func TestTheGuestKeyIsPublishedInTheFactsWrite(t *testing.T) {
	scheme, err := macrackscheme.New()
	if err != nil {
		t.Fatal(err)
	}
	mn := &fleetv1alpha1.MacNode{ObjectMeta: metav1.ObjectMeta{Name: testNode},
		Spec: fleetv1alpha1.MacNodeSpec{Serial: "C02TEST00001", NodeClassName: "m4-test"}}
	var mu sync.Mutex
	var patches []string
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(mn).WithStatusSubresource(&fleetv1alpha1.MacNode{}).
		WithInterceptorFuncs(interceptor.Funcs{
			SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, p client.Patch, opts ...client.SubResourcePatchOption) error {
				body, err := p.Data(obj)
				if err != nil {
					return err
				}
				mu.Lock()
				patches = append(patches, string(body))
				mu.Unlock()
				return c.SubResource(sub).Patch(ctx, obj, p, opts...)
			},
		}).Build()
	reported := func() *fleetv1alpha1.ReportedFacts {
		t.Helper()
		got := &fleetv1alpha1.MacNode{}
		if err := c.Get(context.Background(), client.ObjectKey{Name: testNode}, got); err != nil {
			t.Fatal(err)
		}
		return got.Status.Reported
	}
	// A reporter of its own for each report: one that wrote these facts
	// already would not write them again.
	fresh := func() *report.Reporter { return &report.Reporter{Client: c, NodeName: testNode} }
	source := host.StaticFacts{Reported: &fleetv1alpha1.ReportedFacts{Chip: "M4"}}

	control := Config{NodeName: testNode, Facts: source}
	if err := control.reportFactsOnce(context.Background(), fresh(), nil); err != nil {
		t.Fatal(err)
	}
	if r := reported(); r.GuestKey != nil || r.Chip != "M4" {
		t.Fatalf("control: reported %+v, want the chip and no guest key", r)
	}

	key, err := host.LoadGuestKey(filepath.Join(t.TempDir(), host.GuestKeyFile), logr.Discard())
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{NodeName: testNode, Facts: host.GuestKeyFacts{FactsSource: source, Key: key.Public()}}
	before := len(patches)
	for range 2 {
		if err := cfg.reportFactsOnce(context.Background(), fresh(), nil); err != nil {
			t.Fatal(err)
		}
	}
	r := reported()
	if r.GuestKey == nil || *r.GuestKey != key.Public() || r.Chip != "M4" {
		t.Fatalf("reported guest key %+v and chip %q, want %+v and M4", r.GuestKey, r.Chip, key.Public())
	}
	mu.Lock()
	defer mu.Unlock()
	if got := len(patches) - before; got != 2 {
		t.Fatalf("%d writes for two facts reports, want one each", got)
	}
	for _, p := range patches[before:] {
		if !strings.Contains(p, `"guestKey"`) || !strings.Contains(p, `"chip"`) {
			t.Fatalf("a facts write without the key or the facts: %s", p)
		}
	}
}
