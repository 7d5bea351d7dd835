package main

import (
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"

	"github.com/boualleiguie/macrack-operator/internal/admission"
	"github.com/boualleiguie/macrack-operator/internal/agent"
	"github.com/boualleiguie/macrack-operator/internal/enforcement"
	"github.com/boualleiguie/macrack-operator/internal/policy"
	"github.com/boualleiguie/macrack-operator/internal/policy/vectors"
	leasecontroller "github.com/boualleiguie/macrack-operator/internal/reconcile/lease"
	nodecontroller "github.com/boualleiguie/macrack-operator/internal/reconcile/node"
	placementcontroller "github.com/boualleiguie/macrack-operator/internal/reconcile/placement"
)

// declaredPoints are the points each layer declares in its own package.
func declaredPoints() []enforcement.Point {
	return slices.Concat(
		enforcement.SchemaPoints,
		admission.WebhookEnforcement,
		leasecontroller.Enforcement, nodecontroller.Enforcement, placementcontroller.Enforcement,
		agent.Enforcement,
	)
}

// layerDirs are where each layer's tests live, the tests that run that
// layer with the others absent. A proof elsewhere proves no layer alone.
var layerDirs = map[enforcement.Layer][]string{
	enforcement.Schema:     {"test/envtest/schema"},
	enforcement.VAP:        {"test/envtest/vap"},
	enforcement.Webhook:    {"test/envtest/leases", "test/envtest/exactcap", "test/envtest/runnersecret", "internal/admission"},
	enforcement.Reconciler: {"test/envtest/reconcilers", "internal/reconcile"},
	enforcement.Agent:      {"internal/agent"},
}

// registry is every point: the declared ones, the VAPs the CEL twins
// deploy, and the webhook's cells read from its configuration.
func registry(root string, e *policy.Engine) ([]enforcement.Point, error) {
	hooked, err := webhookResources(root)
	if err != nil {
		return nil, err
	}
	var out []enforcement.Point
	for _, p := range declaredPoints() {
		if p.Layer == enforcement.Webhook {
			r, ok := e.Rule(p.Rule)
			if !ok {
				return nil, fmt.Errorf("the webhook declares %s, which is no rule", p.Rule)
			}
			p.What = "✓ " + strings.Join(resourcesOf(r, hooked), ", ")
		}
		out = append(out, p)
	}
	aps, err := e.AdmissionPolicies(defaultSettings)
	if err != nil {
		return nil, err
	}
	for _, ap := range aps {
		what := "✓ `" + ap.Policy.Name + "`"
		if conds := ap.Policy.Spec.MatchConditions; len(conds) > 0 {
			names := make([]string, len(conds))
			for i, c := range conds {
				names[i] = "`" + c.Name + "`"
			}
			what += " (only when " + strings.Join(names, ", ") + ")"
		}
		out = append(out, enforcement.Point{Rule: ap.Rule, Layer: enforcement.VAP, What: what, Proof: admission.VAPProof})
	}
	return out, nil
}

// webhookResources maps each kind the validating webhook receives to its
// resources, as config/webhook/manifests.yaml (from the +kubebuilder:webhook
// markers) and the CRDs name them.
func webhookResources(root string) (map[string][]string, error) {
	kinds, err := crdKinds(root)
	if err != nil {
		return nil, err
	}
	raw, err := os.ReadFile(filepath.Join(root, "config", "webhook", "manifests.yaml"))
	if err != nil {
		return nil, err
	}
	out := map[string][]string{}
	for _, doc := range strings.Split(string(raw), "\n---\n") {
		var vwc admissionregistrationv1.ValidatingWebhookConfiguration
		if err := yaml.Unmarshal([]byte(doc), &vwc); err != nil {
			return nil, fmt.Errorf("config/webhook/manifests.yaml: %w", err)
		}
		if vwc.Kind != "ValidatingWebhookConfiguration" {
			continue
		}
		for _, w := range vwc.Webhooks {
			for _, r := range w.Rules {
				for _, g := range r.APIGroups {
					for _, res := range r.Resources {
						plural, _, _ := strings.Cut(res, "/")
						kind, ok := kinds[g+"/"+plural]
						if !ok {
							return nil, fmt.Errorf("the webhook receives %s of group %s, which no CRD serves", res, g)
						}
						out[kind] = append(out[kind], "`"+res+"`")
					}
				}
			}
		}
	}
	return out, nil
}

