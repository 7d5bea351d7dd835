package policy

import (
	"github.com/open-policy-agent/opa/v1/ast"
)

// presentObjects replaces, in a residual query and its support, every
// reference to a rule that is the request's object (or oldObject) when it
// has one by a reference to the object itself.
//
// The libraries name the objects through rules with a default:
//
//	default new := {}
//	new := input.object if is_object(input.object)
//
// Partial evaluation keeps such a rule as a rule (it never inlines one with
// a default), so each of a rule's reads of lib.new was a lookup of a
// virtual document (pod.shape's residual names it 25 times). A shape says which objects the request has, and the
// input builder only ever puts an object there (Input.Object is a
// map[string]any, left out when nil), so for a shape with the object
// is_object(input.object) holds, the default cannot apply and the rule is
// input.object. The rule is found by its residual form, not its name: one
// default and one body of exactly is_object(input.X) and v = input.X, the
// head's value v. Its unspecialized reference (data.<pkg>.<rule>, which
// comprehensions and kept functions still name) has the same value.
// TestSpecializedRulesAnswerAsWholeRules holds the result to the whole rule,
// with and without each object.
func presentObjects(s shape, query ast.Body, support []*ast.Module) ast.Body {
	present := map[string]bool{"object": s.object, "oldObject": s.oldObject}
	targets := map[string]ast.Ref{}
	for _, m := range support {
		byPath := map[string][]*ast.Rule{}
		var order []string
		for _, r := range m.Rules {
			p := m.Package.Path.Extend(r.Head.Ref()).String()
			if _, seen := byPath[p]; !seen {
				order = append(order, p)
			}
			byPath[p] = append(byPath[p], r)
		}
		for _, p := range order {
			field, ok := isObjectRule(byPath[p])
			if !ok || !present[field] {
				continue
			}
			target := ast.InputRootRef.Append(ast.StringTerm(field))
			ref := ast.MustParseRef(p)
			targets[ref.String()] = target
			// data.partial.<pkg>.<rule> is the support for data.<pkg>.<rule>.
			if len(ref) > 2 && ref[1].Value.Compare(ast.String("partial")) == 0 {
				targets[append(ast.Ref{ref[0]}, ref[2:]...).String()] = target
			}
		}
	}
	if len(targets) == 0 {
		return query
	}
	replace := func(ref ast.Ref) (ast.Value, error) {
		for n := len(ref); n > 1; n-- {
			if target, ok := targets[ref[:n].String()]; ok {
				return target.Concat(ref[n:]), nil
			}
		}
		return ref, nil
	}
	for _, m := range support {
		for _, r := range m.Rules {
			_, _ = ast.TransformRefs(r.Body, replace)
			if r.Head.Value != nil {
				_, _ = ast.TransformRefs(r.Head.Value, replace)
			}
			if r.Head.Key != nil {
				_, _ = ast.TransformRefs(r.Head.Key, replace)
			}
		}
	}
	out, err := ast.TransformRefs(query, replace)
	if err != nil {
		return query
	}
	return out.(ast.Body)
}

// isObjectRule reports whether rules are `default r := d` and `r := v if {
// is_object(input.X); v = input.X }`, in either order of the body's two
// expressions, and which X.
func isObjectRule(rules []*ast.Rule) (string, bool) {
	if len(rules) != 2 {
		return "", false
	}
	var body *ast.Rule
	defaults := 0
	for _, r := range rules {
		if r.Default {
			defaults++
		} else {
			body = r
		}
	}
	if defaults != 1 || body == nil || body.Else != nil || len(body.Head.Args) != 0 ||
		body.Head.RuleKind() != ast.SingleValue || len(body.Body) != 2 {
		return "", false
	}
	v, ok := body.Head.Value.Value.(ast.Var)
	if !ok {
		return "", false
	}
	var tested, bound string
	for _, x := range body.Body {
		switch {
		case x.Negated || len(x.With) != 0:
			return "", false
		case x.IsEquality():
			a, b := x.Operand(0), x.Operand(1)
			if a.Value.Compare(v) != 0 {
				a, b = b, a
			}
			if a.Value.Compare(v) != 0 {
				return "", false
			}
			bound = objectField(b)
		case x.IsCall() && x.Operator().Equal(ast.IsObject.Ref()) && len(x.Operands()) == 1:
			tested = objectField(x.Operand(0))
		default:
			return "", false
		}
	}
	if tested == "" || tested != bound {
		return "", false
	}
	return tested, true
}

// objectField is X for the term input.X, where X is object or oldObject.
func objectField(t *ast.Term) string {
	ref, ok := t.Value.(ast.Ref)
	if !ok || len(ref) != 2 || !ref.HasPrefix(ast.InputRootRef) {
		return ""
	}
	s, ok := ref[1].Value.(ast.String)
	if !ok || (s != "object" && s != "oldObject") {
		return ""
	}
	return string(s)
}
