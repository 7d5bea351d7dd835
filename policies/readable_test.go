package policies

import (
	"fmt"
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

// secondCopies lists what makes a rule file hold a second copy of its
// rule: violations answered by a complete rule (a routine write tested
// first, `violations := set() if routine_write else := checks`), a rule with
// an `else` whose last value is the empty set ahead of the checks, a long
// literal written twice, or a pattern that policies/lib already names.
func secondCopies(m *ast.Module, libStrings map[string]string) []string {
	var out []string
	literals := map[string]int{}
	for _, r := range m.Rules {
		name := r.Head.Ref().String()
		if name == "violations" && r.Head.RuleKind() != ast.MultiValue {
			out = append(out, "violations is a complete rule; it collects its checks with `violations contains`")
		}
		if name == "violations" && r.Else != nil {
			out = append(out, "violations has an else: a first clause that answers before the checks")
		}
		ast.WalkExprs(r, func(e *ast.Expr) bool {
			for _, lit := range repeatable(e) {
				literals[lit]++
				if named, ok := libStrings[lit]; ok {
					out = append(out, fmt.Sprintf("%s writes out lib.%s", name, named))
				}
			}
			return false
		})
	}
	for s, n := range literals {
		if n > 1 {
			out = append(out, fmt.Sprintf("the literal %q is written %d times", s, n))
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// repeatable are the literals of e that a second copy repeats: the pattern
// of a regex builtin, and large numbers (nanosecond durations, byte sizes).
func repeatable(e *ast.Expr) []string {
	var out []string
	if e.IsCall() && strings.HasPrefix(e.Operator().String(), "regex.") {
		if s, ok := e.Operand(0).Value.(ast.String); ok {
			out = append(out, string(s))
		}
	}
	ast.WalkTerms(e, func(t *ast.Term) bool {
		if n, ok := t.Value.(ast.Number); ok {
			if f, ok := n.Float64(); ok && (f >= 1e6 || f <= -1e6) {
				out = append(out, n.String())
			}
		}
		return false
	})
	return out
}

// libStrings are the long string constants policies/lib names, by value.
func libStrings(t *testing.T) map[string]string {
	t.Helper()
	src, err := FS.ReadFile("lib/lib.rego")
	if err != nil {
		t.Fatal(err)
	}
	m, err := ast.ParseModuleWithOpts("lib/lib.rego", string(src), ast.ParserOptions{RegoVersion: ast.RegoV1})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, r := range m.Rules {
		if r.Head.Value == nil {
			continue
		}
		if s, ok := r.Head.Value.Value.(ast.String); ok && len(s) >= 24 {
			out[string(s)] = r.Head.Ref().String()
		}
	}
	if len(out) == 0 {
		t.Fatal("policies/lib names no pattern; the check would find nothing")
	}
	return out
}

// TestNoRuleHasASecondCopy: every rule reads once, as its sentence in
// docs/compliance.md. A fast form (a routine write tested before the
// checks, with the checks' conditions repeated) is a second copy of the
// rule that a reviewer must prove equal to the first; speed belongs in Go
// (internal/policy), not in policies/.
func TestNoRuleHasASecondCopy(t *testing.T) {
	lib := libStrings(t)
	for p, src := range ruleFiles(t, ".rego") {
		if strings.Contains(src, "Fast form") {
			t.Errorf("%s: a rule points to a fast form", p)
		}
		m, err := ast.ParseModuleWithOpts(p, src, ast.ParserOptions{RegoVersion: ast.RegoV1})
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range secondCopies(m, lib) {
			t.Errorf("%s: a second copy of the rule: %s", p, c)
		}
	}
}

// TestTheCopyCheckFindsAFastForm is the check's positive control: the
// fast form lease.floor had (its routine write, the duration pattern written
// out twice) fails it, and the rule read once passes it.
func TestTheCopyCheckFindsAFastForm(t *testing.T) {
	lib := libStrings(t)
	pattern := "`^[0-9]{1,6}(\\.[0-9]+)?(h([0-9]{1,6}(\\.[0-9]+)?m)?([0-9]{1,6}(\\.[0-9]+)?s)?|m([0-9]{1,6}(\\.[0-9]+)?s)?|s)$`"
	fast := `package macrack.x
import data.macrack.lib
violations := set() if routine_write
else := checks
checks contains "a" if {
	input.request.kind.kind == "MacNodeLease"
	some problem in problems
}
routine_write if {
	input.request.operation == "CREATE"
	regex.match(` + pattern + `, input.object.spec.minimumDuration)
}
routine_write if {
	input.request.operation == "UPDATE"
	regex.match(` + pattern + `, input.object.spec.minimumDuration)
}
problems contains "p" if not lib.is_duration(input.object.spec.minimumDuration)`
	once := `package macrack.x
import data.macrack.lib
violations contains "a" if {
	input.request.kind.kind == "MacNodeLease"
	some problem in problems
}
problems contains "p" if not lib.is_duration(input.object.spec.minimumDuration)`
	parse := func(src string) *ast.Module {
		m, err := ast.ParseModuleWithOpts("x.rego", src, ast.ParserOptions{RegoVersion: ast.RegoV1})
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	got := secondCopies(parse(fast), lib)
	want := []string{"violations has an else", "violations is a complete rule", "writes out lib.duration_pattern", "is written 2 times"}
	for _, w := range want {
		if !slices.ContainsFunc(got, func(s string) bool { return strings.Contains(s, w) }) {
			t.Errorf("the fast form: want a finding %q, got %q", w, got)
		}
	}
	if got := secondCopies(parse(once), lib); len(got) != 0 {
		t.Errorf("the rule read once: want no finding, got %q", got)
	}
}