// crdKinds maps "group/plural" to "group/Kind" for every CRD.
func crdKinds(root string) (map[string]string, error) {
	crds, err := loadCRDs(root)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, c := range crds {
		out[c.Spec.Group+"/"+c.Spec.Names.Plural] = c.Spec.Group + "/" + c.Spec.Names.Kind
	}
	return out, nil
}

func loadCRDs(root string) ([]apiextensionsv1.CustomResourceDefinition, error) {
	paths, err := filepath.Glob(filepath.Join(root, "config", "crd", "bases", "*.yaml"))
	if err != nil {
		return nil, err
	}
	var out []apiextensionsv1.CustomResourceDefinition
	for _, p := range paths {
		raw, err := os.ReadFile(p)
		if err != nil {
			return nil, err
		}
		var c apiextensionsv1.CustomResourceDefinition
		if err := yaml.Unmarshal(raw, &c); err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
		out = append(out, c)
	}
	return out, nil
}

// resourcesOf are the webhook's resources of the rule's kinds.
func resourcesOf(r *policy.Rule, hooked map[string][]string) []string {
	var out []string
	for _, k := range r.Kinds {
		out = append(out, hooked[k]...)
	}
	return out
}

// renderMatrix is the table of docs/compliance.md: a row per rule, a
// column per layer, and in each cell what the layer does and the test
// that proves it.
func renderMatrix(rules []*policy.Rule, points []enforcement.Point) string {
	var b strings.Builder
	b.WriteString("| rule |")
	for _, l := range enforcement.Layers {
		b.WriteString(" " + string(l) + " |")
	}
	b.WriteString("\n|---|")
	for range enforcement.Layers {
		b.WriteString("---|")
	}
	b.WriteString("\n")
	for _, r := range rules {
		b.WriteString("| `" + r.ID + "` |")
		for _, l := range enforcement.Layers {
			b.WriteString(" " + cell(points, r.ID, l) + " |")
		}
		b.WriteString("\n")
	}
	return b.String()
}

// cell is what a layer does for a rule and the tests that prove it; the
// points that say the same thing share one line.
func cell(points []enforcement.Point, rule string, l enforcement.Layer) string {
	var whats []string
	proofs := map[string][]string{}
	for _, p := range points {
		if p.Rule != rule || p.Layer != l {
			continue
		}
		if _, seen := proofs[p.What]; !seen {
			whats = append(whats, p.What)
		}
		proofs[p.What] = append(proofs[p.What], fmt.Sprintf("[%s › %s](../%s)", filepath.Base(p.Proof.File), strconv.Quote(p.Proof.Test), p.Proof.File))
	}
	lines := make([]string, len(whats))
	for i, w := range whats {
		lines[i] = strings.ReplaceAll(w+" — proved by "+strings.Join(proofs[w], " and "), "|", "\\|")
	}
	return strings.Join(lines, "<br>")
}

// A unit is a test a proof can name: a Go test function, or a Ginkgo node
// whose text is a literal.
type unit struct {
	file, name string
	// proves are the rules the test says it proves.
	proves []string
	// literals are the string literals of a Go test, its subtests' names
	// among them.
	literals []string
}

var (
	provesLine = regexp.MustCompile(`(?m)^Proves: (.+)$`)
	ginkgoNode = map[string]bool{"It": true, "Describe": true, "Context": true, "When": true, "DescribeTable": true, "Entry": true}
)

