package policy

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/topdown"
)

// TestVirtualCacheAnswersAsOPAs: the flat virtual cache answers every Get
// and Keys as OPA's own tree does, over random sequences of Push, Pop, Put
// (values and undefined) and Get on references that share prefixes. Put
// is handed its key in one scratch buffer, cleared after each call, as
// OPA's function calls hand theirs (evalFunc.cacheKey): the cache must
// keep the key, not the buffer.
func TestVirtualCacheAnswersAsOPAs(t *testing.T) {
	refs := []ast.Ref{
		ast.MustParseRef("data.partial.macrack.lib.new"),
		ast.MustParseRef("data.partial.macrack.lib"),
		ast.MustParseRef("data.partial.macrack.lib.old"),
		ast.MustParseRef("data.macrack.lib.new"),
		ast.MustParseRef(`data.macrack.agent.scope.problems["Node"]`),
		ast.MustParseRef(`data.macrack.agent.scope.problems["MacNode"]`),
	}
	values := []*ast.Term{nil, ast.StringTerm("a"), ast.BooleanTerm(true), ast.ObjectTerm()}
	scratch := make(ast.Ref, 0, 8)
	rng := rand.New(rand.NewPCG(1, 2))
	var gets, hits int
	for round := 0; round < 200; round++ {
		ours, theirs := newVirtualCache(), topdown.NewVirtualCache()
		depth := 1
		for step := 0; step < 200; step++ {
			ref := refs[rng.IntN(len(refs))]
			switch op := rng.IntN(10); {
			case op == 0:
				ours.Push()
				theirs.Push()
				depth++
			case op == 1 && depth > 1:
				ours.Pop()
				theirs.Pop()
				depth--
			case op < 5:
				v := values[rng.IntN(len(values))]
				scratch = append(scratch[:0], ref...)
				ours.Put(scratch, v)
				theirs.Put(scratch, v)
				clear(scratch)
			default:
				gv, gu := ours.Get(ref)
				wv, wu := theirs.Get(ref)
				gets++
				if gv != nil || gu {
					hits++
				}
				if gv != wv || gu != wu {
					t.Fatalf("round %d step %d: Get(%v) = %v, %v; OPA's %v, %v", round, step, ref, gv, gu, wv, wu)
				}
			}
			if got, want := keyStrings(ours.Keys()), keyStrings(theirs.Keys()); !slices.Equal(got, want) {
				t.Fatalf("round %d step %d: Keys %v; OPA's %v", round, step, got, want)
			}
		}
	}
	if hits == 0 || hits == gets {
		t.Fatalf("%d of %d Gets hit: the sequences exercise one side only", hits, gets)
	}
}

func keyStrings(refs []ast.Ref) []string {
	out := make([]string, len(refs))
	for i, r := range refs {
		out[i] = r.String()
	}
	slices.Sort(out)
	return out
}
