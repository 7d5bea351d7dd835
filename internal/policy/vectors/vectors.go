// Package vectors reads the shared policy test vectors (test/policy/*.yaml),
// runs them through both engines, and renders them as a Rego test file, so
// that Go, `opa test` and `macrackctl policy test` judge the same cases.
package vectors

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"path"
	"slices"
	"sort"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/yaml"

	"github.com/boualleiguie/macrack-operator/internal/policy"
)

// ErrVectors means a vector file is malformed.
var ErrVectors = errors.New("reading vectors")

// file is one test/policy/<rule>.yaml.
type file struct {
	Rule     string         `json:"rule"`
	Defaults map[string]any `json:"defaults,omitempty"`
	Vectors  []vector       `json:"vectors"`
}

type vector struct {
	Name string `json:"name"`
	// APIServer, when "skip", keeps the vector out of the replay through a
	// real API server; Why says why (usually: the schema refuses it first).
	APIServer string `json:"apiServer,omitempty"`
	Why       string `json:"why,omitempty"`
	// StoredAs, for a replay, is merged over the oldObject to make the
	// object as it was when its status was written; the oldObject's spec
	// comes after. Some old states arise only in that order (a tenant
	// lengthens a lease after the operator wrote its times), and the
	// policies refuse the status write the other way round.
	StoredAs map[string]any `json:"storedAs,omitempty"`
	Input    map[string]any `json:"input"`
	Expect   []string       `json:"expect"`
	// Says lists text each engine's denial message must contain, so that
	// twins that agree on the code for different reasons are caught.
	Says []string `json:"says,omitempty"`
}

// Case is one vector with its file's defaults merged in.
type Case struct {
	Rule   string
	Name   string
	File   string
	Index  int
	Expect []string
	Says   []string
	// Replay reports whether the vector may go through a real API server.
	Replay bool
	// StoredAs: see vector.StoredAs.
	StoredAs map[string]any
	// Raw is the merged input document, as written.
	Raw map[string]any
}

// ID names the case in test output: "lease.floor/23h is refused".
func (c Case) ID() string { return c.Rule + "/" + c.Name }

// Load reads every *.yaml in fsys.
func Load(fsys fs.FS) ([]Case, error) {
	paths, err := fs.Glob(fsys, "*.yaml")
	if err != nil {
		return nil, err
	}
	sort.Strings(paths)
	var cases []Case
	for _, p := range paths {
		data, err := fs.ReadFile(fsys, p)
		if err != nil {
			return nil, err
		}
		// Not strict YAML: vectors override anchored objects with merge keys.
		// Unknown fields are still refused.
		js, err := yaml.YAMLToJSON(data)
		if err != nil {
			return nil, fmt.Errorf("%w: %s: %w", ErrVectors, p, err)
		}
		var f file
		dec := json.NewDecoder(bytes.NewReader(js))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&f); err != nil {
			return nil, fmt.Errorf("%w: %s: %w", ErrVectors, p, err)
		}
		if f.Rule == "" {
			return nil, fmt.Errorf("%w: %s: rule is empty", ErrVectors, p)
		}
		seen := map[string]bool{}
		for i, v := range f.Vectors {
			if v.Name == "" || seen[v.Name] {
				return nil, fmt.Errorf("%w: %s: vector %d has an empty or repeated name %q", ErrVectors, p, i, v.Name)
			}
			seen[v.Name] = true
			if v.APIServer != "" && v.APIServer != "skip" {
				return nil, fmt.Errorf("%w: %s: %s: apiServer is %q; only \"skip\" is known", ErrVectors, p, v.Name, v.APIServer)
			}
			expect := slices.Clone(v.Expect)
			slices.Sort(expect)
			cases = append(cases, Case{
				Rule: f.Rule, Name: v.Name, File: path.Base(p), Index: i,
				Expect:   slices.Compact(expect),
				Says:     v.Says,
				Replay:   v.APIServer != "skip",
				StoredAs: v.StoredAs,
				Raw:      wholeNumbers(merge(f.Defaults, v.Input)).(map[string]any),
			})
		}
	}
	return cases, nil
}

