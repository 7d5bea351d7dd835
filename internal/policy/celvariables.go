package policy

import (
	"context"
	"fmt"
	"math"
	"reflect"
	"strings"

	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"github.com/google/cel-go/common/types/traits"
	plugincel "k8s.io/apiserver/pkg/admission/plugin/cel"
	apiservercel "k8s.io/apiserver/pkg/cel"
)

// celVariables are a twin's variables, compiled by the API server's
// composited compiler, in their declared order.
//
// The API server binds them afresh for every evaluation of a policy's
// conditions (compositionContext.Variables in k8s.io/apiserver's admission
// CEL plugin): a lazy map holding a closure and two map entries per
// variable, built before any variable is read. That was a third of a twin's
// time (BENCHMARKS.md, issue 38). Bound here, the same way (a fresh binding
// per evaluation, each variable evaluated when first read, with the same
// errors and the same cost accounting) but from one slice. The conditions
// are the plugin's own evaluators, which take the binding from the context.
type celVariables struct {
	names   []string
	results []plugincel.CompilationResult
	index   map[string]int
	// plugin leaves the binding to the plugin's composited evaluators
	// (WithPluginVariables).
	plugin bool
}

// add records a compiled variable; a later one of the same name replaces
// it, as in the API server.
func (v *celVariables) add(name string, r plugincel.CompilationResult) {
	if i, ok := v.index[name]; ok {
		v.results[i] = r
		return
	}
	v.index[name] = len(v.names)
	v.names = append(v.names, name)
	v.results = append(v.results, r)
}

// bind is the composition context for one evaluation of a set of
// conditions: its variables unevaluated, its cost zero.
func (v *celVariables) bind(ctx context.Context) context.Context {
	if v.plugin {
		return ctx
	}
	return &celVariablesContext{Context: ctx, vars: v}
}

// uncomposited is the plugin's evaluator under a CompositedConditionEvaluator,
// which would bind the variables its own way; bind supplies them instead.
func uncomposited(e plugincel.ConditionEvaluator) plugincel.ConditionEvaluator {
	if c, ok := e.(*plugincel.CompositedConditionEvaluator); ok {
		return c.ConditionEvaluator
	}
	return e
}

// celVariablesContext implements the plugin's CompositionContext.
type celVariablesContext struct {
	context.Context
	vars *celVariables
	cost int64
}

func (c *celVariablesContext) Variables(activation any) ref.Val {
	return &boundVariables{ctx: c, activation: activation, values: make([]ref.Val, len(c.vars.names))}
}

func (c *celVariablesContext) GetAndResetCost() int64 {
	cost := c.cost
	c.cost = 0
	return cost
}

// eval evaluates variable i as the plugin's variableAccessor does.
func (c *celVariablesContext) eval(i int, activation any) ref.Val {
	name, r := c.vars.names[i], c.vars.results[i]
	if r.Error != nil {
		return types.NewErr("composited variable %q fails to compile: %v", name, r.Error)
	}
	v, details, err := r.Program.ContextEval(c, activation)
	if details == nil {
		return types.NewErr("unable to get evaluation details of variable %q", name)
	}
	costPtr := details.ActualCost()
	if costPtr == nil {
		return types.NewErr("unable to calculate cost of variable %q", name)
	}
	cost := int64(*costPtr)
	if *costPtr > math.MaxInt64 {
		cost = math.MaxInt64
	}
	c.cost += cost
	if err != nil {
		return types.NewErr("composited variable %q fails to evaluate: %v", name, err)
	}
	return v
}

// variablesType is the type the plugin gives its variables' map, built as
// the plugin's lazy.NewMapValue builds it.
//
//lint:ignore SA1019 the plugin's own constructor, so that the type is the same
var variablesType = types.NewTypeValue("kubernetes.variables", traits.IndexerType|traits.FieldTesterType|traits.IterableType)

