package policy

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/cel-go/cel"
)

// evalLiteral evaluates a rendered expression that reads no variable.
func evalLiteral(t *testing.T, expr string) any {
	t.Helper()
	env, err := cel.NewEnv()
	if err != nil {
		t.Fatal(err)
	}
	ast, iss := env.Compile(expr)
	if iss.Err() != nil {
		t.Fatalf("%q does not compile: %v", expr, iss.Err())
	}
	prg, err := env.Program(ast)
	if err != nil {
		t.Fatal(err)
	}
	out, _, err := prg.Eval(cel.NoVars())
	if err != nil {
		t.Fatal(err)
	}
	return out.Value()
}

func TestSettingsAreWrittenInAsTheLiteralsTheyAre(t *testing.T) {
	hostile := Params{
		AgentsNamespace:     `agents"); true || ("`,
		OperatorUsername:    "op\\'\n\u00e9",
		AgentTokenAudiences: ` https://a.example ,, "b" `,
	}
	declared := []string{"agentsNamespace", "operatorUsername", "agentTokenAudiences"}
	for _, tc := range []struct {
		expr string
		want any
	}{
		{"settings.agentsNamespace", hostile.AgentsNamespace},
		{"settings.operatorUsername", hostile.OperatorUsername},
		{"'system:serviceaccounts:' + settings.agentsNamespace", "system:serviceaccounts:" + hostile.AgentsNamespace},
		{"size(settings.agentTokenAudiences)", int64(2)},
		{"settings.agentTokenAudiences[1]", `"b"`},
	} {
		got, err := renderSettings(tc.expr, declared, hostile)
		if err != nil {
			t.Fatalf("%s: %v", tc.expr, err)
		}
		if v := evalLiteral(t, got); v != tc.want {
			t.Errorf("%s rendered as %s evaluates to %#v, want %#v", tc.expr, got, v, tc.want)
		}
	}
}

func TestSettingsThatAreNotReferencesAreRefused(t *testing.T) {
	p := Params{AgentsNamespace: "macrack-agents"}
	for _, tc := range []struct{ name, expr string }{
		{"an undeclared setting", "settings.operatorUsername == ''"},
		{"an unknown setting", "settings.everything"},
		{"a reference inside a string literal", "'settings.agentsNamespace' == settings.agentsNamespace"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := renderSettings(tc.expr, []string{"agentsNamespace"}, p); !errors.Is(err, ErrGenerate) {
				t.Fatalf("want ErrGenerate, got %v", err)
			}
		})
	}
	// Positive control: a field named settings of something else is left alone.
	got, err := renderSettings("object.settings.agentsNamespace == settings.agentsNamespace", []string{"agentsNamespace"}, p)
	if err != nil || !strings.HasPrefix(got, "object.settings.agentsNamespace == ") {
		t.Fatalf("got %q, %v", got, err)
	}
}
