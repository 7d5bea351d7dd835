// Package policy evaluates MacRack's invariants. It loads policies/ once:
// every rule's Rego as a prepared query, and, for the rules the API server can
// enforce, the CEL twin compiled as a ValidatingAdmissionPolicy. Decide asks
// every rule that applies to a request, compares the twins, and fails closed.
// The webhooks, the reconcilers, the agent and the CLI share it.
package policy

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"path"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"github.com/open-policy-agent/opa/v1/ast"
	"sigs.k8s.io/yaml"
)

// Engine holds the compiled rules. It is safe for concurrent use.
type Engine struct {
	rules    []*Rule
	byKind   map[string][]*Rule
	revision string
	serial   int64
	params   Params
	timeout  time.Duration
	log      logr.Logger
	metrics  *metrics
	celFiles []*celFile
	// input converts requests for Rego, sharing the parts that repeat.
	input regoInput
	// whole turns off the rules' specialization by request shape.
	whole bool
	// pluginVariables binds CEL variables the API server's way.
	pluginVariables bool
}

// Rule is one invariant and its engines.
type Rule struct {
	// ID is the rule id, e.g. lease.floor.
	ID string
	// Title and Description come from the Rego METADATA.
	Title, Description string
	// Kinds are the "group/Kind" keys the rule applies to.
	Kinds []string
	// Engines declares the twins the rule must have: rego, and cel where the
	// API server enforces it too.
	Engines []string

	rego *regoRule
	cel  *celRule
	// metrics are the rule's series, resolved at Load.
	metrics ruleMetrics
}

// HasCEL reports whether the rule has, or must have, a CEL twin.
func (r *Rule) HasCEL() bool { return r.cel != nil || slices.Contains(r.Engines, "cel") }

// Option configures Load.
type Option func(*Engine)

// WithLogger sets the logger for disagreements and errors.
func WithLogger(l logr.Logger) Option { return func(e *Engine) { e.log = l } }

// WithTimeout bounds one Decide; past it, the answer is policy.error.
func WithTimeout(d time.Duration) Option { return func(e *Engine) { e.timeout = d } }

// WithDefaultParams sets the params used when an Input carries none.
func WithDefaultParams(p Params) Option { return func(e *Engine) { e.params = p } }

// WithoutSpecialization evaluates every rule's whole Rego query for every
// request, rather than the query specialized for the request's shape: the
// reference the tests hold the specialized queries to.
func WithoutSpecialization() Option { return func(e *Engine) { e.whole = true } }

// WithPluginVariables binds the CEL twins' variables with the API server's
// own composition, rather than celVariables: the reference the tests hold
// celVariables to.
func WithPluginVariables() Option { return func(e *Engine) { e.pluginVariables = true } }

// DefaultTimeout bounds one Decide unless WithTimeout says otherwise.
const DefaultTimeout = 2 * time.Second

// Load reads and compiles every rule in fsys (the policies/ folder). A rule
// is a Rego package macrack.<area>.<rule> whose METADATA names its id; a CEL
// twin is an <area>/<rule>.cel.yaml with the same id.
func Load(ctx context.Context, fsys fs.FS, opts ...Option) (*Engine, error) {
	e := &Engine{byKind: map[string][]*Rule{}, timeout: DefaultTimeout, log: logr.Discard(), metrics: newMetrics()}
	for _, o := range opts {
		o(e)
	}
	rev, err := revision(fsys)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrLoad, err)
	}
	e.revision = rev
	if e.serial, err = readSerial(fsys); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrLoad, err)
	}

	modules, celFiles, err := readBundle(fsys)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrLoad, err)
	}
	// The rules' modules and the libraries as parsed, for the queries
	// specialized by request shape, which compile with them.
	parsed := make(map[string]*ast.Module, len(modules))
	libraries := map[string]*ast.Module{}
	for name, m := range modules {
		parsed[name] = m.Copy()
		if r, err := ruleFromMetadata(name, m); err == nil && r == nil {
			libraries[name] = parsed[name]
		}
	}
	compiler := newCompiler()
	if compiler.Compile(modules); compiler.Failed() {
		return nil, fmt.Errorf("%w: %w", ErrLoad, compiler.Errors)
	}

	keep := notInlined(compiler)
	byID := map[string]*Rule{}
	names := make([]string, 0, len(modules))
	for name := range modules {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		m := modules[name]
		r, err := ruleFromMetadata(name, m)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrLoad, err)
		}
		if r == nil {
			continue // a library package, such as macrack.lib
		}
		if _, dup := byID[r.ID]; dup {
			return nil, fmt.Errorf("%w: rule %s is defined twice", ErrLoad, r.ID)
		}
		own := maps.Clone(libraries)
		own[name] = parsed[name]
		if r.rego, err = prepareRego(ctx, compiler, keep, r.ID, m.Package.Path, own, e.whole); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrLoad, err)
		}
		byID[r.ID] = r
	}

	envSet := newCELEnvSet()
	for _, f := range celFiles {
		r, ok := byID[f.ID]
		if !ok {
			// A twin without its Rego: keep it, so that every request the
			// rule concerns is denied as a disagreement, not silently allowed.
			r = &Rule{ID: f.ID, Title: f.ID, Kinds: f.Kinds, Engines: []string{"rego", "cel"}}
			byID[f.ID] = r
		}
		cr, err := newCELRule(envSet, f, e.revision, e.params, e.pluginVariables)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrLoad, err)
		}
		r.cel = cr
		e.celFiles = append(e.celFiles, f)
	}

	for _, id := range sortedKeys(byID) {
		r := byID[id]
		r.metrics = e.metrics.forRule(r)
		e.rules = append(e.rules, r)
		for _, k := range r.Kinds {
			e.byKind[k] = append(e.byKind[k], r)
		}
	}
	return e, nil
}

