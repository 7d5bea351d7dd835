package boundaries

import (
	"path/filepath"
	"testing"
)

func TestTheRepositoryKeepsItsImportBoundaries(t *testing.T) {
	violations, checked, err := Check(filepath.Join("..", ".."), Rules)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range violations {
		t.Errorf("boundary violated: %s", v)
	}
	t.Logf("checked %d guarded packages: %v", len(checked), checked)
}

func TestTheCheckCatchesAnAgentThatImportsAReconciler(t *testing.T) {
	violations, checked, err := Check(filepath.Join("testdata", "violation"), Rules)
	if err != nil {
		t.Fatal(err)
	}
	if len(checked) != 2 {
		t.Fatalf("want the fixture's agent and guest packages checked, got %v", checked)
	}
	want := Violation{Package: "example.com/violation/internal/agent", Imports: "example.com/violation/internal/reconcile/lease"}
	if len(violations) != 1 || violations[0] != want {
		t.Fatalf("want exactly %v, got %v", want, violations)
	}
}
