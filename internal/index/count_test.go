package index

import (
	"slices"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
)

func reporting(name string, images ...fleetv1alpha1.ReportedImage) *fleetv1alpha1.MacNode {
	return &fleetv1alpha1.MacNode{ObjectMeta: metav1.ObjectMeta{Name: name},
		Status: fleetv1alpha1.MacNodeStatus{Reported: &fleetv1alpha1.ReportedFacts{Images: images}}}
}

func copyOf(name, digest string, phase fleetv1alpha1.ImagePhase) fleetv1alpha1.ReportedImage {
	return fleetv1alpha1.ReportedImage{Name: name, Digest: digest, Phase: phase}
}

// The count follows each object from the keys it had to the keys it has,
// through adds, updates, deletes and the informer's tombstones, and tells
// which keys moved.
func TestCountFollowsTheInformer(t *testing.T) {
	c := NewCount(VerifiedImages)
	var moved []string
	h := c.Handler(func(k string) { moved = append(moved, k) })
	a, b := VerifiedImageKey("sequoia", "sha256:a"), VerifiedImageKey("tahoe", "sha256:b")

	h.OnAdd(reporting("n1", copyOf("sequoia", "sha256:a", fleetv1alpha1.ImageReady)), true)
	h.OnAdd(reporting("n2", copyOf("sequoia", "sha256:a", fleetv1alpha1.ImagePulling)), true)
	h.OnAdd(&fleetv1alpha1.MacNode{ObjectMeta: metav1.ObjectMeta{Name: "n3"}}, true)
	if c.Get(a) != 1 || !slices.Equal(moved, []string{a}) {
		t.Fatalf("after adds: %d copies of %s, moved %v; want 1 and [%s] (a pull in progress is no copy)", c.Get(a), a, moved, a)
	}

	moved = nil
	h.OnUpdate(reporting("n2", copyOf("sequoia", "sha256:a", fleetv1alpha1.ImagePulling)),
		reporting("n2", copyOf("sequoia", "sha256:a", fleetv1alpha1.ImageReady), copyOf("tahoe", "sha256:b", fleetv1alpha1.ImageReady)))
	h.OnUpdate(reporting("n1", copyOf("sequoia", "sha256:a", fleetv1alpha1.ImageReady)),
		reporting("n1", copyOf("sequoia", "sha256:a", fleetv1alpha1.ImageReady))) // a resync
	if c.Get(a) != 2 || c.Get(b) != 1 || !slices.Equal(moved, []string{a, b}) {
		t.Fatalf("after updates: %d and %d, moved %v; want 2, 1 and [%s %s]", c.Get(a), c.Get(b), moved, a, b)
	}

	moved = nil
	h.OnDelete(toolscache.DeletedFinalStateUnknown{Key: "n2",
		Obj: reporting("n2", copyOf("sequoia", "sha256:a", fleetv1alpha1.ImageReady), copyOf("tahoe", "sha256:b", fleetv1alpha1.ImageReady))})
	h.OnDelete(reporting("n1", copyOf("sequoia", "sha256:a", fleetv1alpha1.ImageReady)))
	if c.Get(a) != 0 || c.Get(b) != 0 || len(moved) != 3 {
		t.Fatalf("after deletes: %d and %d, moved %v; want 0, 0 and three moves", c.Get(a), c.Get(b), moved)
	}
	if len(c.n) != 0 {
		t.Errorf("keys counted to zero are kept: %v", c.n)
	}
}

// An object that names a key twice counts once, and what is not an object
// counts nothing.
func TestCountCountsAnObjectOncePerKey(t *testing.T) {
	c := NewCount(func(o client.Object) []string { return []string{"k", "k", "j"} })
	h := c.Handler(nil)
	h.OnAdd(reporting("n1"), false)
	h.OnAdd("not an object", false)
	if c.Get("k") != 1 || c.Get("j") != 1 {
		t.Fatalf("k %d, j %d; want 1 each", c.Get("k"), c.Get("j"))
	}
	h.OnDelete(reporting("n1"))
	if c.Get("k") != 0 || c.Get("j") != 0 {
		t.Fatalf("after the delete: k %d, j %d", c.Get("k"), c.Get("j"))
	}
}
