package policy

import (
	"testing"

	"github.com/open-policy-agent/opa/v1/ast"
)

// TestPresentObjectsReadsTheObjectItself: in a residual for a shape with an
// object, a rule that is the object when it is one (and a default
// otherwise) is read as input.object, under its partial name and its own,
// in the query and in the support's rules; a shape without the object, or a
// rule that asks more of the object, keeps the rule.
func TestPresentObjectsReadsTheObjectItself(t *testing.T) {
	const lib = `package partial.macrack.lib
new = __v if { is_object(input.object); __v = input.object }
default new = {}
old = __w if { __w = input.oldObject; is_object(input.oldObject) }
default old = {}
labelled = __x if { is_object(input.object); __x = input.object; __x.metadata.labels }
default labelled = {}
spec = __s if { __s = data.partial.macrack.lib.new.spec }
`
	const query = `x = data.partial.macrack.lib.new.spec; y = {z | z = data.macrack.lib.new.metadata}; o = data.partial.macrack.lib.old; l = data.partial.macrack.lib.labelled`
	cases := []struct {
		name        string
		shape       shape
		want, inLib string
	}{
		{"a shape with both objects reads both", shape{object: true, oldObject: true},
			`x = input.object.spec; y = {z | z = input.object.metadata}; o = input.oldObject; l = data.partial.macrack.lib.labelled`,
			`__s = input.object.spec`},
		{"a shape with the object only reads it, and keeps old", shape{object: true},
			`x = input.object.spec; y = {z | z = input.object.metadata}; o = data.partial.macrack.lib.old; l = data.partial.macrack.lib.labelled`,
			`__s = input.object.spec`},
		{"a shape without objects keeps every rule", shape{}, query, `__s = data.partial.macrack.lib.new.spec`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			support := ast.MustParseModule(lib)
			got := presentObjects(c.shape, ast.MustParseBody(query), []*ast.Module{support})
			if want := ast.MustParseBody(c.want); !got.Equal(want) {
				t.Errorf("got  %v\nwant %v", got, want)
			}
			// The support's own rules read it the same way.
			spec := support.Rules[len(support.Rules)-1].Body
			if want := ast.MustParseBody(c.inLib); !spec.Equal(want) {
				t.Errorf("support: got %v, want %v", spec, want)
			}
		})
	}
}
