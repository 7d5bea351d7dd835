package policy

import (
	"testing"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// TestRegoInputEqualsDocument holds the direct conversion equal to the JSON
// document that regoDoc renders (which `opa test` and conftest read), twice
// over, so that the cached parts are checked too.
func TestRegoInputEqualsDocument(t *testing.T) {
	node := map[string]any{"apiVersion": "v1", "kind": "Node",
		"metadata": map[string]any{"name": "c02a", "labels": map[string]any{"macrack.io/serial": "C02A"}},
		"spec":     map[string]any{"taints": []any{map[string]any{"key": "macrack.io/unleased", "effect": "NoSchedule"}}},
		"status":   map[string]any{"capacity": map[string]any{"macrack.io/macos-vm": "2"}, "n": int64(3), "f": 1.5}}
	nodeKind := schema.GroupVersionKind{Version: "v1", Kind: "Node"}
	lease := schema.GroupVersionKind{Group: "leasing.macrack.io", Version: "v1alpha1", Kind: "MacNodeLease"}
	cases := map[string]Input{
		"create with groups and inventory": {
			Object: node,
			Request: Request{Operation: "CREATE", Kind: nodeKind, UserInfo: UserInfo{Username: "system:serviceaccount:macrack-agents:agent-c02a",
				UID: "u-1", Groups: []string{"system:serviceaccounts", "system:authenticated"}}},
			Params:    Params{AgentsNamespace: "macrack-agents", OperatorUsername: "op"},
			Inventory: map[string]any{"macNode": map[string]any{"spec": map[string]any{"serial": "C02A"}}, "leases": []any{}},
			Now:       time.Date(2026, 6, 1, 12, 0, 0, 5, time.FixedZone("x", 3600)),
		},
		"delete of a status subresource, no groups, no params": {
			OldObject: node,
			Request:   Request{Operation: "DELETE", Kind: lease, SubResource: "status", Name: "l", Namespace: "t", UserInfo: UserInfo{Username: "alice"}},
			Now:       time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC),
		},
		"update with only one param": {
			Object: node, OldObject: node,
			Request: Request{Operation: "UPDATE", Kind: nodeKind, UserInfo: UserInfo{Username: "bob"}},
			Params:  Params{OperatorUsername: "op"},
			Now:     time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC),
		},
	}
	var c regoInput
	for round := 0; round < 2; round++ {
		for name, in := range cases {
			if err := in.complete(); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			want, err := ast.InterfaceToValue(in.regoDoc())
			if err != nil {
				t.Fatal(err)
			}
			got, err := c.value(&in)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if ast.Compare(got, want) != 0 {
				t.Errorf("round %d, %s:\n got %v\nwant %v", round, name, got, want)
			}
		}
	}
}

// TestCacheIsBounded: a caller sending ever new params (a fuzzer) must
// not grow memory without bound, and still gets correct terms.
func TestCacheIsBounded(t *testing.T) {
	var c regoInput
	for i := 0; i < cacheSize+10; i++ {
		p := Params{AgentsNamespace: string(rune('a'+i%26)) + time.Duration(i).String()}
		term, err := c.paramsTerm(p)
		if err != nil {
			t.Fatal(err)
		}
		want, _ := ast.InterfaceToValue(map[string]any{"data": p.Data()})
		if ast.Compare(term.Value, want) != 0 {
			t.Fatalf("params %d: got %v, want %v", i, term, want)
		}
	}
	if n := len(c.params.values); n != cacheSize {
		t.Errorf("cache holds %d terms, want the bound %d", n, cacheSize)
	}
}

// TestConvertLikeEqualsAFreshConversion: whatever an update changed, kept,
// added or removed, the shared conversion equals a fresh one, and reports
// sameness only for equal values.
func TestConvertLikeEqualsAFreshConversion(t *testing.T) {
	base := func() map[string]any {
		return map[string]any{
			"metadata": map[string]any{"name": "l", "finalizers": []any{"macrack.io/lease", "x"}, "generation": int64(3)},
			"spec":     map[string]any{"minimumDuration": "24h", "ratio": 1.5, "on": true, "none": nil},
			"status":   map[string]any{"phase": "Bound", "slots": []any{map[string]any{"name": "a"}}},
		}
	}
	cases := map[string]func(m map[string]any){
		"unchanged":        func(map[string]any) {},
		"a string changed": func(m map[string]any) { m["status"].(map[string]any)["phase"] = "Held" },
		"a key added":      func(m map[string]any) { m["status"].(map[string]any)["serial"] = "C02" },
		"a key removed":    func(m map[string]any) { delete(m["spec"].(map[string]any), "none") },
		"a list grew": func(m map[string]any) {
			m["metadata"].(map[string]any)["finalizers"] = []any{"macrack.io/lease", "x", "y"}
		},
		"a list shrank":        func(m map[string]any) { m["metadata"].(map[string]any)["finalizers"] = []any{"x"} },
		"a nested map changed": func(m map[string]any) { m["status"].(map[string]any)["slots"] = []any{map[string]any{"name": "b"}} },
		"a type changed":       func(m map[string]any) { m["spec"] = []any{"24h"} },
		"an int became a float": func(m map[string]any) {
			m["metadata"].(map[string]any)["generation"] = 3.0
		},
		"null became a value": func(m map[string]any) { m["spec"].(map[string]any)["none"] = "x" },
		"a bool flipped":      func(m map[string]any) { m["spec"].(map[string]any)["on"] = false },
	}
	for name, change := range cases {
		old, obj := base(), base()
		change(obj)
		oldV, err := ast.InterfaceToValue(old)
		if err != nil {
			t.Fatal(err)
		}
		got, same, err := convertLike(obj, old, oldV)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		want, _ := ast.InterfaceToValue(obj)
		if ast.Compare(got, want) != 0 {
			t.Errorf("%s:\n got %v\nwant %v", name, got, want)
		}
		if same != (name == "unchanged") {
			t.Errorf("%s: same = %v", name, same)
		}
	}
}
