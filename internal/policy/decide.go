package policy

import (
	"context"
	"fmt"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/topdown"
)

// Decision is the answer to one request.
type Decision struct {
	// Violations lists every reason to refuse; none means allowed.
	Violations []Violation `json:"violations"`
	// Revision is the content hash of the policies that decided.
	Revision string `json:"revision"`
	// Rules lists the rules that applied.
	Rules []string `json:"rules"`
}

// Allowed reports whether no rule refused the request.
func (d Decision) Allowed() bool { return len(d.Violations) == 0 }

// Codes lists the codes of the violations, without repeats.
func (d Decision) Codes() []string {
	var codes []string
	seen := map[string]bool{}
	for _, v := range d.Violations {
		if !seen[v.Code] {
			seen[v.Code] = true
			codes = append(codes, v.Code)
		}
	}
	return codes
}

// prepared is an input converted once for both engines.
type prepared struct {
	in   Input
	rego ast.Value
	// shape is what the request fixes in advance of its objects; known
	// renders it as Rego input, for a rule's first request of this shape.
	shape shape
	e     *Engine
}

func (p *prepared) known() ast.Value {
	r := &p.in.Request
	params, err := p.e.input.paramsTerm(p.in.Params)
	if err != nil {
		params = ast.NullTerm()
	}
	return ast.NewObject(
		[2]*ast.Term{keyRequest, ast.ObjectTerm(
			[2]*ast.Term{keyOperation, ast.InternedTerm(r.Operation)},
			[2]*ast.Term{keyKind, p.e.input.kind(r.Kind)},
			[2]*ast.Term{keyResource, p.e.input.resource(r.Resource)},
			[2]*ast.Term{keySubResource, ast.InternedTerm(r.SubResource)},
		)},
		[2]*ast.Term{keyParams, params},
	)
}

func (e *Engine) prepare(in Input) (*prepared, error) {
	in.Object = StripManagedFields(in.Object)
	in.OldObject = StripManagedFields(in.OldObject)
	if in.Params == (Params{}) {
		in.Params = e.params
	}
	if err := in.complete(); err != nil {
		return nil, err
	}
	value, err := e.input.value(&in)
	if err != nil {
		return nil, fmt.Errorf("%w: converting for Rego: %w", ErrInput, err)
	}
	r := &in.Request
	return &prepared{in: in, rego: value, e: e, shape: shape{operation: r.Operation, subResource: r.SubResource,
		kind: r.Kind, resource: r.Resource, params: in.Params, object: in.Object != nil, oldObject: in.OldObject != nil}}, nil
}

// Decide evaluates every rule that applies to the request's kind. It fails
// closed: an engine error or the deadline denies with policy.error, and twins
// that answer differently deny with policy.disagreement. The error is
// non-nil only for a malformed input, which is denied too.
func (e *Engine) Decide(ctx context.Context, in Input) (Decision, error) {
	start := time.Now()
	defer func() { e.metrics.duration.Observe(time.Since(start).Seconds()) }()
	d := Decision{Revision: e.revision}
	p, err := e.prepare(in)
	if err != nil {
		d.Violations = []Violation{{Rule: "policy", Code: CodeError, Message: "policy.error: " + err.Error()}}
		e.metrics.countDenials("policy", d.Violations)
		return d, err
	}
	ctx, cancel := context.WithTimeout(ctx, e.timeout)
	defer cancel()
	stop, release := cancelOnDone(ctx)
	defer release()
	for _, r := range e.byKind[kindKey(p.in.Request.Kind.GroupKind())] {
		d.Rules = append(d.Rules, r.ID)
		vs := e.decideRule(ctx, stop, r, p)
		e.metrics.countDenials(r.ID, vs)
		d.Violations = append(d.Violations, vs...)
	}
	return d, nil
}

