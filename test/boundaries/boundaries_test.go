package boundaries

import (
	"path/filepath"
	"slices"
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

func TestTheCheckCatchesAnAgentThatImportsAReconcilerARunnerThatReadsIndexesAndAnAPIThatImportsInternal(t *testing.T) {
	violations, checked, err := Check(filepath.Join("testdata", "violation"), Rules)
	if err != nil {
		t.Fatal(err)
	}
	if len(checked) != 4 {
		t.Fatalf("want the fixture's api, agent, guest and runner packages checked, got %v", checked)
	}
	want := []Violation{
		{Package: "example.com/violation/internal/agent", Imports: "example.com/violation/internal/reconcile/lease"},
		{Package: "example.com/violation/api/fleet/v1alpha1", Imports: "example.com/violation/internal/enforcement"},
		{Package: "example.com/violation/internal/reconcile/gitlabrunner", Imports: "example.com/violation/internal/index"},
	}
	if !slices.Equal(violations, want) {
		t.Fatalf("want exactly %v, got %v", want, violations)
	}
}
