package inventory

import (
	"context"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	computev1alpha1 "github.com/boualleiguie/macrack-operator/api/compute/v1alpha1"
	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
	leasingv1alpha1 "github.com/boualleiguie/macrack-operator/api/leasing/v1alpha1"
	"github.com/boualleiguie/macrack-operator/internal/index"
)

var instanceKind = computev1alpha1.GroupVersion.WithKind("MacOSInstance").GroupKind()

// cluster holds a class, an image, the lease "build" bound to chassis c02a
// in phase, and the lease "new" that holds no chassis yet.
func cluster(t *testing.T, phase fleetv1alpha1.MacNodePhase) client.Client {
	t.Helper()
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{fleetv1alpha1.AddToScheme, leasingv1alpha1.AddToScheme, computev1alpha1.AddToScheme} {
		if err := add(s); err != nil {
			t.Fatal(err)
		}
	}
	b := fake.NewClientBuilder().WithScheme(s).WithObjects(
		&fleetv1alpha1.MacNodeClass{ObjectMeta: metav1.ObjectMeta{Name: "m4"}, Spec: fleetv1alpha1.MacNodeClassSpec{
			Chip: "M4", Memory: resource.MustParse("16Gi"), Disk: resource.MustParse("1T"), NetworkGbps: 10, VMCapacity: 2}},
		&fleetv1alpha1.MacOSImage{ObjectMeta: metav1.ObjectMeta{Name: "sequoia"}},
		&leasingv1alpha1.MacNodeLease{ObjectMeta: metav1.ObjectMeta{Name: "build", Namespace: "t"},
			Spec:   leasingv1alpha1.MacNodeLeaseSpec{NodeClassName: "m4", MinimumDuration: "24h"},
			Status: leasingv1alpha1.MacNodeLeaseStatus{Phase: leasingv1alpha1.LeaseBound, NodeName: "c02a", Serial: "C02A"}},
		&leasingv1alpha1.MacNodeLease{ObjectMeta: metav1.ObjectMeta{Name: "new", Namespace: "t"},
			Spec: leasingv1alpha1.MacNodeLeaseSpec{NodeClassName: "m4", MinimumDuration: "24h"}},
		&fleetv1alpha1.MacNode{ObjectMeta: metav1.ObjectMeta{Name: "c02a"},
			Spec: fleetv1alpha1.MacNodeSpec{Serial: "C02A", NodeClassName: "m4"},
			Status: fleetv1alpha1.MacNodeStatus{Phase: phase, Quarantine: &fleetv1alpha1.QuarantineStatus{
				BootID: "boot-1", Evidence: "VZErrorDomain code 6", QuarantinedAt: metav1.NewTime(time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC))}}},
	)
	for _, ix := range index.Definitions() {
		b = b.WithIndex(ix.Object, ix.Name, ix.Value)
	}
	return b.Build()
}

func inst(lease, nodeName string) map[string]any {
	return map[string]any{"apiVersion": "compute.macrack.io/v1alpha1", "kind": "MacOSInstance",
		"metadata": map[string]any{"name": "ci-1", "namespace": "t"},
		"spec":     map[string]any{"leaseName": lease, "imageName": "sequoia"},
		"status":   map[string]any{"nodeName": nodeName}}
}

func phaseOf(t *testing.T, inv map[string]any) string {
	t.Helper()
	mn, ok := inv["macNode"].(map[string]any)
	if !ok {
		t.Fatalf("no macNode in the inventory: %v", inv)
	}
	status, _ := mn["status"].(map[string]any)
	phase, _ := status["phase"].(string)
	return phase
}

// A new instance carries its lease and the MacNode the lease holds, for
// quarantine.fence, beside its class and image.
func TestANewInstanceCarriesItsLeasesMacNode(t *testing.T) {
	inv, err := Builder{Reader: cluster(t, fleetv1alpha1.MacNodeQuarantined)}.For(context.Background(), instanceKind, inst("build", ""), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, role := range []string{"lease", "nodeClass", "leaseInstances", "image", "macNode"} {
		if _, ok := inv[role]; !ok {
			t.Errorf("no %s in the inventory of a new instance: %v", role, inv)
		}
	}
	if got := phaseOf(t, inv); got != "Quarantined" {
		t.Fatalf("macNode phase %q, want Quarantined", got)
	}
	mn := inv["macNode"].(map[string]any)
	if md, _ := mn["metadata"].(map[string]any); md["name"] != "c02a" {
		t.Fatalf("macNode is %v, want the lease's chassis c02a", md["name"])
	}
}

// An instance of a lease that holds no chassis, an update and a delete
// carry no MacNode: the fence concerns only new instances of a bound lease.
func TestOnlyANewInstanceOfABoundLeaseCarriesAMacNode(t *testing.T) {
	b := Builder{Reader: cluster(t, fleetv1alpha1.MacNodeQuarantined)}
	for name, c := range map[string]struct{ obj, old map[string]any }{
		"a new instance of a lease that holds no chassis": {inst("new", ""), nil},
		"an update of a placed instance":                  {inst("build", "c02a"), inst("build", "c02a")},
		"a delete":                                        {nil, inst("build", "c02a")},
	} {
		inv, err := b.For(context.Background(), instanceKind, c.obj, c.old)
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := inv["macNode"]; ok {
			t.Errorf("%s carries a macNode: %v", name, inv["macNode"])
		}
		if _, ok := inv["lease"]; !ok {
			t.Errorf("%s carries no lease", name)
		}
	}
}

// With Getter set, as the webhook's live re-decide sets it, the MacNode is
// read from the Getter, not from the cache.
func TestTheLiveReadsTakeTheMacNodeFromTheGetter(t *testing.T) {
	b := Builder{Reader: cluster(t, fleetv1alpha1.MacNodeQuarantined), Getter: cluster(t, fleetv1alpha1.MacNodeLeased)}
	inv, err := b.For(context.Background(), instanceKind, inst("build", ""), nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := phaseOf(t, inv); got != "Leased" {
		t.Fatalf("macNode phase %q, want the Getter's Leased", got)
	}
}
