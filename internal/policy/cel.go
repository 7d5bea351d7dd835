package policy

import (
	"context"
	"fmt"
	"slices"
	"strings"

	celtypes "github.com/google/cel-go/common/types"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/admission"
	plugincel "k8s.io/apiserver/pkg/admission/plugin/cel"
	"k8s.io/apiserver/pkg/admission/plugin/policy/validating"
	"k8s.io/apiserver/pkg/admission/plugin/webhook/matchconditions"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/cel/environment"
)

// celRule is a CEL twin compiled exactly as the API server compiles a
// ValidatingAdmissionPolicy (k8s.io/apiserver's validating plugin). A twin
// with settings is compiled once per Params it is asked about, as the
// operator renders one policy from its own.
type celRule struct {
	file     *celFile
	policy   *admissionregistrationv1.ValidatingAdmissionPolicy
	vap      *compiledVAP
	envSet   *environment.EnvSet
	revision string
	rendered boundedCache[Params, *compiledVAP]
	// pluginVariables binds variables as the API server's plugin does, for
	// the test that holds celVariables to it.
	pluginVariables bool
}

// settingsProbe renders twins with settings at load, so that one that does
// not compile fails the load rather than its first request.
var settingsProbe = Params{AgentsNamespace: "macrack-agents", AgentTokenAudiences: "https://kubernetes.default.svc"}

func newCELRule(envSet *environment.EnvSet, f *celFile, revision string, defaults Params, pluginVariables bool) (*celRule, error) {
	r := &celRule{file: f, envSet: envSet, revision: revision, pluginVariables: pluginVariables}
	probe := defaults
	if len(f.Settings) > 0 && probe.Validate() != nil {
		probe = settingsProbe
	}
	rf, err := f.rendered(probe)
	if err != nil {
		return nil, err
	}
	r.policy = rf.vap(revision)
	if r.vap, err = compileVAP(envSet, r.policy, r.pluginVariables); err != nil {
		return nil, fmt.Errorf("%s: %w", f.path, err)
	}
	return r, nil
}

// compiledFor is the twin as the operator would render it from p.
func (r *celRule) compiledFor(p Params) (*compiledVAP, error) {
	if len(r.file.Settings) == 0 {
		return r.vap, nil
	}
	return r.rendered.get(p, func() (*compiledVAP, error) {
		rf, err := r.file.rendered(p)
		if err != nil {
			return nil, err
		}
		return compileVAP(r.envSet, rf.vap(r.revision), r.pluginVariables)
	})
}

// compiledVAP holds the policy's compiled programs: match conditions,
// validations and message expressions.
type compiledVAP struct {
	matcher     matchconditions.Matcher
	validations plugincel.ConditionEvaluator
	messages    plugincel.ConditionEvaluator
	// variables are the policy's variables, compiled by the API server's
	// composited compiler; each evaluation binds them afresh (variables.go).
	variables *celVariables
}

// compileVAP mirrors compilePolicy in k8s.io/apiserver's validating plugin:
// the same environment (the base env set at the default compatibility
// version), the same variable declarations, the same composited compiler for
// variables, match conditions, validations and messages.
func compileVAP(envSet *environment.EnvSet, p *admissionregistrationv1.ValidatingAdmissionPolicy, pluginVariables bool) (*compiledVAP, error) {
	hasParam := p.Spec.ParamKind != nil
	optionalVars := plugincel.OptionalVariableDeclarations{HasParams: hasParam, HasAuthorizer: true}
	expressionOptionalVars := plugincel.OptionalVariableDeclarations{HasParams: hasParam, HasAuthorizer: false}
	compiler, err := plugincel.NewCompositedCompiler(envSet)
	if err != nil {
		return nil, err
	}
	// The API server reports a variable that does not compile only when an
	// expression reads it; here it fails the load.
	var errs []string
	c := &compiledVAP{variables: &celVariables{index: make(map[string]int, len(p.Spec.Variables))}}
	uncomposited := uncomposited
	if pluginVariables {
		c.variables.plugin = true
		uncomposited = func(e plugincel.ConditionEvaluator) plugincel.ConditionEvaluator { return e }
	}
	for _, v := range p.Spec.Variables {
		res := compiler.CompileAndStoreVariable(&validating.Variable{Name: v.Name, Expression: v.Expression}, optionalVars, environment.StoredExpressions)
		if res.Error != nil {
			errs = append(errs, fmt.Sprintf("variable %s: %v", v.Name, res.Error))
		}
		c.variables.add(v.Name, res)
	}

	if len(p.Spec.MatchConditions) > 0 {
		conds := make([]plugincel.ExpressionAccessor, len(p.Spec.MatchConditions))
		for i := range p.Spec.MatchConditions {
			conds[i] = (*matchconditions.MatchCondition)(&p.Spec.MatchConditions[i])
		}
		c.matcher = matchconditions.NewMatcher(uncomposited(compiler.CompileCondition(conds, optionalVars, environment.StoredExpressions)),
			p.Spec.FailurePolicy, "policy", "validate", p.Name)
	}
	validations := make([]plugincel.ExpressionAccessor, len(p.Spec.Validations))
	messages := make([]plugincel.ExpressionAccessor, len(p.Spec.Validations))
	for i, v := range p.Spec.Validations {
		validations[i] = &validating.ValidationCondition{Expression: v.Expression, Message: v.Message, Reason: v.Reason}
		if v.MessageExpression != "" {
			messages[i] = &validating.MessageExpressionCondition{MessageExpression: v.MessageExpression}
		}
	}
	c.validations = uncomposited(compiler.CompileCondition(validations, optionalVars, environment.StoredExpressions))
	c.messages = uncomposited(compiler.CompileCondition(messages, expressionOptionalVars, environment.StoredExpressions))
	for _, e := range c.validations.CompilationErrors() {
		errs = append(errs, e.Error())
	}
	for _, e := range c.messages.CompilationErrors() {
		errs = append(errs, e.Error())
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("compiling %s: %s", p.Name, strings.Join(errs, "; "))
	}
	return c, nil
}

