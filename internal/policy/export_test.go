package policy

import (
	"context"

	"github.com/open-policy-agent/opa/v1/topdown"
)

// Specialization reports, for a test, how rule id runs for in: whether its
// shape can have no violation, and why it runs the whole query if it does.
func (e *Engine) Specialization(id string, in Input) (none bool, err error) {
	r, ok := e.Rule(id)
	if !ok || r.rego == nil {
		return false, ErrUnknownRule
	}
	p, err := e.prepare(in)
	if err != nil {
		return false, err
	}
	sp := r.rego.forShape(context.Background(), p.shape, p.known)
	return sp.none, sp.err
}

// Parts exposes one rule's decision split into its steps, for the
// benchmarks in package policy_test.
type Parts struct {
	e *Engine
	r *Rule
}

func NewParts(e *Engine, id string) Parts { r, _ := e.Rule(id); return Parts{e, r} }

func (p Parts) Prepare(in Input) (any, error) { return p.e.prepare(in) }

func (p Parts) Rego(ctx context.Context, stop topdown.Cancel, pr any) outcome {
	return p.r.rego.decide(ctx, pr.(*prepared), stop)
}

func (p Parts) CEL(ctx context.Context, pr any) outcome {
	if p.r.cel == nil || !p.r.cel.matches(&pr.(*prepared).in.Request) {
		return outcome{}
	}
	return p.r.cel.eval(ctx, &pr.(*prepared).in)
}

func CancelOnDone(ctx context.Context) (topdown.Cancel, func() bool) { return cancelOnDone(ctx) }
