package policy

import (
	"context"
	"fmt"

	"github.com/open-policy-agent/opa/v1/ast"
	opametrics "github.com/open-policy-agent/opa/v1/metrics"
	"github.com/open-policy-agent/opa/v1/rego"
	"github.com/open-policy-agent/opa/v1/topdown"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// regoRule is a rule's Rego: the query data.macrack.<area>.<rule>.violations
// prepared on the whole bundle, and the same query specialized, by partial
// evaluation, for each shape of request it is asked about (see shape).
type regoRule struct {
	id    string
	query rego.PreparedEvalQuery
	// compiler is the bundle's, which partial evaluation reads; modules
	// are the rule's module and the libraries, parsed and not compiled, for
	// the specialized queries' compilers.
	compiler *ast.Compiler
	modules  map[string]*ast.Module
	pkg      ast.Ref
	// notInlined are the bundle's rules partial evaluation keeps as rules
	// of their own (see notInlined).
	notInlined []string
	// whole turns specialization off: every request runs query.
	whole       bool
	specialized boundedCache[shape, *specialized]
}

// shape is what a request fixes in advance of its objects: the operation,
// the kind and resource, the subresource, the params, and which of object and
// oldObject it has. Rules test these in their guards, read the agents'
// namespace, the operator's name and the token audiences from the params,
// and compare an update's object with its oldObject; a query specialized for
// a shape has them evaluated once, and keeps only the bodies that can apply
// to it (a create's has no body that reads the oldObject it lacks).
type shape struct {
	operation, subResource string
	kind                   schema.GroupVersionKind
	resource               schema.GroupVersionResource
	params                 Params
	object, oldObject      bool
}

// specialized is a rule's query for one shape.
type specialized struct {
	query rego.PreparedEvalQuery
	// none reports that no violation can arise for the shape: its guards
	// exclude it. Decide skips the rule.
	none bool
	// err is why the shape runs the whole query, if it does.
	err error
}

// violationsVar binds the rule's violations in every query.
const violationsVar = "violations"

// forbiddenBuiltins are left out of the capabilities: rules never read the
// wall clock or reach outside the input, so that a decision depends on the
// input alone.
var forbiddenBuiltins = map[string]bool{
	"time.now_ns":        true,
	"http.send":          true,
	"net.lookup_ip_addr": true,
	"opa.runtime":        true,
	"rand.intn":          true,
	"uuid.rfc4122":       true,
}

// capabilities are OPA's, minus the forbidden builtins.
func capabilities() *ast.Capabilities {
	caps := ast.CapabilitiesForThisVersion()
	kept := caps.Builtins[:0]
	for _, b := range caps.Builtins {
		if !forbiddenBuiltins[b.Name] {
			kept = append(kept, b)
		}
	}
	caps.Builtins = kept
	return caps
}

func newCompiler() *ast.Compiler {
	return ast.NewCompiler().WithCapabilities(capabilities()).WithUseTypeCheckAnnotations(true)
}

// violationsQuery is `violations = <pkg>.violations`.
func violationsQuery(pkg ast.Ref) ast.Body {
	return ast.NewBody(ast.Equality.Expr(ast.VarTerm(violationsVar), ast.NewTerm(pkg.Append(ast.StringTerm("violations")))))
}

func prepareRego(ctx context.Context, compiler *ast.Compiler, keep []string, id string, pkg ast.Ref, modules map[string]*ast.Module, whole bool) (*regoRule, error) {
	pq, err := rego.New(
		rego.ParsedQuery(violationsQuery(pkg)),
		rego.Compiler(compiler),
		rego.StrictBuiltinErrors(true),
	).PrepareForEval(ctx)
	if err != nil {
		return nil, fmt.Errorf("preparing %s's violations: %w", id, err)
	}
	return &regoRule{id: id, query: pq, compiler: compiler, modules: modules, pkg: pkg, whole: whole, notInlined: keep}, nil
}

// notInlined lists the rules and functions of the compiled bundle that
// partial evaluation must keep as rules of their own, rather than inline
// into the bodies that use them. Inlining the rest removes a rule call (its
// index lookup, bindings and cache entry) per use: a third of pod.shape's
// time (BENCHMARKS.md, issue 38). Kept are:
//   - what a body negates (`not lib.is_duration(x)`): inlined, its negation
//     becomes one body per negated expression, so that `not regex.match(p,
//     x)` would run without the is_string(x) that guards it, an error under
//     strict builtin errors where the rule answers a denial;
//   - functions and complete rules of more than one definition (or an
//     else): inlined, each use multiplies the bodies by its definitions
//     (tenancy.class's four lib.show calls made sixteen bodies), and two
//     definitions that disagree would no longer be a conflict error.
//
// A rule with a default is kept by OPA itself. Multi-value rules (`problems
// contains ...`) are inlined as one body per definition, which is what their
// union is. Each body keeps its expressions in their order.
func notInlined(c *ast.Compiler) []string {
	keep := map[string]bool{}
	definitions := map[string]int{}
	defaults := map[string]bool{}
	for _, m := range c.Modules {
		ast.WalkExprs(m, func(x *ast.Expr) bool {
			if x.Negated {
				ast.WalkRefs(x, func(ref ast.Ref) bool {
					if ref.HasPrefix(ast.DefaultRootRef) {
						keep[ref.GroundPrefix().String()] = true
					}
					return false
				})
			}
			return false
		})
		for _, r := range m.Rules {
			name := r.Ref().GroundPrefix().String()
			switch {
			case r.Default:
				defaults[name] = true
			case r.Head.RuleKind() == ast.SingleValue:
				definitions[name]++
				if r.Else != nil {
					definitions[name]++
				}
			}
		}
	}
	for name, n := range definitions {
		if n > 1 && !defaults[name] {
			keep[name] = true
		}
	}
	return sortedKeys(keep)
}

// unknowns are the parts of the input a shape does not fix: everything but
// what known renders, and but the objects the shape lacks, which are then
// undefined, as they are in the input.
func (s shape) unknowns() []*ast.Term {
	u := []*ast.Term{
		ast.MustParseTerm("input.now"),
		ast.MustParseTerm("input.inventory"),
		ast.MustParseTerm("input.request.name"),
		ast.MustParseTerm("input.request.namespace"),
		ast.MustParseTerm("input.request.userInfo"),
	}
	if s.object {
		u = append(u, ast.MustParseTerm("input.object"))
	}
	if s.oldObject {
		u = append(u, ast.MustParseTerm("input.oldObject"))
	}
	return u
}

// forShape is the rule's query specialized for s by OPA's partial
// evaluation: the shape's part of the input known (known renders it as the
// input builder does), the rest unknown. It evaluates, once, only what the
// shape fixes, drops the bodies whose guards exclude the shape, and inlines
// the helpers notInlined allows into the bodies that use them, each body
// whole and in its order, so that a type guard still runs before the
// builtin it guards (strict builtin errors). The rule's text is unchanged;
// a shape that cannot be specialized runs the whole query.
func (r *regoRule) forShape(ctx context.Context, s shape, known func() ast.Value) *specialized {
	if r.whole {
		return &specialized{query: r.query}
	}
	sp, _ := r.specialized.get(s, func() (*specialized, error) {
		sp, err := r.specialize(ctx, s, known())
		if err != nil {
			// Kept, so that the shape does not pay a failed specialization
			// on every request.
			return &specialized{query: r.query, err: err}, nil
		}
		return sp, nil
	})
	return sp
}

func (r *regoRule) specialize(ctx context.Context, s shape, input ast.Value) (*specialized, error) {
	pq, err := rego.New(
		rego.ParsedQuery(violationsQuery(r.pkg)),
		rego.Compiler(r.compiler),
		rego.ParsedUnknowns(s.unknowns()),
		rego.ParsedInput(input),
		rego.StrictBuiltinErrors(true),
		rego.DisableInlining(r.notInlined),
	).Partial(ctx)
	if err != nil {
		return nil, err
	}
	if len(pq.Queries) != 1 {
		return nil, fmt.Errorf("%s: partial evaluation gave %d queries", r.id, len(pq.Queries))
	}
	query := presentObjects(s, pq.Queries[0], pq.Support)
	if len(pq.Support) == 0 && isEmptySet(query) {
		// Nothing to evaluate: decide skips the rule, so no compiler is
		// built, nor kept for the life of the cache entry.
		return &specialized{none: true}, nil
	}
	// The residual's support modules may still name the rule's own rules and
	// the libraries: compile them together. A residual that names none of
	// them (most: partial evaluation inlined them) compiles alone, and its
	// compiler, kept with the cache entry, holds no copy of them.
	compiler := newCompiler()
	modules := make(map[string]*ast.Module, len(r.modules)+len(pq.Support))
	if namesBundle(query, pq.Support) {
		for name, m := range r.modules {
			modules[name] = m.Copy()
		}
	}
	for i, m := range pq.Support {
		modules[fmt.Sprintf("partial/%d.rego", i)] = m
	}
	if compiler.Compile(modules); compiler.Failed() {
		return nil, fmt.Errorf("%s: compiling the specialized query: %w", r.id, compiler.Errors)
	}
	prepared, err := rego.New(rego.ParsedQuery(query), rego.Compiler(compiler), rego.StrictBuiltinErrors(true)).PrepareForEval(ctx)
	if err != nil {
		return nil, fmt.Errorf("%s: preparing the specialized query: %w", r.id, err)
	}
	return &specialized{query: prepared}, nil
}

// partialRoot is where partial evaluation puts the support modules' rules.
var partialRoot = ast.DefaultRootRef.Append(ast.StringTerm("partial"))

// namesBundle reports whether query or its support refers to any document
// under data other than the support's own (data.partial): a rule of the
// bundle, which must then be compiled beside them. Any such reference
// counts, so that none is left undefined.
func namesBundle(query ast.Body, support []*ast.Module) bool {
	names := false
	visit := func(x any) {
		ast.WalkRefs(x, func(ref ast.Ref) bool {
			if ref.HasPrefix(ast.DefaultRootRef) && !ref.HasPrefix(partialRoot) {
				names = true
			}
			return names
		})
	}
	visit(query)
	for _, m := range support {
		for _, r := range m.Rules {
			if visit(r); names {
				return true
			}
		}
	}
	return names
}

// isEmptySet reports whether query is `violations = set()`: no violation
// can arise.
func isEmptySet(query ast.Body) bool {
	if len(query) != 1 || !query[0].IsEquality() {
		return false
	}
	for _, t := range query[0].Operands() {
		if s, ok := t.Value.(ast.Set); ok && s.Len() == 0 {
			return true
		}
	}
	return false
}

// cancelOnDone returns a query cancel that fires when ctx is done, and the
// func that releases it. One per request, shared by its rules: without it,
// OPA starts a goroutine per evaluation to watch the context.
func cancelOnDone(ctx context.Context) (topdown.Cancel, func() bool) {
	c := topdown.NewCancel()
	return c, context.AfterFunc(ctx, c.Cancel)
}

// decide evaluates the rule on a prepared request: the query specialized for
// its shape, unless the shape can have no violation.
func (r *regoRule) decide(ctx context.Context, p *prepared, cancel topdown.Cancel) outcome {
	sp := r.forShape(ctx, p.shape, p.known)
	if sp.none {
		return outcome{}
	}
	return r.eval(ctx, sp.query, p.rego, cancel)
}

// eval runs the query on the pre-converted input and normalises the answer.
// An undefined result (no such rule) is an empty set: nothing denied. cancel
// stops the evaluation (see cancelOnDone).
func (r *regoRule) eval(ctx context.Context, query rego.PreparedEvalQuery, input ast.Value, cancel topdown.Cancel) (out outcome) {
	// The input's objects convert lazily, and OPA panics on a value that
	// has no JSON form: that is an engine error, which denies.
	defer func() {
		if p := recover(); p != nil {
			out = outcome{errs: []string{fmt.Sprintf("%s: converting the input: %v", r.id, p)}}
		}
	}()
	// No metrics: nothing reads them, and timing every evaluation costs.
	cache := acquireVirtualCache()
	defer cache.release()
	rs, err := query.Eval(ctx, rego.EvalParsedInput(input), rego.EvalMetrics(opametrics.NoOp()), rego.EvalExternalCancel(cancel),
		rego.EvalVirtualCache(cache))
	if err != nil {
		return outcome{errs: []string{err.Error()}}
	}
	for _, result := range rs {
		set, ok := result.Bindings[violationsVar].([]any)
		if !ok {
			return outcome{errs: []string{fmt.Sprintf("%s: violations is %T, not a set", r.id, result.Bindings[violationsVar])}}
		}
		for _, item := range set {
			v, ok := item.(map[string]any)
			code, okCode := v["code"].(string)
			msg, okMsg := v["message"].(string)
			if !ok || !okCode || !okMsg {
				return outcome{errs: []string{fmt.Sprintf("%s: a violation is not {code, message}: %v", r.id, item)}}
			}
			out.violations = append(out.violations, Violation{Rule: r.id, Code: code, Message: msg})
		}
	}
	return out
}
