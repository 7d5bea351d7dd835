package vectors

import (
	"context"
	"io/fs"
	"os"
	"strings"
	"testing"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/rego"

	"github.com/boualleiguie/macrack-operator/internal/policy"
	"github.com/boualleiguie/macrack-operator/policies"
)

// fastForms are the rules whose violations answer set() for a routine
// write before their checks run: each rule's package, and the rule there
// that names the routine write.
var fastForms = map[string][2]string{
	"lease.floor":     {"data.macrack.lease.floor", "routine_write"},
	"node.commercial": {"data.macrack.node.commercial", "commercial_class"},
	"instance.tenant": {"data.macrack.instance.tenant", "routine_write"},
}

// TestTheFastFormsAnswerAsTheirChecks: on every vector, a rule with a fast
// form answers what its checks alone answer, and some vectors take the
// fast form, so that the comparison covers it.
func TestTheFastFormsAnswerAsTheirChecks(t *testing.T) {
	modules := map[string]string{}
	if err := fs.WalkDir(policies.FS, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(p, ".rego") || strings.HasSuffix(p, "_test.rego") {
			return err
		}
		b, err := fs.ReadFile(policies.FS, p)
		modules[p] = string(b)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	compiler, err := ast.CompileModulesWithOpt(modules, ast.CompileOpts{ParserOptions: ast.ParserOptions{RegoVersion: ast.RegoV1}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	query := func(q string) rego.PreparedEvalQuery {
		pq, err := rego.New(rego.Query(q), rego.Compiler(compiler), rego.StrictBuiltinErrors(true)).PrepareForEval(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return pq
	}
	cases, err := Load(os.DirFS(vectorsDir()))
	if err != nil {
		t.Fatal(err)
	}
	for rule, form := range fastForms {
		pkg := form[0]
		violations, checks, routineWrite := query(pkg+".violations"), query(pkg+".checks"), query(pkg+"."+form[1])
		routine := 0
		for _, c := range cases {
			if c.Rule != rule {
				continue
			}
			in, err := c.Input()
			if err != nil {
				t.Fatal(err)
			}
			doc, err := policy.RegoDocument(in)
			if err != nil {
				t.Fatal(err)
			}
			answer := func(pq rego.PreparedEvalQuery) string {
				rs, err := pq.Eval(ctx, rego.EvalInput(doc))
				if err != nil {
					return "error: " + err.Error()
				}
				if len(rs) == 0 {
					return "[]"
				}
				return ast.MustInterfaceToValue(rs[0].Expressions[0].Value).String()
			}
			got, want := answer(violations), answer(checks)
			if got != want {
				t.Errorf("%s: violations %s, its checks %s", c.ID(), got, want)
			}
			if answer(routineWrite) == "true" {
				routine++
			}
		}
		if routine == 0 {
			t.Errorf("%s: no vector is a routine write, so none exercises the fast form", rule)
		}
	}
}