// Answers evaluates one rule in each engine, for tests, the fuzz target and
// the CLI. cel reports whether the CEL twin concerns this request.
func (e *Engine) Answers(ctx context.Context, id string, in Input) (regoAnswer, celAnswer Answer, cel bool, err error) {
	r, ok := e.Rule(id)
	if !ok {
		return Answer{}, Answer{}, false, fmt.Errorf("%w: %s", ErrUnknownRule, id)
	}
	p, err := e.prepare(in)
	if err != nil {
		return Answer{}, Answer{}, false, err
	}
	ctx, cancel := context.WithTimeout(ctx, e.timeout)
	defer cancel()
	stop, release := cancelOnDone(ctx)
	defer release()
	ro, co, cel := e.evalBoth(ctx, stop, r, p)
	if err := ctx.Err(); err != nil {
		// Past the deadline the answers are incomplete; Decide denies with
		// policy.error, and comparing them would be meaningless.
		return Answer{}, Answer{}, false, fmt.Errorf("%w: rule %s: %w", ErrDeadline, id, err)
	}
	return ro.answer(), co.answer(), cel, nil
}

// evalBoth times each engine's evaluation, in wall time whatever the
// business clock says.
func (e *Engine) evalBoth(ctx context.Context, stop topdown.Cancel, r *Rule, p *prepared) (regoOut, celOut outcome, celApplies bool) {
	if r.rego != nil {
		start := time.Now()
		regoOut = r.rego.decide(ctx, p, stop)
		observe(r.metrics.rego, start)
	} else {
		regoOut = outcome{missing: true}
	}
	switch {
	case r.cel != nil && r.cel.matches(&p.in.Request):
		celApplies = true
		start := time.Now()
		celOut = r.cel.eval(ctx, &p.in)
		observe(r.metrics.cel, start)
	case r.cel == nil && r.HasCEL():
		celApplies = true
		celOut = outcome{missing: true}
	}
	return regoOut, celOut, celApplies
}

func (e *Engine) decideRule(ctx context.Context, stop topdown.Cancel, r *Rule, p *prepared) []Violation {
	regoOut, celOut, celApplies := e.evalBoth(ctx, stop, r, p)
	if err := ctx.Err(); err != nil {
		// Past the deadline neither answer counts; an engine may have
		// stopped half-way.
		e.metrics.errors.WithLabelValues(r.ID, "deadline").Inc()
		e.metrics.decisions.WithLabelValues(r.ID, "error").Inc()
		return []Violation{{Rule: r.ID, Code: CodeError, Message: fmt.Sprintf("policy.error: rule %s was not decided in time: %v", r.ID, err)}}
	}
	ra := regoOut.answer()
	if celApplies {
		ca := celOut.answer()
		if !ra.Equal(ca) {
			e.metrics.disagreements.WithLabelValues(r.ID).Inc()
			e.metrics.decisions.WithLabelValues(r.ID, "disagreement").Inc()
			e.log.Info("Policy engines disagree", "rule", r.ID, "code", CodeDisagreement, "revision", e.revision,
				"request", p.in.Request.describe(), "rego", ra.String(), "cel", ca.String())
			return []Violation{{Rule: r.ID, Code: CodeDisagreement, Message: fmt.Sprintf(
				"policy.disagreement: rule %s: Rego says %s, CEL says %s; the request is refused until they agree", r.ID, ra, ca)}}
		}
		if ra.Kind == AnswerError {
			e.metrics.errors.WithLabelValues(r.ID, "cel").Inc()
		}
	}
	switch ra.Kind {
	case AnswerError:
		e.metrics.errors.WithLabelValues(r.ID, "rego").Inc()
		e.metrics.decisions.WithLabelValues(r.ID, "error").Inc()
		e.log.Info("Policy engine failed", "rule", r.ID, "code", CodeError, "revision", e.revision,
			"request", p.in.Request.describe(), "errors", ra.Detail)
		return []Violation{{Rule: r.ID, Code: CodeError, Message: fmt.Sprintf("policy.error: rule %s could not be evaluated: %s", r.ID, joinDetail(ra.Detail))}}
	case AnswerDeny:
		e.metrics.decisions.WithLabelValues(r.ID, "deny").Inc()
		return regoOut.violations
	case AnswerMissing:
		// Only a twin-less CEL rule gets here with celApplies false.
		e.metrics.decisions.WithLabelValues(r.ID, "error").Inc()
		return []Violation{{Rule: r.ID, Code: CodeError, Message: fmt.Sprintf("policy.error: rule %s has no Rego", r.ID)}}
	}
	e.metrics.decisions.WithLabelValues(r.ID, "allow").Inc()
	return nil
}

func joinDetail(d []string) string {
	out := ""
	for i, s := range d {
		if i > 0 {
			out += "; "
		}
		out += s
	}
	return out
}