// wholeNumbers turns whole float64s into int64s, as the API server's JSON
// decoder does, so that CEL sees an int where Kubernetes would.
func wholeNumbers(v any) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			x[k] = wholeNumbers(e)
		}
	case []any:
		for i, e := range x {
			x[i] = wholeNumbers(e)
		}
	case float64:
		if x == math.Trunc(x) && math.Abs(x) < 1<<63 {
			return int64(x)
		}
	}
	return v
}

// Merge is merge, for the replay's storedAs.
func Merge(base, over map[string]any) map[string]any { return merge(base, over) }

// merge deep-merges over onto base; maps merge, everything else replaces,
// and so does a whole object (a map with apiVersion).
func merge(base, over map[string]any) map[string]any {
	out := make(map[string]any, len(base)+len(over))
	for k, v := range base {
		out[k] = v
	}
	for k, v := range over {
		if bm, ok := out[k].(map[string]any); ok {
			if om, ok := v.(map[string]any); ok && om["apiVersion"] == nil {
				out[k] = merge(bm, om)
				continue
			}
		}
		out[k] = v
	}
	return out
}

// Input converts the case to the engine's input.
func (c Case) Input() (policy.Input, error) {
	return ParseInput(c.Raw)
}

// ParseInput converts an input document (the shape DESIGN gives) to the
// engine's Input.
func ParseInput(raw map[string]any) (policy.Input, error) {
	var in policy.Input
	in.Object, _ = raw["object"].(map[string]any)
	in.OldObject, _ = raw["oldObject"].(map[string]any)
	in.Inventory, _ = raw["inventory"].(map[string]any)
	req, _ := raw["request"].(map[string]any)
	in.Request.Operation = str(req, "operation")
	kind, _ := req["kind"].(map[string]any)
	in.Request.Kind = schema.GroupVersionKind{Group: str(kind, "group"), Version: str(kind, "version"), Kind: str(kind, "kind")}
	if res, ok := req["resource"].(map[string]any); ok {
		in.Request.Resource = schema.GroupVersionResource{Group: str(res, "group"), Version: str(res, "version"), Resource: str(res, "resource")}
	}
	in.Request.SubResource = str(req, "subResource")
	in.Request.Name = str(req, "name")
	in.Request.Namespace = str(req, "namespace")
	ui, _ := req["userInfo"].(map[string]any)
	in.Request.UserInfo.Username = str(ui, "username")
	in.Request.UserInfo.UID = str(ui, "uid")
	if groups, ok := ui["groups"].([]any); ok {
		for _, g := range groups {
			if s, ok := g.(string); ok {
				in.Request.UserInfo.Groups = append(in.Request.UserInfo.Groups, s)
			}
		}
	}
	params, _ := raw["params"].(map[string]any)
	data, _ := params["data"].(map[string]any)
	in.Params = policy.Params{AgentsNamespace: str(data, "agentsNamespace"), OperatorUsername: str(data, "operatorUsername"),
		AgentTokenAudiences: str(data, "agentTokenAudiences")}
	if now := str(raw, "now"); now != "" {
		t, err := time.Parse(time.RFC3339Nano, now)
		if err != nil {
			return in, fmt.Errorf("%w: now %q: %w", ErrVectors, now, err)
		}
		in.Now = t
	}
	return in, nil
}

func str(m map[string]any, k string) string {
	s, _ := m[k].(string)
	return s
}

// Result is one case judged.
type Result struct {
	Case       Case
	Rego, CEL  policy.Answer
	CELApplies bool
	// Failure is empty when the case passes.
	Failure string
}

