package policies

import (
	"io/fs"
	"path"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/open-policy-agent/opa/v1/ast"
)

// ruleFiles are the rules reviewers read: <area>/<rule>.rego and their CEL
// twins, without tests, the shared helpers or the conftest entry point.
func ruleFiles(t *testing.T, ext string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := fs.WalkDir(FS, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(p, ext) || strings.HasSuffix(p, "_test.rego") {
			return err
		}
		if dir := path.Dir(p); dir == "lib" || dir == "conftest" {
			return nil
		}
		b, err := FS.ReadFile(p)
		out[p] = string(b)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(out) == 0 {
		t.Fatalf("no %s rule files found", ext)
	}
	return out
}

// requestRefs are what a guard tests: the request's kind, operation and
// requester, directly or through the shared helpers.
// Rules are read as written, so a helper is named as the rule file names it.
var requestRefs = regexp.MustCompile(`^(input\.request\b|lib\.(kind|operation|username|is_operator|is_agent_of|enters_service|newly_placed_on)\b|(kind|node|from_agents_namespace)$)`)

// guards returns, for each rule body of a module, its head and the sorted
// expressions of the body that test the request: the body's guard.
func guards(m *ast.Module) []string {
	var out []string
	for _, r := range m.Rules {
		for rule := r; rule != nil; rule = rule.Else {
			var tests []string
			for _, expr := range rule.Body {
				found := false
				ast.WalkTerms(expr, func(term *ast.Term) bool {
					switch v := term.Value.(type) {
					case ast.Ref, ast.Var:
						found = found || requestRefs.MatchString(v.String())
					}
					return found
				})
				if found {
					tests = append(tests, expr.String())
				}
			}
			if len(tests) == 0 {
				continue
			}
			slices.Sort(tests)
			out = append(out, rule.Head.Ref().String()+" if "+strings.Join(tests, "; "))
		}
	}
	return out
}

// TestNoRuleRepeatsAGuard: a check that opens with the same test of the
// request as another check of the same rule repeats a guard; the checks
// belong under one rule that tests it once.
func TestNoRuleRepeatsAGuard(t *testing.T) {
	for p, src := range ruleFiles(t, ".rego") {
		m, err := ast.ParseModuleWithOpts(p, src, ast.ParserOptions{RegoVersion: ast.RegoV1})
		if err != nil {
			t.Fatal(err)
		}
		seen := map[string]int{}
		for _, g := range guards(m) {
			seen[g]++
		}
		for g, n := range seen {
			if n > 1 {
				t.Errorf("%s: %d checks open with the same guard: %s", p, n, g)
			}
		}
	}
}

// TestTheGuardCheckFindsRepeats is the check's positive control: the
// old form of a rule, one guard per check, fails it.
func TestTheGuardCheckFindsRepeats(t *testing.T) {
	src := `package macrack.x
import data.macrack.lib
violations contains "a" if {
	lib.kind == "MacNodeLease"
	input.object.a
}
violations contains "b" if {
	input.object.b
	lib.kind == "MacNodeLease"
}
violations contains "c" if {
	lib.kind == "MacNode"
	input.object.b
}`
	m, err := ast.ParseModuleWithOpts("x.rego", src, ast.ParserOptions{RegoVersion: ast.RegoV1})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	for _, g := range guards(m) {
		seen[g]++
	}
	if len(seen) != 2 || seen[`violations if equal(lib.kind, "MacNodeLease")`] != 2 {
		t.Errorf("guards = %v, want the MacNodeLease guard twice and the MacNode one once", seen)
	}
}

// costWords are how comments about evaluator cost read. The rules say what
// they refuse; BENCHMARKS.md says how fast.
var costWords = regexp.MustCompile(`(?i)\b(costs?|cheap(er|est)?|expensive|faster|slower|µs|microseconds?|rule index|lazy|spares?|lookups?)\b`)

// TestNoRuleTalksAboutCost: no comment in a rule file or a CEL twin reasons
// about evaluator cost.
func TestNoRuleTalksAboutCost(t *testing.T) {
	files := ruleFiles(t, ".rego")
	for p, src := range ruleFiles(t, ".cel.yaml") {
		files[p] = src
	}
	for p, src := range files {
		for i, line := range strings.Split(src, "\n") {
			_, comment, ok := strings.Cut(line, "#")
			if ok && costWords.MatchString(comment) {
				t.Errorf("%s:%d: a comment about cost: %s", p, i+1, strings.TrimSpace(line))
			}
		}
	}
	if !costWords.MatchString("# each variable costs every request an entry") {
		t.Error("the cost check misses its own example")
	}
}
