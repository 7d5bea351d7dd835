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

// TestCELVariablesAnswerAsThePlugins: the CEL twins with their variables
// bound by the engine (celVariables) answer what they answer with the
// variables bound by the API server's own composition, messages and errors
// included: on every vector, and on every vector changed by every fuzz
// mutator with each sweep value.
func TestCELVariablesAnswerAsThePlugins(t *testing.T) {
	ctx := context.Background()
	engine, err := policy.Load(ctx, policies.FS, policy.WithTimeout(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	plugin, err := policy.Load(ctx, policies.FS, policy.WithTimeout(time.Minute), policy.WithPluginVariables())
	if err != nil {
		t.Fatal(err)
	}
	cases, err := Load(os.DirFS(vectorsDir()))
	if err != nil {
		t.Fatal(err)
	}
	var compared, denied int
	compare := func(c Case, doc map[string]any, what string) {
		in, err := ParseInput(doc)
		if err != nil {
			return
		}
		_, pc, papplies, perr := plugin.Answers(ctx, c.Rule, in)
		_, ec, eapplies, eerr := engine.Answers(ctx, c.Rule, in)
		if !papplies {
			return
		}
		compared++
		if pc.Kind != policy.AnswerAllow {
			denied++
		}
		if (perr == nil) != (eerr == nil) || papplies != eapplies || pc.Kind != ec.Kind ||
			!slices.Equal(pc.Codes, ec.Codes) || !slices.Equal(pc.Detail, ec.Detail) {
			js, _ := json.Marshal(doc)
			t.Errorf("%s %s: the plugin's variables %s %v (%v), the engine's %s %v (%v)\ninput: %s", c.ID(), what, pc, pc.Detail, perr, ec, ec.Detail, eerr, js)
		}
	}
	for _, c := range cases {
		compare(c, c.Raw, "as written")
		for _, m := range mutators {
			for _, v := range sweep {
				doc := deepCopy(c.Raw)
				m.apply(doc, v.s, v.n)
				compare(c, doc, "mutated by "+m.name)
			}
		}
	}
	// Both sides of every twin's answer are exercised.
	if compared == 0 || denied == 0 || denied == compared {
		t.Fatalf("compared %d CEL answers, %d of them denials", compared, denied)
	}
	t.Logf("compared %d CEL answers, %d of them denials or errors", compared, denied)
}