// Run judges every case: Rego must answer the expected codes, and CEL, where
// it concerns the request, must answer as Rego does.
func Run(ctx context.Context, e *policy.Engine, cases []Case) []Result {
	results := make([]Result, 0, len(cases))
	for _, c := range cases {
		r := Result{Case: c}
		in, err := c.Input()
		if err == nil {
			r.Rego, r.CEL, r.CELApplies, err = e.Answers(ctx, c.Rule, in)
		}
		switch {
		case err != nil:
			r.Failure = err.Error()
		case !codesEqual(r.Rego, c.Expect):
			r.Failure = fmt.Sprintf("Rego answers %s, the vector expects %s", r.Rego, expectString(c.Expect))
		case r.CELApplies && !r.CEL.Equal(r.Rego):
			r.Failure = fmt.Sprintf("CEL answers %s, Rego answers %s", r.CEL, r.Rego)
		default:
			r.Failure = missingSays(c.Says, "Rego", r.Rego)
			if r.Failure == "" && r.CELApplies {
				r.Failure = missingSays(c.Says, "CEL", r.CEL)
			}
		}
		results = append(results, r)
	}
	return results
}

// missingSays names the first expected text the answer's messages lack.
func missingSays(says []string, engine string, a policy.Answer) string {
	for _, want := range says {
		found := false
		for _, d := range a.Detail {
			if strings.Contains(d, want) {
				found = true
				break
			}
		}
		if !found {
			return fmt.Sprintf("%s's messages %q do not say %q", engine, a.Detail, want)
		}
	}
	return ""
}

func codesEqual(a policy.Answer, expect []string) bool {
	if len(expect) == 0 {
		return a.Kind == policy.AnswerAllow
	}
	if len(expect) == 1 && expect[0] == policy.CodeError {
		return a.Kind == policy.AnswerError
	}
	return a.Kind == policy.AnswerDeny && slices.Equal(a.Codes, expect)
}

func expectString(expect []string) string {
	if len(expect) == 0 {
		return "allow"
	}
	return "deny(" + strings.Join(expect, ",") + ")"
}

// RegoTests renders the cases as one Rego test module, each case a test
// named after its rule and vector, so that `opa test -v` lists them all.
func RegoTests(cases []Case) ([]byte, error) {
	var b bytes.Buffer
	b.WriteString("# Code generated by `make generate` from test/policy/*.yaml. DO NOT EDIT.\n")
	b.WriteString("# Each test is one shared vector; Go runs the same vectors through both engines.\n")
	b.WriteString("package macrack.vectors_test\n\n")
	names := map[string]bool{}
	for _, c := range cases {
		in, err := c.Input()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", c.ID(), err)
		}
		doc, err := policy.RegoDocument(in)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", c.ID(), err)
		}
		// encoding/json sorts map keys, so the file is stable.
		js, err := json.Marshal(doc)
		if err != nil {
			return nil, err
		}
		name := "test_" + ident(c.Rule) + "__" + ident(c.Name)
		if names[name] {
			return nil, fmt.Errorf("%w: two vectors make the test name %s", ErrVectors, name)
		}
		names[name] = true
		want := "set()"
		if len(c.Expect) > 0 {
			quoted := make([]string, len(c.Expect))
			for i, code := range c.Expect {
				quoted[i] = fmt.Sprintf("%q", code)
			}
			want = "{" + strings.Join(quoted, ", ") + "}"
		}
		fmt.Fprintf(&b, "# %s: %s\n%s if {\n\tviolations := data.macrack.%s.violations with input as %s\n\t{v.code | some v in violations} == %s\n}\n\n",
			c.File, c.Name, name, regoPackage(c.Rule), string(js), want)
	}
	return bytes.TrimRight(b.Bytes(), "\n"), nil
}

func regoPackage(rule string) string { return strings.ReplaceAll(rule, "-", "_") }

func ident(s string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(s) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
			b.WriteRune(r)
		default:
			if b.Len() > 0 && !strings.HasSuffix(b.String(), "_") {
				b.WriteByte('_')
			}
		}
	}
	return strings.TrimSuffix(b.String(), "_")
}
