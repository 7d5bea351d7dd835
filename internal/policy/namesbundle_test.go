package policy

import (
	"testing"

	"github.com/open-policy-agent/opa/v1/ast"
)

// A residual compiles alone only when it names nothing of the bundle: a
// reference to any rule outside data.partial keeps the rule's modules and
// the libraries beside it, so that none is left undefined.
func TestNamesBundleSeesEveryReferenceOutsideTheSupport(t *testing.T) {
	support := func(body string) []*ast.Module {
		return []*ast.Module{ast.MustParseModule("package partial.macrack.x\n\np[v] if { " + body + " }")}
	}
	for _, c := range []struct {
		name    string
		query   string
		support []*ast.Module
		want    bool
	}{
		{name: "the support's own rules and the input", query: "violations = data.partial.macrack.x.p", support: support("v := input.object.metadata.name"), want: false},
		{name: "an empty set", query: "violations = set()", want: false},
		{name: "a library's rule in the support", query: "violations = data.partial.macrack.x.p", support: support("v := data.macrack.lib.username"), want: true},
		{name: "the rule's own package in the query", query: "violations = data.macrack.agent.scope.violations", want: true},
		{name: "the whole of data", query: "x = data", want: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := namesBundle(ast.MustParseBody(c.query), c.support); got != c.want {
				t.Errorf("namesBundle(%s) = %v, want %v", c.query, got, c.want)
			}
		})
	}
}
