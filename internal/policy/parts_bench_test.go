package policy

import (
	"context"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/boualleiguie/macrack-operator/policies"
)

func partsInput() Input {
	return Input{
		Object: map[string]any{
			"apiVersion": "leasing.macrack.io/v1alpha1", "kind": "MacNodeLease",
			"metadata": map[string]any{"name": "l1", "namespace": "tenant-a", "annotations": map[string]any{"x": "y"}},
			"spec":     map[string]any{"nodeClassName": "m4", "minimumDuration": "24h"},
		},
		Request: Request{Operation: "CREATE", Kind: schema.GroupVersionKind{Group: "leasing.macrack.io", Version: "v1alpha1", Kind: "MacNodeLease"}, UserInfo: UserInfo{Username: "alice"}},
		Now:     time.Now(),
	}
}

// BenchmarkParts splits one rule's decision (lease.floor, a small object) into
// the input conversion and each engine, to show where the time goes.
func BenchmarkParts(b *testing.B) {
	e, _ := Load(context.Background(), policies.FS)
	r, _ := e.Rule("lease.floor")
	b.Run("prepare", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			_, _ = e.prepare(partsInput())
		}
	})
	p, _ := e.prepare(partsInput())
	benchEngines(b, r, p)
}

// BenchmarkPartsAgentScope splits agent.scope on an agent creating its Node.
func BenchmarkPartsAgentScope(b *testing.B) {
	e, _ := Load(context.Background(), policies.FS)
	r, _ := e.Rule("agent.scope")
	in := Input{
		Object: map[string]any{"apiVersion": "v1", "kind": "Node",
			"metadata": map[string]any{"name": "c02a", "labels": map[string]any{"macrack.io/serial": "C02A"}},
			"spec":     map[string]any{"taints": []any{map[string]any{"key": "macrack.io/unleased", "effect": "NoSchedule"}}},
			"status":   map[string]any{"capacity": map[string]any{"macrack.io/macos-vm": "2"}}},
		Request: Request{Operation: "CREATE", Kind: schema.GroupVersionKind{Version: "v1", Kind: "Node"},
			UserInfo: UserInfo{Username: "system:serviceaccount:macrack-agents:agent-c02a"}},
		Params: Params{AgentsNamespace: "macrack-agents"},
		Now:    time.Now(),
	}
	p, err := e.prepare(in)
	if err != nil {
		b.Fatal(err)
	}
	benchEngines(b, r, p)
}

// benchEngines times each engine alone on the prepared input.
func benchEngines(b *testing.B, r *Rule, p *prepared) {
	ctx := context.Background()
	stop, release := cancelOnDone(ctx)
	defer release()
	b.Run("rego", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			r.rego.decide(ctx, p, stop)
		}
	})
	b.Run("cel", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			r.cel.eval(ctx, &p.in)
		}
	})
}
