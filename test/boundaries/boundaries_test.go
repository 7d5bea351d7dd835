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

func TestTheCheckCatchesAnAgentThatImportsAReconcilerAndARunnerThatReadsIndexes(t *testing.T) {
	violations, checked, err := Check(filepath.Join("testdata", "violation"), Rules)
	if err != nil {
		t.Fatal(err)
	}
	if len(checked) != 3 {
		t.Fatalf("want the fixture's agent, guest and runner packages checked, got %v", checked)
	}
	want := []Violation{
		{Package: "example.com/violation/internal/agent", Imports: "example.com/violation/internal/reconcile/lease"},
		{Package: "example.com/violation/internal/reconcile/gitlabrunner", Imports: "example.com/violation/internal/index"},
	}
	if len(violations) != len(want) || violations[0] != want[0] || violations[1] != want[1] {
		t.Fatalf("want exactly %v, got %v", want, violations)
	}
}
