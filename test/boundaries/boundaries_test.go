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

func TestTheCheckCatchesAnAgentThatImportsAReconcilerARunnerThatReadsIndexesAnAPIThatImportsInternalAndAControllerThatLinksASink(t *testing.T) {
	violations, checked, err := Check(filepath.Join("testdata", "violation"), Rules)
	if err != nil {
		t.Fatal(err)
	}
	const fx = "example.com/violation/"
	// The exporter (internal/reconcile/audit) is excepted: it alone may
	// link a sink.
	wantChecked := []string{fx + "api/fleet/v1alpha1", fx + "internal/agent", fx + "internal/guest",
		fx + "internal/reconcile/gitlabrunner", fx + "internal/reconcile/lease", fx + "internal/reconcile/node"}
	if got := slices.Compact(slices.Clone(checked)); !slices.Equal(got, wantChecked) {
		t.Fatalf("want the fixture's packages %v checked, got %v", wantChecked, got)
	}
	// The lease fixture links the pure journal: no violation. The node
	// fixture links a sink, and through it the JetStream client (another
	// module's path).
	want := []Violation{
		{Package: fx + "internal/agent", Imports: fx + "internal/reconcile/lease"},
		{Package: fx + "api/fleet/v1alpha1", Imports: fx + "internal/enforcement"},
		{Package: fx + "internal/reconcile/gitlabrunner", Imports: fx + "internal/index"},
		{Package: fx + "internal/reconcile/node", Imports: "github.com/nats-io/nats.go"},
		{Package: fx + "internal/reconcile/node", Imports: fx + "internal/audit/sink"},
	}
	if !slices.Equal(violations, want) {
		t.Fatalf("want exactly %v, got %v", want, violations)
	}
}
