package main

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/boualleiguie/macrack-operator/internal/enforcement"
	"github.com/boualleiguie/macrack-operator/internal/policy"
	"github.com/boualleiguie/macrack-operator/internal/policy/vectors"
)

const root = "../.."

func load(t *testing.T) (*policy.Engine, []vectors.Case, []enforcement.Point) {
	t.Helper()
	e, err := policy.Load(context.Background(), os.DirFS(filepath.Join(root, "policies")))
	if err != nil {
		t.Fatal(err)
	}
	cases, err := vectors.Load(os.DirFS(filepath.Join(root, "test", "policy")))
	if err != nil {
		t.Fatal(err)
	}
	points, err := registry(root, e)
	if err != nil {
		t.Fatal(err)
	}
	return e, cases, points
}

// matrixCells reads the matrix of a compliance page: rule and layer to cell.
func matrixCells(t *testing.T, page string) map[[2]string]string {
	t.Helper()
	var header []string
	cells := map[[2]string]string{}
	for _, line := range strings.Split(page, "\n") {
		if strings.HasPrefix(line, "| rule |") {
			header = splitRow(line)
			continue
		}
		if header == nil || strings.HasPrefix(line, "|---") {
			continue
		}
		if !strings.HasPrefix(line, "| `") {
			break
		}
		row := splitRow(line)
		for i := 1; i < len(row) && i < len(header); i++ {
			if row[i] != "" {
				cells[[2]string{row[0], header[i]}] = row[i]
			}
		}
	}
	if header == nil {
		t.Fatal("the page has no matrix")
	}
	return cells
}

func splitRow(line string) []string {
	line = strings.Trim(line, "|")
	var out []string
	for _, c := range strings.Split(strings.ReplaceAll(line, `\|`, "\x00"), "|") {
		out = append(out, strings.ReplaceAll(strings.TrimSpace(c), "\x00", `\|`))
	}
	return out
}

// diffCells names every cell that one matrix has and the other has not,
// or has with other text.
func diffCells(got, want map[[2]string]string) []string {
	var out []string
	for k, w := range want {
		switch g, ok := got[k]; {
		case !ok:
			out = append(out, "removed: "+k[0]+" at the "+k[1])
		case g != w:
			out = append(out, "changed: "+k[0]+" at the "+k[1])
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			out = append(out, "invented: "+k[0]+" at the "+k[1])
		}
	}
	slices.Sort(out)
	return out
}

// TestTheMatrixIsTheRegistry: every cell of docs/compliance.md is the
// registry's, and the registry holds against the code and its tests.
func TestTheMatrixIsTheRegistry(t *testing.T) {
	e, cases, points := load(t)
	if err := checkRegistry(root, e, cases, points); err != nil {
		t.Fatalf("the registry does not hold:\n%v", err)
	}
	page, err := os.ReadFile(filepath.Join(root, "docs", "compliance.md"))
	if err != nil {
		t.Fatal(err)
	}
	want := matrixCells(t, renderMatrix(e.Rules(), points))
	if d := diffCells(matrixCells(t, string(page)), want); len(d) > 0 {
		t.Errorf("docs/compliance.md's matrix is not the registry's (run make generate):\n%s", strings.Join(d, "\n"))
	}
	for _, l := range enforcement.Layers {
		if !slices.ContainsFunc(points, func(p enforcement.Point) bool { return p.Layer == l }) {
			t.Errorf("no cell at the %s", l)
		}
	}
}

// TestAnEditedPageFails is the page check's control: a cell removed from
// the page, or one invented on it, is named.
func TestAnEditedPageFails(t *testing.T) {
	e, _, points := load(t)
	page := renderMatrix(e.Rules(), points)
	want := matrixCells(t, page)
	removed := strings.Replace(page, cell(points, "lease.floor", enforcement.Reconciler), "", 1)
	if d := diffCells(matrixCells(t, removed), want); !slices.Equal(d, []string{"removed: `lease.floor` at the reconciler"}) {
		t.Errorf("a removed cell: %v", d)
	}
	lines := strings.Split(page, "\n")
	for i, l := range lines {
		if strings.HasPrefix(l, "| `tenancy.serial` |") {
			lines[i] = strings.TrimSuffix(l, " |") + "the agent never leases a serial twice |"
		}
	}
	if d := diffCells(matrixCells(t, strings.Join(lines, "\n")), want); !slices.Equal(d, []string{"invented: `tenancy.serial` at the agent"}) {
		t.Errorf("an invented cell: %v", d)
	}
}

// TestARemovedPointFails: take any point out of the registry, and the
// test that proves it, the webhook's configuration or the CEL twin still
// says the layer enforces the rule.
func TestARemovedPointFails(t *testing.T) {
	e, cases, points := load(t)
	for i, p := range points {
		rest := slices.Delete(slices.Clone(points), i, i+1)
		err := checkRegistry(root, e, cases, rest)
		if err == nil {
			t.Errorf("without the %s point for %s (%s), the registry still holds", p.Layer, p.Rule, p.Proof.Test)
			continue
		}
		if !strings.Contains(err.Error(), p.Rule) {
			t.Errorf("without the %s point for %s, the error does not name the rule: %v", p.Layer, p.Rule, err)
		}
	}
}