// units parses every _test.go file under dir.
func units(root, dir string) ([]unit, error) {
	var out []unit
	err := filepath.WalkDir(filepath.Join(root, dir), func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, "_test.go") {
			return err
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ParseComments)
		if err != nil {
			return err
		}
		for _, decl := range f.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok || fn.Recv != nil || !strings.HasPrefix(fn.Name.Name, "Test") || fn.Body == nil {
				continue
			}
			u := unit{file: filepath.ToSlash(rel), name: fn.Name.Name, literals: stringLiterals(fn.Body)}
			if fn.Doc != nil {
				for _, m := range provesLine.FindAllStringSubmatch(fn.Doc.Text(), -1) {
					for _, r := range strings.Split(m[1], ",") {
						u.proves = append(u.proves, strings.TrimSpace(r))
					}
				}
			}
			out = append(out, u)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok || len(call.Args) == 0 || !ginkgoNode[funcName(call.Fun)] {
				return true
			}
			text, ok := literal(call.Args[0])
			if !ok {
				return true
			}
			u := unit{file: filepath.ToSlash(rel), name: text}
			for _, arg := range call.Args[1:] {
				label, ok := arg.(*ast.CallExpr)
				if !ok || funcName(label.Fun) != "Label" {
					continue
				}
				for _, l := range label.Args {
					if s, ok := literal(l); ok && strings.HasPrefix(s, "proves:") {
						u.proves = append(u.proves, strings.TrimPrefix(s, "proves:"))
					}
				}
			}
			out = append(out, u)
			return true
		})
		return nil
	})
	return out, err
}

func funcName(e ast.Expr) string {
	switch f := e.(type) {
	case *ast.Ident:
		return f.Name
	case *ast.SelectorExpr:
		return f.Sel.Name
	}
	return ""
}

func literal(e ast.Expr) (string, bool) {
	lit, ok := e.(*ast.BasicLit)
	if !ok || lit.Kind != token.STRING {
		return "", false
	}
	s, err := strconv.Unquote(lit.Value)
	return s, err == nil
}

func stringLiterals(n ast.Node) []string {
	var out []string
	ast.Inspect(n, func(n ast.Node) bool {
		if e, ok := n.(ast.Expr); ok {
			if s, ok := literal(e); ok {
				out = append(out, s)
			}
		}
		return true
	})
	return out
}

// names reports whether proof names u.
func (u unit) names(proof enforcement.Proof) bool {
	if proof.File != u.file {
		return false
	}
	name, sub, hasSub := strings.Cut(proof.Test, "/")
	if !strings.HasPrefix(u.name, "Test") {
		return proof.Test == u.name
	}
	return name == u.name && (!hasSub || slices.Contains(u.literals, sub))
}

func inLayer(file string, l enforcement.Layer) bool {
	for _, d := range layerDirs[l] {
		if strings.HasPrefix(file, d+"/") {
			return true
		}
	}
	return false
}

