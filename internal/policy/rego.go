package policy

import (
	"context"
	"fmt"

	"github.com/open-policy-agent/opa/v1/ast"
	opametrics "github.com/open-policy-agent/opa/v1/metrics"
	"github.com/open-policy-agent/opa/v1/rego"
	"github.com/open-policy-agent/opa/v1/topdown"
)

// regoRule is a rule's prepared Rego query: data.macrack.<area>.<rule>.violations.
type regoRule struct {
	id    string
	query rego.PreparedEvalQuery
}

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

func prepareRego(ctx context.Context, compiler *ast.Compiler, id string, pkg ast.Ref) (*regoRule, error) {
	query := pkg.Append(ast.StringTerm("violations")).String()
	pq, err := rego.New(
		rego.Query(query),
		rego.Compiler(compiler),
		rego.StrictBuiltinErrors(true),
	).PrepareForEval(ctx)
	if err != nil {
		return nil, fmt.Errorf("preparing %s: %w", query, err)
	}
	return &regoRule{id: id, query: pq}, nil
}

// cancelOnDone returns a query cancel that fires when ctx is done, and the
// func that releases it. One per request, shared by its rules: without it,
// OPA starts a goroutine per evaluation to watch the context.
func cancelOnDone(ctx context.Context) (topdown.Cancel, func() bool) {
	c := topdown.NewCancel()
	return c, context.AfterFunc(ctx, c.Cancel)
}

// eval runs the query on the pre-converted input and normalises the answer.
// An undefined result (no such rule) is an empty set: nothing denied. cancel
// stops the evaluation (see cancelOnDone).
func (r *regoRule) eval(ctx context.Context, input ast.Value, cancel topdown.Cancel) outcome {
	// No metrics: nothing reads them, and timing every evaluation costs.
	rs, err := r.query.Eval(ctx, rego.EvalParsedInput(input), rego.EvalMetrics(opametrics.NoOp()), rego.EvalExternalCancel(cancel))
	if err != nil {
		return outcome{errs: []string{err.Error()}}
	}
	var out outcome
	for _, result := range rs {
		for _, expr := range result.Expressions {
			set, ok := expr.Value.([]any)
			if !ok {
				return outcome{errs: []string{fmt.Sprintf("%s: violations is %T, not a set", r.id, expr.Value)}}
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
	}
	return out
}