// TestAnInventedPointFails: a point whose test does not exist, does not
// say it proves the rule, runs other layers too, or (for the schema) names
// a field without a constraint, or a webhook point for a rule the webhook
// never receives, is refused.
func TestAnInventedPointFails(t *testing.T) {
	e, cases, points := load(t)
	invented := map[string]enforcement.Point{
		"a test that does not exist": {Rule: "lease.floor", Layer: enforcement.Agent, What: "x",
			Proof: enforcement.Proof{File: "internal/agent/instances/instances_test.go", Test: "TestTheAgentEnforcesTheFloor"}},
		"a test that proves another rule": {Rule: "lease.floor", Layer: enforcement.Agent, What: "x",
			Proof: enforcement.Proof{File: "internal/agent/instances/instances_test.go", Test: "TestTheWipeIsRecordedBeforeTheFinalizerComesOff"}},
		"a test of every layer at once": {Rule: "instance.image", Layer: enforcement.Webhook,
			Proof: enforcement.Proof{File: "test/envtest/hostile/lifecycle_test.go", Test: "refuses at admission an instance whose disk cannot hold its image, with both sizes"}},
		"a schema field without a constraint": {Rule: "tenancy.serial", Layer: enforcement.Schema, What: "x", Field: "MacNodeLease status.serial",
			Proof: enforcement.Proof{File: "test/envtest/schema/schema_test.go", Test: "refuses a changed serial"}},
		"a rule that does not exist": {Rule: "lease.forever", Layer: enforcement.Reconciler, What: "x",
			Proof: enforcement.Proof{File: "test/envtest/reconcilers/refuse_test.go", Test: "the lease controller refuses to bind a 1h lease written straight to storage, and binds a 24h one"}},
		"a VAP for a rule without a CEL twin": {Rule: "tenancy.serial", Layer: enforcement.VAP, What: "x",
			Proof: enforcement.Proof{File: "test/envtest/vap/replay_test.go", Test: "The generated ValidatingAdmissionPolicies, with no webhook installed"}},
	}
	for name, p := range invented {
		if err := checkRegistry(root, e, cases, append(slices.Clone(points), p)); err == nil {
			t.Errorf("%s: the registry holds with it", name)
		}
	}
}

// The hostile table in docs/compliance.md lists every case of the review
// rounds' hostile files, and nothing else: a case added, renamed or
// removed without `make generate` fails here.
func TestTheHostileTableListsEveryCase(t *testing.T) {
	cases, err := hostileCases(root)
	if err != nil {
		t.Fatal(err)
	}
	if len(cases) == 0 {
		t.Fatalf("no hostile case in %s", hostileGlob)
	}
	page, err := os.ReadFile(filepath.Join(root, "docs", "compliance.md"))
	if err != nil {
		t.Fatal(err)
	}
	var rows []string
	in := false
	for _, line := range strings.Split(string(page), "\n") {
		switch {
		case strings.HasPrefix(line, "| attack |"):
			in = true
		case in && strings.HasPrefix(line, "|---"):
		case in && strings.HasPrefix(line, "| "):
			rows = append(rows, line)
		case in:
			in = false
		}
	}
	var want []string
	for _, c := range cases {
		want = append(want, "| "+c.Attack+" | "+c.Outcome+" | [`"+c.File+"`](../"+c.File+") |")
	}
	if !slices.Equal(rows, want) {
		t.Fatalf("docs/compliance.md's hostile table is stale: run `make generate`.\nhas:\n%s\nwant:\n%s", strings.Join(rows, "\n"), strings.Join(want, "\n"))
	}
}

func TestAHostileCaseMustSayWhatRefusesIt(t *testing.T) {
	dir := t.TempDir()
	f := filepath.Join(dir, filepath.FromSlash(hostileGlob))
	f = strings.Replace(f, "round3_*_test.go", "round3_x_test.go", 1)
	if err := os.MkdirAll(filepath.Dir(f), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(f, []byte("package hostile\nvar _ = It(\"a tenant does something\", func() {})\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := hostileCases(dir); err == nil || !strings.Contains(err.Error(), "does not read") {
		t.Fatalf("an It without its outcome: %v", err)
	}
	if err := os.WriteFile(f, []byte("package hostile\nvar _ = It(\"a tenant does something: refused by RBAC\", func() {})\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := hostileCases(dir)
	if err != nil || len(got) != 1 || got[0].Attack != "a tenant does something" || got[0].Outcome != "refused by RBAC" {
		t.Fatalf("got %+v, %v", got, err)
	}
}
