package policy

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/google/cel-go/common"
	"github.com/google/cel-go/common/ast"
	celparser "github.com/google/cel-go/parser"
)

// Settings are what a CEL twin reads as `settings.<name>`: values the
// operator writes into the policy it applies, as literals, where a param
// would make the policy depend on an object anyone could delete.
var settingNames = map[string]func(Params) string{
	"agentsNamespace":     func(p Params) string { return strconv.Quote(p.AgentsNamespace) },
	"agentTokenAudiences": func(p Params) string { return celStringList(p.TokenAudiences()) },
	"operatorUsername":    func(p Params) string { return strconv.Quote(p.OperatorUsername) },
}

func celStringList(items []string) string {
	quoted := make([]string, len(items))
	for i, s := range items {
		quoted[i] = strconv.Quote(s)
	}
	return "[" + strings.Join(quoted, ", ") + "]"
}

// settingRef matches settings.<name> where settings is an identifier of its
// own, not a field of something else.
var settingRef = regexp.MustCompile(`(^|[^.\w])settings\.(\w+)`)

// renderSettings replaces every settings.<name> in expr by the literal of
// that setting. It refuses a setting the file does not declare, and text
// that only looks like a reference (inside a string literal).
func renderSettings(expr string, declared []string, p Params) (string, error) {
	if expr == "" || !strings.Contains(expr, "settings") {
		return expr, nil
	}
	refs, err := settingSelects(expr)
	if err != nil {
		return "", err
	}
	replaced := 0
	var failed error
	out := settingRef.ReplaceAllStringFunc(expr, func(m string) string {
		sub := settingRef.FindStringSubmatch(m)
		name := sub[2]
		lit, known := settingNames[name]
		if !known || !slices.Contains(declared, name) {
			failed = fmt.Errorf("%w: settings.%s is not a declared setting (declared: %s)", ErrGenerate, name, strings.Join(declared, ", "))
			return m
		}
		replaced++
		return sub[1] + lit(p)
	})
	if failed != nil {
		return "", failed
	}
	if replaced != refs {
		return "", fmt.Errorf("%w: %q: %d references to settings, but %d in the text; keep settings.<name> out of string literals", ErrGenerate, expr, refs, replaced)
	}
	return out, nil
}

// settingSelects counts the settings.<name> selections in expr's syntax tree.
func settingSelects(expr string) (int, error) {
	p, err := celparser.NewParser(celparser.Macros(celparser.AllMacros...), celparser.EnableOptionalSyntax(true))
	if err != nil {
		return 0, err
	}
	parsed, iss := p.Parse(common.NewTextSource(expr))
	if len(iss.GetErrors()) > 0 {
		return 0, fmt.Errorf("%w: %s", ErrGenerate, iss.ToDisplayString())
	}
	n := 0
	ast.PostOrderVisit(parsed.Expr(), ast.NewExprVisitor(func(e ast.Expr) {
		if e.Kind() == ast.SelectKind && e.AsSelect().Operand().Kind() == ast.IdentKind && e.AsSelect().Operand().AsIdent() == "settings" {
			n++
		}
	}))
	return n, nil
}

// rendered returns the file with its settings written in as literals.
func (f *celFile) rendered(p Params) (*celFile, error) {
	if len(f.Settings) == 0 {
		return f, nil
	}
	out := *f
	render := func(where, expr string) (string, error) {
		s, err := renderSettings(expr, f.Settings, p)
		if err != nil {
			return "", fmt.Errorf("%s: %s: %w", f.path, where, err)
		}
		return s, nil
	}
	var err error
	out.MatchConditions = append(out.MatchConditions[:0:0], f.MatchConditions...)
	for i := range out.MatchConditions {
		if out.MatchConditions[i].Expression, err = render("matchCondition "+out.MatchConditions[i].Name, out.MatchConditions[i].Expression); err != nil {
			return nil, err
		}
	}
	out.Variables = append(out.Variables[:0:0], f.Variables...)
	for i := range out.Variables {
		if out.Variables[i].Expression, err = render("variable "+out.Variables[i].Name, out.Variables[i].Expression); err != nil {
			return nil, err
		}
	}
	out.Validations = append(out.Validations[:0:0], f.Validations...)
	for i := range out.Validations {
		v := &out.Validations[i]
		if v.Expression, err = render(fmt.Sprintf("validations[%d]", i), v.Expression); err != nil {
			return nil, err
		}
		if v.MessageExpression, err = render(fmt.Sprintf("validations[%d].messageExpression", i), v.MessageExpression); err != nil {
			return nil, err
		}
	}
	return &out, nil
}