// readBundle parses the rule modules (not tests, not the conftest entry
// point) and the CEL files.
func readBundle(fsys fs.FS) (map[string]*ast.Module, []*celFile, error) {
	modules := map[string]*ast.Module{}
	var celFiles []*celFile
	err := fs.WalkDir(fsys, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if p == "conftest" {
				return fs.SkipDir
			}
			return nil
		}
		switch {
		case strings.HasSuffix(p, "_test.rego"):
			return nil
		case strings.HasSuffix(p, ".rego"):
			src, err := fs.ReadFile(fsys, p)
			if err != nil {
				return err
			}
			m, err := ast.ParseModuleWithOpts(p, string(src), ast.ParserOptions{ProcessAnnotation: true, RegoVersion: ast.RegoV1})
			if err != nil {
				return err
			}
			modules[p] = m
		case strings.HasSuffix(p, ".cel.yaml"):
			src, err := fs.ReadFile(fsys, p)
			if err != nil {
				return err
			}
			f, err := parseCELFile(p, src)
			if err != nil {
				return err
			}
			celFiles = append(celFiles, f)
		}
		return nil
	})
	return modules, celFiles, err
}

// ruleFromMetadata reads the package METADATA of a rule module. Modules
// without custom.id are libraries.
func ruleFromMetadata(name string, m *ast.Module) (*Rule, error) {
	for _, a := range m.Annotations {
		if a.Scope != "package" {
			continue
		}
		id, _ := a.Custom["id"].(string)
		if id == "" {
			return nil, nil
		}
		want := "data.macrack." + strings.ReplaceAll(strings.ReplaceAll(id, "-", "_"), ".", ".")
		if m.Package.Path.String() != want {
			return nil, fmt.Errorf("%s: rule %s must be package %s, not %s", name, id, strings.TrimPrefix(want, "data."), m.Package.Path)
		}
		r := &Rule{ID: id, Title: a.Title, Description: strings.TrimSpace(a.Description)}
		for _, k := range asStrings(a.Custom["kinds"]) {
			if !strings.Contains(k, "/") {
				return nil, fmt.Errorf("%s: kind %q is not group/Kind", name, k)
			}
			r.Kinds = append(r.Kinds, k)
		}
		r.Engines = asStrings(a.Custom["engines"])
		if len(r.Kinds) == 0 {
			return nil, fmt.Errorf("%s: rule %s lists no kinds", name, id)
		}
		return r, nil
	}
	return nil, nil
}

func asStrings(v any) []string {
	list, _ := v.([]any)
	out := make([]string, 0, len(list))
	for _, x := range list {
		if s, ok := x.(string); ok {
			out = append(out, s)
		}
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// revision is a content hash of the bundle's rules (tests excluded), so that
// a decision names the exact policies that made it.
func revision(fsys fs.FS) (string, error) {
	h := sha256.New()
	err := fs.WalkDir(fsys, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		ext := path.Ext(p)
		if (ext != ".rego" && ext != ".yaml") || strings.HasSuffix(p, "_test.rego") || p == BundleFile {
			return nil
		}
		data, err := fs.ReadFile(fsys, p)
		if err != nil {
			return err
		}
		fmt.Fprintf(h, "%s\x00%d\x00", p, len(data))
		h.Write(data)
		return nil
	})
	if err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil))[:16], nil
}

// Revision is the content hash of the loaded bundle.
func (e *Engine) Revision() string { return e.revision }

// Serial orders bundles: a later bundle has a higher serial, so that an
// operator never replaces newer admission policies with older ones.
func (e *Engine) Serial() int64 { return e.serial }

// BundleFile records the bundle's serial and the revision it was raised for;
// `make generate` raises the serial whenever the revision changes.
const BundleFile = "bundle.yaml"

// Bundle is BundleFile's content.
type Bundle struct {
	Serial   int64  `json:"serial"`
	Revision string `json:"revision"`
}

// readSerial reads BundleFile's serial; a bundle without one (a reviewer's
// copy of a few rules) has serial 0.
func readSerial(fsys fs.FS) (int64, error) {
	data, err := fs.ReadFile(fsys, BundleFile)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	var b Bundle
	if err := yaml.UnmarshalStrict(data, &b); err != nil {
		return 0, fmt.Errorf("%s: %w", BundleFile, err)
	}
	return b.Serial, nil
}

// Rules lists the loaded rules, by id.
func (e *Engine) Rules() []*Rule { return e.rules }

// Rule returns one rule by id.
func (e *Engine) Rule(id string) (*Rule, bool) {
	for _, r := range e.rules {
		if r.ID == id {
			return r, true
		}
	}
	return nil, false
}
