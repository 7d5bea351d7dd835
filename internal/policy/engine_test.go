package policy_test

import (
	"context"
	"errors"
	"io/fs"
	"strings"
	"sync"
	"testing"
	"testing/fstest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/boualleiguie/macrack-operator/internal/policy"
	"github.com/boualleiguie/macrack-operator/policies"
)

var now = time.Date(2026, 6, 1, 15, 0, 0, 0, time.UTC)

func bundle(t *testing.T) fstest.MapFS {
	t.Helper()
	m := fstest.MapFS{}
	err := fs.WalkDir(policies.FS, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := fs.ReadFile(policies.FS, p)
		m[p] = &fstest.MapFile{Data: data}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// load gives tests a generous deadline, so that a loaded CI machine does not
// turn a decision into policy.error; the deadline test sets its own.
func load(t *testing.T, fsys fs.FS, opts ...policy.Option) *policy.Engine {
	t.Helper()
	opts = append([]policy.Option{policy.WithTimeout(time.Minute)}, opts...)
	e, err := policy.Load(context.Background(), fsys, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func leaseInput(d string) policy.Input {
	return policy.Input{
		Object: map[string]any{
			"apiVersion": "leasing.macrack.io/v1alpha1", "kind": "MacNodeLease",
			"metadata": map[string]any{"name": "l1", "namespace": "tenant-a"},
			"spec":     map[string]any{"nodeClassName": "m4", "minimumDuration": d},
		},
		Request: policy.Request{
			Operation: "CREATE",
			Kind:      schema.GroupVersionKind{Group: "leasing.macrack.io", Version: "v1alpha1", Kind: "MacNodeLease"},
			UserInfo:  policy.UserInfo{Username: "alice"},
		},
		Now: now,
	}
}

func codes(t *testing.T, e *policy.Engine, in policy.Input) []string {
	t.Helper()
	d, err := e.Decide(context.Background(), in)
	if err != nil {
		t.Fatalf("Decide: %v", err)
	}
	return d.Codes()
}

func TestAShortLeaseIsRefusedWithTheRuleAndTheNumbers(t *testing.T) {
	e := load(t, policies.FS)
	d, err := e.Decide(context.Background(), leaseInput("23h"))
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Violations) != 1 || d.Violations[0].Message != "lease.floor: minimumDuration 23h is below the 24h floor" {
		t.Fatalf("got %+v", d.Violations)
	}
	if d.Revision == "" || d.Revision != e.Revision() {
		t.Fatalf("decision revision %q, engine %q", d.Revision, e.Revision())
	}
	if got := codes(t, e, leaseInput("24h")); len(got) != 0 {
		t.Fatalf("positive control: a 24h lease got %v", got)
	}
}

func TestABuiltinErrorDeniesWithPolicyError(t *testing.T) {
	m := bundle(t)
	// A rule that parses a quantity straight from the input, without the
	// lib's guard: "1 TB" makes units.parse fail. Without strict builtin
	// errors that failure would be "undefined", and the request allowed.
	m["probe/parse.rego"] = &fstest.MapFile{Data: []byte(`# METADATA
# custom:
#   id: probe.parse
#   kinds: [fleet.macrack.io/MacNodeClass]
package macrack.probe.parse

violations contains {"code": "probe.parse", "message": "small"} if {
	units.parse(input.object.spec.disk) < 1
}
`)}
	e := load(t, m)
	class := func(disk string) policy.Input {
		return policy.Input{
			Object: map[string]any{"metadata": map[string]any{"name": "c"}, "spec": map[string]any{
				"chip": "M4", "memory": "16Gi", "disk": disk, "networkGbps": int64(10), "vmCapacity": int64(2)}},
			Request: policy.Request{Operation: "CREATE", Kind: schema.GroupVersionKind{Group: "fleet.macrack.io", Version: "v1alpha1", Kind: "MacNodeClass"}},
			Now:     now,
		}
	}
	d, err := e.Decide(context.Background(), class("1 TB"))
	if err != nil {
		t.Fatal(err)
	}
	var found bool
	for _, v := range d.Violations {
		if v.Rule == "probe.parse" && v.Code == policy.CodeError && strings.Contains(v.Message, "units.parse") {
			found = true
		}
	}
	if !found {
		t.Fatalf("want probe.parse to deny with policy.error, got %+v", d.Violations)
	}
	for _, v := range codes(t, e, class("2T")) {
		if v == policy.CodeError {
			t.Fatalf("positive control: a parsable quantity got policy.error")
		}
	}
}

func TestDeletingOneEngineRuleTurnsTheDecisionIntoDisagreement(t *testing.T) {
	cases := map[string]func(m fstest.MapFS){
		"the Rego rule body is deleted": func(m fstest.MapFS) {
			// Everything from the first definition of violations on.
			src := string(m["lease/floor.rego"].Data)
			m["lease/floor.rego"].Data = []byte(src[:strings.Index(src, "\nviolations ")+1])
		},
		"the CEL validations are deleted": func(m fstest.MapFS) {
			src := string(m["lease/floor.cel.yaml"].Data)
			m["lease/floor.cel.yaml"].Data = []byte(src[:strings.Index(src, "validations:")] +
				"validations:\n- code: lease.floor\n  expression: \"true\"\n")
		},
		"the CEL file is deleted": func(m fstest.MapFS) { delete(m, "lease/floor.cel.yaml") },
	}
	for name, mutate := range cases {
		t.Run(name, func(t *testing.T) {
			m := bundle(t)
			mutate(m)
			e := load(t, m)
			got := codes(t, e, leaseInput("23h"))
			if len(got) != 1 || got[0] != policy.CodeDisagreement {
				t.Fatalf("want [%s], got %v", policy.CodeDisagreement, got)
			}
			if n := testutil.ToFloat64(e.Collectors()[1].(*prometheus.CounterVec).WithLabelValues("lease.floor")); n != 1 {
				t.Fatalf("want the disagreement counted once, got %v", n)
			}
		})
	}
}

func TestTheDeadlineDeniesWithPolicyError(t *testing.T) {
	e := load(t, policies.FS, policy.WithTimeout(time.Nanosecond))
	got := codes(t, e, leaseInput("24h"))
	if len(got) == 0 || got[0] != policy.CodeError {
		t.Fatalf("want policy.error past the deadline, got %v", got)
	}
}

func TestAMalformedInputIsDenied(t *testing.T) {
	e := load(t, policies.FS)
	in := leaseInput("24h")
	in.Now = time.Time{}
	d, err := e.Decide(context.Background(), in)
	if !errors.Is(err, policy.ErrInput) {
		t.Fatalf("want ErrInput, got %v", err)
	}
	if d.Allowed() || d.Codes()[0] != policy.CodeError {
		t.Fatalf("want a policy.error denial, got %+v", d)
	}
}

// The objects reach Rego converted lazily: a value without a JSON form,
// found only when a rule reads it, denies with policy.error rather than
// crashing the caller.
func TestAnUnconvertibleValueDeniesWithPolicyError(t *testing.T) {
	e := load(t, policies.FS)
	in := leaseInput("24h")
	in.Object["spec"].(map[string]any)["minimumDuration"] = make(chan int)
	ra, _, _, err := e.Answers(context.Background(), "lease.floor", in)
	if err != nil {
		t.Fatal(err)
	}
	if ra.Kind != policy.AnswerError {
		t.Fatalf("want Rego's answer to be an error, got %v", ra)
	}
	if ra, _, _, err := e.Answers(context.Background(), "lease.floor", leaseInput("24h")); err != nil || ra.Kind != policy.AnswerAllow {
		t.Fatalf("positive control: a 24h lease got %v, %v", ra, err)
	}
}

func TestManagedFieldsNeverReachTheRules(t *testing.T) {
	in := leaseInput("24h")
	in.Object["metadata"].(map[string]any)["managedFields"] = []any{map[string]any{"manager": "kubectl"}}
	doc, err := policy.RegoDocument(in)
	if err != nil {
		t.Fatal(err)
	}
	meta := doc["object"].(map[string]any)["metadata"].(map[string]any)
	if _, has := meta["managedFields"]; has {
		t.Fatal("managedFields reached the policy input")
	}
	if _, has := in.Object["metadata"].(map[string]any)["managedFields"]; !has {
		t.Fatal("the caller's object was modified")
	}
}

func TestARuleReadingNowCannotBeDeployed(t *testing.T) {
	for _, ident := range []string{"now", "inventory"} {
		m := bundle(t)
		src := string(m["lease/floor.cel.yaml"].Data)
		const from = `expression: "(oldObject == null && object.?status.?boundAt.orValue(null) == null) || size(variables.problems) == 0"`
		if !strings.Contains(src, from) {
			t.Fatalf("lease/floor.cel.yaml no longer has %s; update the test", from)
		}
		m["lease/floor.cel.yaml"].Data = []byte(strings.Replace(src, from,
			`expression: "(oldObject == null && object.?status.?boundAt.orValue(null) == null) || size(variables.problems) == 0 || `+ident+` == null"`, 1))
		_, err := policy.Load(context.Background(), m)
		if !errors.Is(err, policy.ErrGenerate) || !strings.Contains(err.Error(), "references "+ident) {
			t.Fatalf("%s: want ErrGenerate naming it, got %v", ident, err)
		}
	}
}

func TestDecideIsSafeForConcurrentUse(t *testing.T) {
	e := load(t, policies.FS)
	var wg sync.WaitGroup
	errs := make(chan string, 64)
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < 50; j++ {
				d := "23h"
				want := 1
				if j%2 == 0 {
					d, want = "48h", 0
				}
				dec, err := e.Decide(context.Background(), leaseInput(d))
				if err != nil || len(dec.Violations) != want {
					errs <- d
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for d := range errs {
		t.Errorf("a concurrent decision for %s was wrong", d)
	}
}

func TestEveryCELTwinIsADeployablePolicy(t *testing.T) {
	e := load(t, policies.FS)
	aps, err := e.AdmissionPolicies(policy.Params{AgentsNamespace: "fleet-agents",
		OperatorUsername: "op", AgentTokenAudiences: "https://a.example, https://b.example"})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{"lease.floor": true, "node.commercial": true, "quota.never-circumvent": true, "agent.scope": true, "instance.wipe": true, "audit.finalizer": true, "pod.shape": true, "tenancy.class": true}
	for _, ap := range aps {
		if !want[ap.Rule] {
			t.Errorf("unexpected VAP for %s", ap.Rule)
		}
		delete(want, ap.Rule)
		if ap.Binding.Spec.PolicyName != ap.Policy.Name || ap.Policy.Spec.FailurePolicy == nil || *ap.Policy.Spec.FailurePolicy != "Fail" {
			t.Errorf("%s: binding or failure policy wrong", ap.Rule)
		}
		if ap.Binding.Spec.ParamRef != nil || ap.Policy.Spec.ParamKind != nil {
			// A missing param would deny every request the policy matches.
			t.Errorf("%s takes a param", ap.Rule)
		}
		if ap.Rule == "agent.scope" {
			want := `'system:serviceaccounts:' + "fleet-agents"`
			if len(ap.Policy.Spec.MatchConditions) != 1 || !strings.Contains(ap.Policy.Spec.MatchConditions[0].Expression, want) {
				t.Errorf("agent.scope's match condition does not name the agents' namespace as written: %+v", ap.Policy.Spec.MatchConditions)
			}
			var all strings.Builder
			for _, v := range ap.Policy.Spec.Variables {
				all.WriteString(v.Expression)
			}
			if !strings.Contains(all.String(), `["https://a.example", "https://b.example"]`) || strings.Contains(all.String(), "settings.") {
				t.Errorf("agent.scope's settings are not written in: %s", all.String())
			}
		}
	}
	for id := range want {
		t.Errorf("no VAP for %s", id)
	}
}

// TestAVariableThatDoesNotCompileFailsTheLoad: the API server would report it
// only when an expression reads the variable; the engine refuses it at once.
func TestAVariableThatDoesNotCompileFailsTheLoad(t *testing.T) {
	m := bundle(t)
	src := string(m["lease/floor.cel.yaml"].Data)
	const from = `expression: "object.?status.?boundAt.orValue(null)"`
	if !strings.Contains(src, from) {
		t.Fatalf("lease/floor.cel.yaml no longer has %s; update the test", from)
	}
	if _, err := policy.Load(context.Background(), m); err != nil {
		t.Fatalf("positive control: the bundle loads: %v", err)
	}
	m["lease/floor.cel.yaml"].Data = []byte(strings.Replace(src, from, `expression: "true ? null : 'x'"`, 1))
	_, err := policy.Load(context.Background(), m)
	if !errors.Is(err, policy.ErrLoad) || !strings.Contains(err.Error(), "variable boundAt") {
		t.Fatalf("want ErrLoad naming variable boundAt, got %v", err)
	}
}

// A twin's matchConditions decide whether it concerns a request, as in the
// API server: where they do not match, the twin admits. Here lease.floor's
// twin is given one that exempts a user, so that for that user only Rego
// refuses a 23h lease, and the engines disagree; for anyone else both refuse.
func TestATwinsMatchConditionsDecideWhetherItApplies(t *testing.T) {
	m := bundle(t)
	src := string(m["lease/floor.cel.yaml"].Data)
	at := strings.Index(src, "variables:")
	m["lease/floor.cel.yaml"].Data = []byte(src[:at] +
		"matchConditions:\n- name: not-exempt\n  expression: \"request.userInfo.username != 'exempt'\"\n" + src[at:])
	e := load(t, m)

	exempt := leaseInput("23h")
	exempt.Request.UserInfo.Username = "exempt"
	if got := codes(t, e, exempt); len(got) != 1 || got[0] != policy.CodeDisagreement {
		t.Fatalf("want [%s] where the twin's match condition excludes the request, got %v", policy.CodeDisagreement, got)
	}
	if got := codes(t, e, leaseInput("23h")); len(got) != 1 || got[0] != "lease.floor" {
		t.Fatalf("positive control: want [lease.floor] where the match condition holds, got %v", got)
	}
}
