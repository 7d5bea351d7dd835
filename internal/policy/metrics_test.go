package policy_test

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/boualleiguie/macrack-operator/internal/policy"
	"github.com/boualleiguie/macrack-operator/policies"
)

// series finds the sample of family name whose labels are exactly labels,
// in what e's collectors export.
func series(t *testing.T, e *policy.Engine, name string, labels map[string]string) (*dto.Metric, bool) {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(e.Collectors()...)
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			if len(m.GetLabel()) != len(labels) {
				continue
			}
			match := true
			for _, lp := range m.GetLabel() {
				match = match && labels[lp.GetName()] == lp.GetValue()
			}
			if match {
				return m, true
			}
		}
	}
	return nil, false
}

func counterOf(t *testing.T, e *policy.Engine, name string, labels map[string]string) float64 {
	t.Helper()
	m, ok := series(t, e, name, labels)
	if !ok {
		return -1
	}
	return m.GetCounter().GetValue()
}

func observations(t *testing.T, e *policy.Engine, rule, engine string) (uint64, bool) {
	t.Helper()
	m, ok := series(t, e, "macrack_policy_decision_duration_seconds", map[string]string{"rule": rule, "engine": engine})
	if !ok {
		return 0, false
	}
	return m.GetHistogram().GetSampleCount(), true
}

func decide(t *testing.T, e *policy.Engine, in policy.Input) policy.Decision {
	t.Helper()
	d, _ := e.Decide(context.Background(), in)
	return d
}

// A denial counts by rule and code, an allow counts none; each engine's
// time is observed per rule, and a rule without a CEL twin has no cel
// series.
func TestDenialsAndEachEnginesTimeAreCountedByRule(t *testing.T) {
	e := load(t, policies.FS)
	floor := map[string]string{"rule": "lease.floor", "code": "lease.floor"}
	if n := counterOf(t, e, "macrack_policy_denials_total", floor); n != -1 {
		t.Fatalf("before any request: lease.floor denials %v, want no series", n)
	}
	if d := decide(t, e, leaseInput("24h")); !d.Allowed() {
		t.Fatalf("control: a 24h lease is denied: %+v", d.Violations)
	}
	if n := counterOf(t, e, "macrack_policy_denials_total", floor); n != -1 {
		t.Fatalf("after an allowed lease: lease.floor denials %v, want no series", n)
	}
	decide(t, e, leaseInput("23h"))
	decide(t, e, leaseInput("1h"))
	if n := counterOf(t, e, "macrack_policy_denials_total", floor); n != 2 {
		t.Fatalf("after two short leases: lease.floor denials %v, want 2", n)
	}

	for _, engine := range []string{"rego", "cel"} {
		if n, ok := observations(t, e, "lease.floor", engine); !ok || n != 3 {
			t.Errorf("lease.floor in %s: %d observations (series %v), want 3", engine, n, ok)
		}
	}
	// lease.release concerns every lease request too, and is Rego alone.
	if n, ok := observations(t, e, "lease.release", "rego"); !ok || n != 3 {
		t.Errorf("lease.release in rego: %d observations (series %v), want 3", n, ok)
	}
	if _, ok := observations(t, e, "lease.release", "cel"); ok {
		t.Error("lease.release, which has no CEL twin, has a cel series")
	}
	// A rule no request concerned exists at zero.
	if n, ok := observations(t, e, "node.commercial", "cel"); !ok || n != 0 {
		t.Errorf("node.commercial in cel: %d observations (series %v), want a series at 0", n, ok)
	}
}

// A disagreement is a denial with its own code, and counted as one; the
// disagreement counter of every twin rule exists at zero before, so that
// the first one shows in increase().
func TestADisagreementIsADenialOfItsOwnCode(t *testing.T) {
	m := bundle(t)
	delete(m, "lease/floor.cel.yaml")
	e := load(t, m)
	for _, rule := range []string{"lease.floor", "node.commercial"} {
		if n := counterOf(t, e, "macrack_policy_disagreements_total", map[string]string{"rule": rule}); n != 0 {
			t.Fatalf("before any request: %s disagreements %v, want a series at 0", rule, n)
		}
	}
	if n := counterOf(t, e, "macrack_policy_disagreements_total", map[string]string{"rule": "lease.release"}); n != -1 {
		t.Fatalf("lease.release, which has no twin, has a disagreement series (%v)", n)
	}
	decide(t, e, leaseInput("23h"))
	if n := counterOf(t, e, "macrack_policy_denials_total", map[string]string{"rule": "lease.floor", "code": policy.CodeDisagreement}); n != 1 {
		t.Fatalf("lease.floor denials with %s: %v, want 1", policy.CodeDisagreement, n)
	}
	if n := counterOf(t, e, "macrack_policy_denials_total", map[string]string{"rule": "lease.floor", "code": "lease.floor"}); n != -1 {
		t.Fatalf("lease.floor denials with its own code: %v, want none: the engines disagreed", n)
	}
	if n := counterOf(t, e, "macrack_policy_disagreements_total", map[string]string{"rule": "lease.floor"}); n != 1 {
		t.Fatalf("lease.floor disagreements %v, want 1", n)
	}
}

// A malformed input is a denial of the engine's own, as rule policy.
func TestAMalformedInputCountsAsAPolicyErrorDenial(t *testing.T) {
	e := load(t, policies.FS)
	in := leaseInput("24h")
	in.Now = time.Time{}
	decide(t, e, in)
	if n := counterOf(t, e, "macrack_policy_denials_total", map[string]string{"rule": "policy", "code": policy.CodeError}); n != 1 {
		t.Fatalf("policy denials with %s: %v, want 1", policy.CodeError, n)
	}
}
