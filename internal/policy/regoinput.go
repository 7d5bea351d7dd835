package policy

import (
	"fmt"
	"sync"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// regoInput builds the value Rego reads from an Input: the one Rego-input
// builder. RegoDocument renders the same value as JSON for `opa test`. The
// document is converted lazily, as the rules read it (measured in
// BENCHMARKS.md, "Policy engine"); a lazy document belongs to one request.
// The terms of a shape's known part (the request's kind and resource, the
// params), which partial evaluation reads, are built once and shared: OPA
// values are immutable.
type regoInput struct {
	kinds     boundedCache[schema.GroupVersionKind, *ast.Term]
	resources boundedCache[schema.GroupVersionResource, *ast.Term]
	params    boundedCache[Params, *ast.Term]
	// kindDocs, resourceDocs and paramsDocs are those parts as the
	// document holds them; shared, and never modified.
	kindDocs     boundedCache[schema.GroupVersionKind, map[string]any]
	resourceDocs boundedCache[schema.GroupVersionResource, map[string]any]
	paramsDocs   boundedCache[Params, map[string]any]
}

// cacheSize bounds each cache: the kinds, resources and params a deployment
// sees are few, and a caller that sends many (a fuzzer) must not grow memory;
// past the bound, values are built afresh.
const cacheSize = 256

// boundedCache holds values built once per key, up to cacheSize keys. It is
// safe for concurrent use; the values must be immutable. Concurrent misses
// on one key wait for one build: fifty admissions of a new shape at once
// compile it once, not fifty times.
type boundedCache[K comparable, V any] struct {
	mu       sync.RWMutex
	values   map[K]V
	building map[K]*build[V]
}

// build is one key's value being built; done closes when v and err are set.
type build[V any] struct {
	done chan struct{}
	v    V
	err  error
}

func (c *boundedCache[K, V]) get(k K, newValue func() (V, error)) (V, error) {
	c.mu.RLock()
	v, ok := c.values[k]
	c.mu.RUnlock()
	if ok {
		return v, nil
	}
	c.mu.Lock()
	if v, ok := c.values[k]; ok {
		c.mu.Unlock()
		return v, nil
	}
	if b, ok := c.building[k]; ok {
		c.mu.Unlock()
		<-b.done
		return b.v, b.err
	}
	if c.building == nil {
		c.building = map[K]*build[V]{}
	}
	b := &build[V]{done: make(chan struct{})}
	c.building[k] = b
	c.mu.Unlock()

	b.v, b.err = newValue()
	c.mu.Lock()
	delete(c.building, k)
	if b.err == nil {
		if c.values == nil {
			c.values = map[K]V{}
		}
		if len(c.values) < cacheSize {
			c.values[k] = b.v
		}
	}
	c.mu.Unlock()
	close(b.done)
	return b.v, b.err
}

var (
	keyRequest     = ast.InternedTerm("request")
	keyOperation   = ast.InternedTerm("operation")
	keyKind        = ast.InternedTerm("kind")
	keyResource    = ast.InternedTerm("resource")
	keySubResource = ast.InternedTerm("subResource")
	keyGroup       = ast.InternedTerm("group")
	keyVersion     = ast.InternedTerm("version")
	keyParams      = ast.InternedTerm("params")
)

func (c *regoInput) value(in *Input) (ast.Value, error) {
	r := &in.Request
	// The groups stay the caller's []string: OPA converts one as it does a
	// []any of strings (interning them), and JSON renders it the same, so
	// that copying them into a []any, a box per group, bought nothing.
	groups := r.UserInfo.Groups
	if groups == nil {
		groups = []string{}
	}
	// The document itself, and everything in it, is lazy: a rule reads a
	// few of a stored object's fields, and converting the rest was most of
	// the builder's time and allocations (BENCHMARKS.md, issue 38). A lazy
	// object converts a field when a rule first reads it, and the whole
	// object when a rule iterates, compares or hashes it; an eager object
	// around it would hash, and so convert, everything. Its content stays
	// plain Go (JSON's types), which is what OPA renders when a rule or
	// RegoDocument asks for the document as JSON. Absent objects are left
	// out: JSON has no undefined.
	doc := make(map[string]any, 6)
	doc["request"] = map[string]any{
		"operation":   r.Operation,
		"kind":        c.kindDoc(r.Kind),
		"resource":    c.resourceDoc(r.Resource),
		"subResource": r.SubResource,
		"name":        r.Name,
		"namespace":   r.Namespace,
		"userInfo":    map[string]any{"username": r.UserInfo.Username, "uid": r.UserInfo.UID, "groups": groups},
	}
	doc["params"] = c.paramsDoc(in.Params)
	doc["now"] = in.Now.UTC().Format(time.RFC3339Nano)
	doc["inventory"] = in.Inventory
	if in.Inventory == nil {
		doc["inventory"] = emptyInventory
	}
	if in.OldObject != nil {
		doc["oldObject"] = in.OldObject
	}
	if in.Object != nil {
		doc["object"] = in.Object
	}
	return ast.LazyObject(doc), nil
}

// emptyInventory is the inventory of an input without one; shared, as
// neither OPA nor RegoDocument modifies the document.
var emptyInventory = map[string]any{}

func (c *regoInput) kind(gvk schema.GroupVersionKind) *ast.Term {
	t, _ := c.kinds.get(gvk, func() (*ast.Term, error) {
		return ast.ObjectTerm(
			[2]*ast.Term{keyGroup, ast.StringTerm(gvk.Group)},
			[2]*ast.Term{keyVersion, ast.StringTerm(gvk.Version)},
			[2]*ast.Term{keyKind, ast.StringTerm(gvk.Kind)},
		), nil
	})
	return t
}

func (c *regoInput) resource(gvr schema.GroupVersionResource) *ast.Term {
	t, _ := c.resources.get(gvr, func() (*ast.Term, error) {
		return ast.ObjectTerm(
			[2]*ast.Term{keyGroup, ast.StringTerm(gvr.Group)},
			[2]*ast.Term{keyVersion, ast.StringTerm(gvr.Version)},
			[2]*ast.Term{keyResource, ast.StringTerm(gvr.Resource)},
		), nil
	})
	return t
}

func (c *regoInput) kindDoc(gvk schema.GroupVersionKind) map[string]any {
	d, _ := c.kindDocs.get(gvk, func() (map[string]any, error) {
		return map[string]any{"group": gvk.Group, "version": gvk.Version, "kind": gvk.Kind}, nil
	})
	return d
}

func (c *regoInput) resourceDoc(gvr schema.GroupVersionResource) map[string]any {
	d, _ := c.resourceDocs.get(gvr, func() (map[string]any, error) {
		return map[string]any{"group": gvr.Group, "version": gvr.Version, "resource": gvr.Resource}, nil
	})
	return d
}

func (c *regoInput) paramsDoc(p Params) map[string]any {
	d, _ := c.paramsDocs.get(p, func() (map[string]any, error) {
		data := map[string]any{}
		for k, v := range p.Data() {
			data[k] = v
		}
		return map[string]any{"data": data}, nil
	})
	return d
}

func (c *regoInput) paramsTerm(p Params) (*ast.Term, error) {
	return c.params.get(p, func() (*ast.Term, error) {
		v, err := ast.InterfaceToValue(map[string]any{"data": p.Data()})
		if err != nil {
			return nil, fmt.Errorf("params: %w", err)
		}
		return ast.NewTerm(v), nil
	})
}
