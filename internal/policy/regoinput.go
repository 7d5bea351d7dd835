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
// parts that repeat across requests (the request's kind and resource, the
// params) are built once and shared, and an update's object shares the
// terms of its oldObject (convertLike): measured in BENCHMARKS.md, "Where
// the time goes". OPA values are immutable, so sharing them is safe.
type regoInput struct {
	kinds     boundedCache[schema.GroupVersionKind, *ast.Term]
	resources boundedCache[schema.GroupVersionResource, *ast.Term]
	params    boundedCache[Params, *ast.Term]
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
	keyName        = ast.InternedTerm("name")
	keyNamespace   = ast.InternedTerm("namespace")
	keyUserInfo    = ast.InternedTerm("userInfo")
	keyUsername    = ast.InternedTerm("username")
	keyUID         = ast.InternedTerm("uid")
	keyGroups      = ast.InternedTerm("groups")
	keyGroup       = ast.InternedTerm("group")
	keyVersion     = ast.InternedTerm("version")
	keyParams      = ast.InternedTerm("params")
	keyNow         = ast.InternedTerm("now")
	keyInventory   = ast.InternedTerm("inventory")
	keyObject      = ast.InternedTerm("object")
	keyOldObject   = ast.InternedTerm("oldObject")
)

func (c *regoInput) value(in *Input) (ast.Value, error) {
	groups := make([]*ast.Term, len(in.Request.UserInfo.Groups))
	for i, g := range in.Request.UserInfo.Groups {
		groups[i] = ast.InternedTerm(g)
	}
	r := &in.Request
	request := ast.NewObject(
		[2]*ast.Term{keyOperation, ast.InternedTerm(r.Operation)},
		[2]*ast.Term{keyKind, c.kind(r.Kind)},
		[2]*ast.Term{keyResource, c.resource(r.Resource)},
		[2]*ast.Term{keySubResource, ast.InternedTerm(r.SubResource)},
		[2]*ast.Term{keyName, ast.InternedTerm(r.Name)},
		[2]*ast.Term{keyNamespace, ast.InternedTerm(r.Namespace)},
		[2]*ast.Term{keyUserInfo, ast.ObjectTerm(
			[2]*ast.Term{keyUsername, ast.InternedTerm(r.UserInfo.Username)},
			[2]*ast.Term{keyUID, ast.InternedTerm(r.UserInfo.UID)},
			[2]*ast.Term{keyGroups, ast.ArrayTerm(groups...)},
		)},
	)
	inventory, err := ast.InterfaceToValue(orEmpty(in.Inventory))
	if err != nil {
		return nil, fmt.Errorf("inventory: %w", err)
	}
	params, err := c.paramsTerm(in.Params)
	if err != nil {
		return nil, err
	}
	pairs := make([][2]*ast.Term, 0, 6)
	pairs = append(pairs,
		[2]*ast.Term{keyRequest, ast.NewTerm(request)},
		[2]*ast.Term{keyParams, params},
		[2]*ast.Term{keyNow, ast.StringTerm(in.Now.UTC().Format(time.RFC3339Nano))},
		[2]*ast.Term{keyInventory, ast.NewTerm(inventory)},
	)
	// Absent objects are left out: JSON has no undefined. The object shares the
	// terms of what it has in common with the oldObject.
	var oldV ast.Value
	if in.OldObject != nil {
		v, err := ast.InterfaceToValue(in.OldObject)
		if err != nil {
			return nil, fmt.Errorf("oldObject: %w", err)
		}
		oldV = v
		pairs = append(pairs, [2]*ast.Term{keyOldObject, ast.NewTerm(v)})
	}
	if in.Object != nil {
		var old any
		if in.OldObject != nil {
			old = in.OldObject
		}
		v, _, err := convertLike(in.Object, old, oldV)
		if err != nil {
			return nil, fmt.Errorf("object: %w", err)
		}
		pairs = append(pairs, [2]*ast.Term{keyObject, ast.NewTerm(v)})
	}
	return ast.NewObject(pairs...), nil
}

func orEmpty(m map[string]any) map[string]any {
	if m == nil {
		return map[string]any{}
	}
	return m
}

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

func (c *regoInput) paramsTerm(p Params) (*ast.Term, error) {
	return c.params.get(p, func() (*ast.Term, error) {
		v, err := ast.InterfaceToValue(map[string]any{"data": p.Data()})
		if err != nil {
			return nil, fmt.Errorf("params: %w", err)
		}
		return ast.NewTerm(v), nil
	})
}

// convertLike converts x for Rego, reusing the terms of prev (already
// converted to prevV) wherever x equals it. An update's object and oldObject
// share most of their content; sharing their terms spares the allocations
// that dominate the conversion. OPA values are immutable, so a shared term is
// safe. It reports whether x equals prev, and then returns prevV itself.
func convertLike(x, prev any, prevV ast.Value) (ast.Value, bool, error) {
	if prevV == nil {
		v, err := ast.InterfaceToValue(x)
		return v, false, err
	}
	switch x := x.(type) {
	case map[string]any:
		pm, ok := prev.(map[string]any)
		po, okV := prevV.(ast.Object)
		if !ok || !okV {
			break
		}
		same := len(x) == len(pm)
		kvs := make([][2]*ast.Term, 0, len(x))
		for k, v := range x {
			key := ast.InternedTerm(k)
			var pv any
			var pt *ast.Term
			if p, has := pm[k]; has {
				pv, pt = p, po.Get(key)
			}
			if pt == nil {
				child, err := ast.InterfaceToValue(v)
				if err != nil {
					return nil, false, err
				}
				same = false
				kvs = append(kvs, [2]*ast.Term{key, ast.NewTerm(child)})
				continue
			}
			child, childSame, err := convertLike(v, pv, pt.Value)
			if err != nil {
				return nil, false, err
			}
			if childSame {
				kvs = append(kvs, [2]*ast.Term{key, pt})
				continue
			}
			same = false
			kvs = append(kvs, [2]*ast.Term{key, ast.NewTerm(child)})
		}
		if same {
			return prevV, true, nil
		}
		return ast.NewObject(kvs...), false, nil
	case []any:
		pl, ok := prev.([]any)
		pa, okV := prevV.(*ast.Array)
		if !ok || !okV || len(pl) != pa.Len() {
			break
		}
		same := len(x) == len(pl)
		terms := make([]*ast.Term, len(x))
		for i, v := range x {
			if i >= len(pl) {
				child, err := ast.InterfaceToValue(v)
				if err != nil {
					return nil, false, err
				}
				same = false
				terms[i] = ast.NewTerm(child)
				continue
			}
			child, childSame, err := convertLike(v, pl[i], pa.Elem(i).Value)
			if err != nil {
				return nil, false, err
			}
			if childSame {
				terms[i] = pa.Elem(i)
				continue
			}
			same = false
			terms[i] = ast.NewTerm(child)
		}
		if same {
			return prevV, true, nil
		}
		return ast.NewArray(terms...), false, nil
	case string:
		if p, ok := prev.(string); ok && p == x {
			return prevV, true, nil
		}
	case bool:
		if p, ok := prev.(bool); ok && p == x {
			return prevV, true, nil
		}
	case int64:
		if p, ok := prev.(int64); ok && p == x {
			return prevV, true, nil
		}
	case float64:
		if p, ok := prev.(float64); ok && p == x {
			return prevV, true, nil
		}
	case nil:
		if prev == nil {
			return prevV, true, nil
		}
	}
	v, err := ast.InterfaceToValue(x)
	return v, false, err
}