// newCELEnvSet is the environment the API server builds for admission
// policies at this version.
func newCELEnvSet() *environment.EnvSet {
	return environment.MustBaseEnvSet(environment.DefaultCompatibilityVersion())
}

// matches reports whether the request falls under the policy's
// matchConstraints, as the API server decides it (resource, subresource,
// operation; MacRack's policies use no selectors).
func (r *celRule) matches(req *Request) bool {
	mc := r.policy.Spec.MatchConstraints
	resource := req.Resource.Resource
	if req.SubResource != "" {
		resource += "/" + req.SubResource
	}
	for _, rule := range mc.ResourceRules {
		if !containsOrStar(rule.APIGroups, req.Resource.Group) || !containsOrStar(rule.APIVersions, req.Resource.Version) {
			continue
		}
		if !containsOrStar(rule.Resources, resource) {
			continue
		}
		for _, op := range rule.Operations {
			if op == admissionregistrationv1.OperationAll || string(op) == req.Operation {
				return true
			}
		}
	}
	return false
}

func containsOrStar(list []string, v string) bool {
	return slices.Contains(list, "*") || slices.Contains(list, v)
}

// eval runs the twin on one input and normalises the answer. It follows the
// validating plugin's Validate, except that message expressions are
// evaluated only when a validation denies (the answer is the same, and an
// admitted request costs half as much), and that each set of conditions
// reads its variables through celVariables, bound as the plugin binds them.
func (r *celRule) eval(ctx context.Context, in *Input) outcome {
	var obj, old runtime.Object
	if in.Object != nil {
		obj = &unstructured.Unstructured{Object: in.Object}
	}
	if in.OldObject != nil {
		old = &unstructured.Unstructured{Object: in.OldObject}
	}
	vap, err := r.compiledFor(in.Params)
	if err != nil {
		return outcome{errs: []string{err.Error()}}
	}
	req := in.Request
	attrs := admission.NewAttributesRecord(obj, old, req.Kind, req.Namespace, req.Name, req.Resource, req.SubResource,
		admission.Operation(req.Operation), nil, false,
		&user.DefaultInfo{Name: req.UserInfo.Username, UID: req.UserInfo.UID, Groups: req.UserInfo.Groups})
	versioned := &admission.VersionedAttributes{Attributes: attrs, VersionedKind: req.Kind,
		VersionedObject: admission.NewLazyObject(obj), VersionedOldObject: admission.NewLazyObject(old)}

	if vap.matcher != nil {
		m := vap.matcher.Match(vap.variables.bind(ctx), versioned, nil, nil)
		if m.Error != nil {
			return outcome{errs: []string{m.Error.Error()}}
		}
		if !m.Matches {
			return outcome{}
		}
	}
	request := plugincel.CreateAdmissionRequest(attrs, metav1.GroupVersionResource(req.Resource), metav1.GroupVersionKind(req.Kind))
	results, remaining, err := vap.validations.ForInput(vap.variables.bind(ctx), versioned, request,
		plugincel.OptionalVariableBindings{}, nil, celconfig.RuntimeCELCostBudget)
	if err != nil {
		return outcome{errs: []string{err.Error()}}
	}
	var out outcome
	var denied []int
	for i, res := range results {
		switch {
		case res.Error != nil:
			out.errs = append(out.errs, res.Error.Error())
		case res.EvalResult != celtypes.True:
			denied = append(denied, i)
		}
	}
	if len(denied) > 0 {
		messages, _, _ := vap.messages.ForInput(vap.variables.bind(ctx), versioned, request,
			plugincel.OptionalVariableBindings{}, nil, remaining)
		for _, i := range denied {
			v := r.file.Validations[i]
			msg := v.Message
			if i < len(messages) && messages[i].Error == nil && messages[i].EvalResult != nil {
				if s, ok := messages[i].EvalResult.Value().(string); ok && strings.TrimSpace(s) != "" {
					msg = strings.TrimSpace(s)
				}
			}
			if msg == "" {
				msg = fmt.Sprintf("failed expression: %s", v.Expression)
			}
			out.violations = append(out.violations, Violation{Rule: r.file.ID, Code: v.Code, Message: msg})
		}
	}
	if err := ctx.Err(); err != nil {
		out.errs = append(out.errs, err.Error())
	}
	return out
}