// checkRegistry holds the points to the code: every point's proof exists,
// in its layer's tests, and says it proves the point's rule; every test of
// a layer that says it proves a rule is the proof of a point; the webhook
// has a point for each rule whose kinds it receives; each schema point's
// field holds a constraint; each VAP's rule has vectors the replay runs.
func checkRegistry(root string, e *policy.Engine, cases []vectors.Case, points []enforcement.Point) error {
	var errs []error
	byLayer := map[enforcement.Layer][]unit{}
	for _, l := range enforcement.Layers {
		for _, d := range layerDirs[l] {
			us, err := units(root, d)
			if err != nil {
				return err
			}
			byLayer[l] = append(byLayer[l], us...)
		}
	}
	for _, p := range points {
		if _, ok := e.Rule(p.Rule); !ok {
			errs = append(errs, fmt.Errorf("%s point for %s: no such rule", p.Layer, p.Rule))
			continue
		}
		if !inLayer(p.Proof.File, p.Layer) {
			errs = append(errs, fmt.Errorf("%s point for %s: its proof %s is not among the %s tests (%s)",
				p.Layer, p.Rule, p.Proof.File, p.Layer, strings.Join(layerDirs[p.Layer], ", ")))
			continue
		}
		i := slices.IndexFunc(byLayer[p.Layer], func(u unit) bool { return u.names(p.Proof) })
		switch {
		case i < 0:
			errs = append(errs, fmt.Errorf("%s point for %s: no test %q in %s", p.Layer, p.Rule, p.Proof.Test, p.Proof.File))
		case p.Layer != enforcement.VAP && !slices.Contains(byLayer[p.Layer][i].proves, p.Rule):
			errs = append(errs, fmt.Errorf("%s point for %s: %s › %q does not say it proves %s",
				p.Layer, p.Rule, p.Proof.File, p.Proof.Test, p.Rule))
		}
	}
	for l, us := range byLayer {
		for _, u := range us {
			for _, rule := range u.proves {
				if !slices.ContainsFunc(points, func(p enforcement.Point) bool {
					return p.Layer == l && p.Rule == rule && u.names(p.Proof)
				}) {
					errs = append(errs, fmt.Errorf("%s › %q proves %s at the %s, and the matrix has no such cell naming it", u.file, u.name, rule, l))
				}
			}
		}
	}
	for _, r := range e.Rules() {
		if r.HasCEL() != slices.ContainsFunc(points, func(p enforcement.Point) bool { return p.Layer == enforcement.VAP && p.Rule == r.ID }) {
			errs = append(errs, fmt.Errorf("%s: a VAP cell must exist exactly when the rule has a CEL twin (it has one: %v)", r.ID, r.HasCEL()))
		}
	}
	errs = append(errs, checkWebhook(root, e, points)...)
	errs = append(errs, checkSchema(root, points)...)
	for _, p := range points {
		if p.Layer == enforcement.VAP && !slices.ContainsFunc(cases, func(c vectors.Case) bool { return c.Rule == p.Rule && c.Replay }) {
			errs = append(errs, fmt.Errorf("VAP point for %s: no vector of the rule is replayed through the API server", p.Rule))
		}
	}
	return errors.Join(errs...)
}

// checkWebhook: the handler decides every rule of the kinds it receives,
// so those rules, and only those, have a webhook point.
func checkWebhook(root string, e *policy.Engine, points []enforcement.Point) []error {
	hooked, err := webhookResources(root)
	if err != nil {
		return []error{err}
	}
	var errs []error
	for _, r := range e.Rules() {
		receives := len(resourcesOf(r, hooked)) > 0
		declared := slices.ContainsFunc(points, func(p enforcement.Point) bool { return p.Layer == enforcement.Webhook && p.Rule == r.ID })
		switch {
		case receives && !declared:
			errs = append(errs, fmt.Errorf("the webhook receives %s's kinds and enforces it, and the matrix has no webhook cell for it", r.ID))
		case declared && !receives:
			errs = append(errs, fmt.Errorf("the matrix has a webhook cell for %s, whose kinds the webhook never receives", r.ID))
		}
	}
	return errs
}

// checkSchema: each schema point's field holds a constraint in its CRD.
func checkSchema(root string, points []enforcement.Point) []error {
	crds, err := loadCRDs(root)
	if err != nil {
		return []error{err}
	}
	var errs []error
	for _, p := range points {
		if p.Layer != enforcement.Schema {
			continue
		}
		kind, path, _ := strings.Cut(p.Field, " ")
		i := slices.IndexFunc(crds, func(c apiextensionsv1.CustomResourceDefinition) bool { return c.Spec.Names.Kind == kind })
		if i < 0 || len(crds[i].Spec.Versions) == 0 || crds[i].Spec.Versions[0].Schema == nil {
			errs = append(errs, fmt.Errorf("schema point for %s: no CRD of kind %s", p.Rule, kind))
			continue
		}
		s := crds[i].Spec.Versions[0].Schema.OpenAPIV3Schema
		required := false
		if path != "." {
			for _, f := range strings.Split(path, ".") {
				child, ok := s.Properties[f]
				if !ok {
					s = nil
					break
				}
				required = slices.Contains(s.Required, f)
				s = &child
			}
		}
		if s == nil || !(required || s.Pattern != "" || s.MaxItems != nil || s.Minimum != nil || s.Maximum != nil ||
			len(s.Enum) > 0 || len(s.XValidations) > 0) {
			errs = append(errs, fmt.Errorf("schema point for %s: %s holds no constraint in its CRD", p.Rule, p.Field))
		}
	}
	return errs
}
