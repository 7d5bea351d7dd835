package vectors

import (
	"context"
	"encoding/json"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/boualleiguie/macrack-operator/internal/policy"
	"github.com/boualleiguie/macrack-operator/policies"
)

// wholeAndSpecialized loads the bundle twice: as the engine runs it, each
// rule's query specialized for the request's shape, and as a reference that
// runs every rule's whole query.
func wholeAndSpecialized(t testing.TB) (whole, specialized *policy.Engine) {
	t.Helper()
	ctx := context.Background()
	specialized, err := policy.Load(ctx, policies.FS, policy.WithTimeout(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	whole, err = policy.Load(ctx, policies.FS, policy.WithTimeout(time.Minute), policy.WithoutSpecialization())
	if err != nil {
		t.Fatal(err)
	}
	return whole, specialized
}

// sameRegoAnswer compares two Rego answers whole: kind, codes and every
// message or error.
func sameRegoAnswer(a, b policy.Answer) bool {
	return a.Equal(b) && slices.Equal(a.Detail, b.Detail)
}

// sweep are the values each mutator is tried with: strings that parse as
// durations, quantities and names, and numbers around the rules' bounds.
var (
	sweep = []struct {
		s string
		n int64
	}{{"24h", 86400}, {"aaaaa", 87601}}
)

// TestSpecializedRulesAnswerAsWholeRules: the query each rule runs for a
// request's shape (operation, kind, subresource, params), specialized by
// partial evaluation, answers what the rule's whole query answers, messages
// and errors included: on every vector, and on every vector changed by every
// fuzz mutator (the operation and the subresource among them) with each
// sweep value, and without its object or its oldObject.
func TestSpecializedRulesAnswerAsWholeRules(t *testing.T) {
	whole, specialized := wholeAndSpecialized(t)
	cases, err := Load(os.DirFS(vectorsDir()))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	compare := func(c Case, doc map[string]any, what string) {
		in, err := ParseInput(doc)
		if err != nil {
			return
		}
		ws, _, _, werr := whole.Answers(ctx, c.Rule, in)
		ss, _, _, serr := specialized.Answers(ctx, c.Rule, in)
		if (werr == nil) != (serr == nil) || !sameRegoAnswer(ws, ss) {
			js, _ := json.Marshal(doc)
			t.Errorf("%s %s: whole rule %s %v (%v), specialized %s %v (%v)\ninput: %s", c.ID(), what, ws, ws.Detail, werr, ss, ss.Detail, serr, js)
		}
	}
	inputs := 0
	for _, c := range cases {
		compare(c, c.Raw, "as written")
		// Which objects a request has is part of its shape.
		for _, key := range []string{"object", "oldObject"} {
			if _, has := c.Raw[key]; has {
				doc := deepCopy(c.Raw)
				delete(doc, key)
				compare(c, doc, "without its "+key)
			}
		}
		for _, m := range mutators {
			for _, v := range sweep {
				doc := deepCopy(c.Raw)
				m.apply(doc, v.s, v.n)
				compare(c, doc, "mutated by "+m.name)
				inputs++
			}
		}
	}
	t.Logf("%d vectors, %d mutated inputs", len(cases), inputs)
}