// boundVariables is the `variables` of one evaluation; it behaves as the
// plugin's lazy.MapValue does.
type boundVariables struct {
	ctx        *celVariablesContext
	activation any
	values     []ref.Val
}

var (
	_ ref.Val       = (*boundVariables)(nil)
	_ traits.Mapper = (*boundVariables)(nil)
)

func (m *boundVariables) resolve(i int) ref.Val {
	if v := m.values[i]; v != nil {
		return v
	}
	v := m.ctx.eval(i, m.activation)
	m.values[i] = v
	return v
}

func (m *boundVariables) Find(key ref.Val) (ref.Val, bool) {
	n, ok := key.(types.String)
	if !ok {
		return types.MaybeNoSuchOverloadErr(n), true
	}
	name, ok := unescape(string(n))
	if !ok {
		return nil, false
	}
	i, ok := m.ctx.vars.index[name]
	if !ok {
		return nil, false
	}
	return m.resolve(i), true
}

// unescape is apiservercel.Unescape, which runs a regular expression over
// every name a condition reads (a sixth of a twin's allocations on
// pod.shape). Its escapes all hold "__", so a name without one is its own
// unescaped form.
func unescape(name string) (string, bool) {
	if !strings.Contains(name, "__") {
		return name, true
	}
	return apiservercel.Unescape(name)
}

func (m *boundVariables) Get(key ref.Val) ref.Val {
	if v, found := m.Find(key); found {
		return v
	}
	return types.ValOrErr(key, "no such key: %v", key)
}

func (m *boundVariables) Contains(key ref.Val) ref.Val {
	v, found := m.Find(key)
	if v != nil && types.IsUnknownOrError(v) {
		return v
	}
	return types.Bool(found)
}

func (m *boundVariables) Size() ref.Val { return types.Int(len(m.values)) }

func (m *boundVariables) Iterator() traits.Iterator { return &variablesIterator{parent: m} }

func (m *boundVariables) ConvertToNative(typeDesc reflect.Type) (any, error) {
	return nil, fmt.Errorf("disallowed conversion from %q to %q", variablesType.TypeName(), typeDesc.Name())
}

func (m *boundVariables) ConvertToType(typeVal ref.Type) ref.Val {
	switch typeVal {
	case variablesType:
		return m
	case types.TypeType:
		return variablesType
	}
	return types.NewErr("disallowed conversion from %q to %q", variablesType.TypeName(), typeVal.TypeName())
}

func (m *boundVariables) Equal(other ref.Val) ref.Val {
	o, ok := other.(*boundVariables)
	if !ok {
		return types.MaybeNoSuchOverloadErr(other)
	}
	return types.Bool(m == o)
}

func (m *boundVariables) Type() ref.Type { return variablesType }

func (m *boundVariables) Value() any { return types.NoSuchOverloadErr() }

// variablesIterator iterates the variables' values, in declared order.
type variablesIterator struct {
	parent *boundVariables
	index  int
}

var _ traits.Iterator = (*variablesIterator)(nil)

func (i *variablesIterator) HasNext() ref.Val { return types.Bool(i.index < len(i.parent.values)) }

func (i *variablesIterator) Next() ref.Val {
	v := i.parent.Get(types.String(i.parent.ctx.vars.names[i.index]))
	i.index++
	return v
}

func (i *variablesIterator) ConvertToNative(typeDesc reflect.Type) (any, error) {
	return nil, fmt.Errorf("disallowed conversion to %q", typeDesc.Name())
}

func (i *variablesIterator) ConvertToType(typeValue ref.Type) ref.Val {
	return types.NewErr("disallowed conversion to %q", typeValue.TypeName())
}

func (i *variablesIterator) Equal(other ref.Val) ref.Val {
	o, ok := other.(*variablesIterator)
	if !ok {
		return types.MaybeNoSuchOverloadErr(other)
	}
	return types.Bool(o == i)
}

func (i *variablesIterator) Type() ref.Type { return types.IteratorType }

func (i *variablesIterator) Value() any { return nil }
