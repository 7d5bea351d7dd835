package policy

import (
	"bytes"
	"encoding/json"
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// TestRegoInputIsTheDocument: the input value has the names a VAP uses,
// leaves out absent objects, and is the same when its parts come from the
// caches (the second round). RegoDocument renders that very value.
func TestRegoInputIsTheDocument(t *testing.T) {
	node := map[string]any{"metadata": map[string]any{"name": "c02a"}, "status": map[string]any{"n": int64(3), "f": 1.5}}
	in := Input{
		OldObject: node,
		Request: Request{Operation: "DELETE", Kind: schema.GroupVersionKind{Group: "leasing.macrack.io", Version: "v1alpha1", Kind: "MacNodeLease"},
			SubResource: "status", Namespace: "t",
			UserInfo: UserInfo{Username: "alice", UID: "u-1", Groups: []string{"system:authenticated"}}},
		Params: Params{OperatorUsername: "op"},
		Now:    time.Date(2026, 6, 1, 12, 0, 0, 5, time.FixedZone("x", 3600)),
	}
	want := map[string]any{
		"request": map[string]any{
			"operation":   "DELETE",
			"kind":        map[string]any{"group": "leasing.macrack.io", "version": "v1alpha1", "kind": "MacNodeLease"},
			"resource":    map[string]any{"group": "leasing.macrack.io", "version": "v1alpha1", "resource": "macnodeleases"},
			"subResource": "status", "name": "c02a", "namespace": "t",
			"userInfo": map[string]any{"username": "alice", "uid": "u-1", "groups": []any{"system:authenticated"}},
		},
		"params":    map[string]any{"data": map[string]any{"operatorUsername": "op"}},
		"now":       "2026-06-01T11:00:00.000000005Z",
		"inventory": map[string]any{},
		"oldObject": node,
	}
	wantV, err := ast.InterfaceToValue(want)
	if err != nil {
		t.Fatal(err)
	}
	if err := in.complete(); err != nil {
		t.Fatal(err)
	}
	var c regoInput
	for round := 0; round < 2; round++ {
		got, err := c.value(&in)
		if err != nil {
			t.Fatal(err)
		}
		if ast.Compare(got, wantV) != 0 {
			t.Errorf("round %d:\n got %v\nwant %v", round, got, wantV)
		}
	}
	doc, err := RegoDocument(in)
	if err != nil {
		t.Fatal(err)
	}
	if _, has := doc["object"]; has {
		t.Errorf("RegoDocument has an object on DELETE: %v", doc["object"])
	}
	// As JSON, as the generators write it for opa test: plain JSON
	// throughout, no OPA value in OPA's own encoding.
	js, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	got, err := ast.ValueFromReader(bytes.NewReader(js))
	if err != nil {
		t.Fatal(err)
	}
	if ast.Compare(got, wantV) != 0 {
		t.Errorf("RegoDocument as JSON:\n got %s\nwant %v", js, wantV)
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

// TestLazyInputEqualsAFreshConversion: whatever an update changed, kept,
// added or removed, the lazily converted object and oldObject equal a fresh
// conversion, whether a rule reads a field first or compares the whole.
func TestLazyInputEqualsAFreshConversion(t *testing.T) {
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
		"a nested map changed": func(m map[string]any) { m["status"].(map[string]any)["slots"] = []any{map[string]any{"name": "b"}} },
		"a type changed":       func(m map[string]any) { m["spec"] = []any{"24h"} },
		"an int became a float": func(m map[string]any) {
			m["metadata"].(map[string]any)["generation"] = 3.0
		},
		"a bool flipped": func(m map[string]any) { m["spec"].(map[string]any)["on"] = false },
	}
	var c regoInput
	for name, change := range cases {
		for _, readFirst := range []bool{false, true} {
			old, obj := base(), base()
			change(obj)
			in := Input{Object: obj, OldObject: old, Now: time.Unix(1, 0),
				Request: Request{Operation: "UPDATE", Kind: schema.GroupVersionKind{Group: "leasing.macrack.io", Version: "v1alpha1", Kind: "MacNodeLease"}}}
			got, err := c.value(&in)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			doc := got.(ast.Object)
			for key, want := range map[string]map[string]any{"object": obj, "oldObject": old} {
				v := doc.Get(ast.StringTerm(key)).Value.(ast.Object)
				if readFirst {
					// A rule that reads one field converts only that part first.
					_ = v.Get(ast.StringTerm("status")).Value.(ast.Object).Get(ast.StringTerm("phase"))
				}
				wantV, _ := ast.InterfaceToValue(want)
				if ast.Compare(v, wantV) != 0 {
					t.Errorf("%s, %s (read first %v):\n got %v\nwant %v", name, key, readFirst, v, wantV)
				}
			}
		}
	}
}

// Concurrent misses on one key build it once, and all get its value.
func TestBoundedCacheBuildsOnceForConcurrentMisses(t *testing.T) {
	var c boundedCache[string, int]
	var builds, entered atomic.Int32
	var wg sync.WaitGroup
	got := make([]int, 20)
	for i := range got {
		wg.Go(func() {
			entered.Add(1)
			v, err := c.get("k", func() (int, error) {
				builds.Add(1)
				// Hold the build until every caller is on its way in.
				for entered.Load() < int32(len(got)) {
					runtime.Gosched()
				}
				for range 100 {
					runtime.Gosched()
				}
				return 7, nil
			})
			if err != nil {
				t.Error(err)
			}
			got[i] = v
		})
	}
	wg.Wait()
	if n := builds.Load(); n != 1 {
		t.Errorf("built %d times, want 1", n)
	}
	for i, v := range got {
		if v != 7 {
			t.Errorf("caller %d got %d, want 7", i, v)
		}
	}
	// A failed build is not kept: the next call builds again.
	if _, err := c.get("bad", func() (int, error) { return 0, errors.New("no") }); err == nil {
		t.Fatal("want the build's error")
	}
	if v, err := c.get("bad", func() (int, error) { return 3, nil }); err != nil || v != 3 {
		t.Errorf("after a failed build: %d, %v; want 3", v, err)
	}
}
