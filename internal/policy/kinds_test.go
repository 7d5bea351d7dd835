package policy

import (
	"os"
	"path/filepath"
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/yaml"
)

// TestNamespacedAgreesWithTheCRDs holds Namespaced to the scope each
// generated CRD declares, so that macrackctl never puts a cluster-scoped
// MacRack object in a namespace, nor leaves a namespaced one without.
func TestNamespacedAgreesWithTheCRDs(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("..", "..", "config", "crd", "bases", "*.yaml"))
	if err != nil || len(files) < 6 {
		t.Fatalf("want the six CRDs, got %q (%v)", files, err)
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var crd struct {
			Spec struct {
				Group string `json:"group"`
				Scope string `json:"scope"`
				Names struct {
					Kind string `json:"kind"`
				} `json:"names"`
			} `json:"spec"`
		}
		if err := yaml.Unmarshal(data, &crd); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		gk := schema.GroupKind{Group: crd.Spec.Group, Kind: crd.Spec.Names.Kind}
		namespaced, ok := Namespaced(gk)
		if !ok {
			t.Errorf("%s: Namespaced does not know %s", filepath.Base(f), gk)
			continue
		}
		if want := crd.Spec.Scope == "Namespaced"; namespaced != want {
			t.Errorf("%s: Namespaced(%s) = %v, but the CRD's scope is %s", filepath.Base(f), gk, namespaced, crd.Spec.Scope)
		}
	}
	for gk, want := range map[schema.GroupKind]bool{
		{Kind: "Pod"}: true, {Kind: "Node"}: false, {Group: "coordination.k8s.io", Kind: "Lease"}: true,
		{Group: "certificates.k8s.io", Kind: "CertificateSigningRequest"}: false,
		{Group: "authentication.k8s.io", Kind: "TokenRequest"}:            true,
		{Kind: "Secret"}: true,
	} {
		if got, ok := Namespaced(gk); !ok || got != want {
			t.Errorf("Namespaced(%s) = %v, %v; want %v, true", gk, got, ok, want)
		}
	}
	if _, ok := Namespaced(schema.GroupKind{Group: "apps", Kind: "Deployment"}); ok {
		t.Error("Namespaced claims to know apps/Deployment, which no rule concerns")
	}
}
