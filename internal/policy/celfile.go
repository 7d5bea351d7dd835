package policy

import (
	"fmt"
	"strings"

	"github.com/google/cel-go/common"
	"github.com/google/cel-go/common/ast"
	celparser "github.com/google/cel-go/parser"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
)

// celFile is one <area>/<rule>.cel.yaml: the CEL twin of a Rego rule, in the
// shape of a ValidatingAdmissionPolicy, with a rule code on each validation.
type celFile struct {
	ID               string                                   `json:"id"`
	Kinds            []string                                 `json:"kinds"`
	Settings         []string                                 `json:"settings,omitempty"`
	Reason           metav1.StatusReason                      `json:"reason,omitempty"`
	MatchConstraints admissionregistrationv1.MatchResources   `json:"matchConstraints"`
	MatchConditions  []admissionregistrationv1.MatchCondition `json:"matchConditions,omitempty"`
	Variables        []admissionregistrationv1.Variable       `json:"variables,omitempty"`
	Validations      []celValidation                          `json:"validations"`

	path string
}

type celValidation struct {
	Code              string `json:"code"`
	Expression        string `json:"expression"`
	Message           string `json:"message,omitempty"`
	MessageExpression string `json:"messageExpression,omitempty"`
}

// Names of the generated objects.
const (
	// ParamsConfigMapName is the ConfigMap that records the settings the
	// operator rendered its policies with. No policy reads it.
	ParamsConfigMapName = "macrack-policy-params"
	// DefaultParamsNamespace is where it lives by default (the operator's
	// namespace).
	DefaultParamsNamespace = "macrack-system"
	// RuleLabel names, on a generated VAP, the rule it deploys.
	RuleLabel = fleetv1alpha1.PolicyRuleLabel
	// RevisionAnnotation records the bundle revision a VAP came from.
	RevisionAnnotation = fleetv1alpha1.PolicyRevisionAnnotation
)

func parseCELFile(path string, data []byte) (*celFile, error) {
	f := &celFile{path: path}
	if err := yaml.UnmarshalStrict(data, f); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if f.ID == "" {
		return nil, fmt.Errorf("%s: id is empty", path)
	}
	if len(f.Validations) == 0 {
		return nil, fmt.Errorf("%s: no validations", path)
	}
	for i, v := range f.Validations {
		if v.Code == "" || v.Expression == "" {
			return nil, fmt.Errorf("%s: validations[%d] needs a code and an expression", path, i)
		}
	}
	if err := f.checkDeployable(); err != nil {
		return nil, err
	}
	return f, nil
}

// forbiddenIdents are the input fields only the in-process engines have. A
// rule deployed to the API server must not read them.
var forbiddenIdents = map[string]bool{"now": true, "inventory": true}

// checkDeployable fails if an expression reads now or inventory, which a
// ValidatingAdmissionPolicy does not have.
func (f *celFile) checkDeployable() error {
	p, err := celparser.NewParser(celparser.Macros(celparser.AllMacros...), celparser.EnableOptionalSyntax(true))
	if err != nil {
		return err
	}
	check := func(where, expr string) error {
		if expr == "" {
			return nil
		}
		parsed, iss := p.Parse(common.NewTextSource(expr))
		if len(iss.GetErrors()) > 0 {
			return fmt.Errorf("%w: %s: %s: %s", ErrGenerate, f.path, where, iss.ToDisplayString())
		}
		var found []string
		ast.PostOrderVisit(parsed.Expr(), ast.NewExprVisitor(func(e ast.Expr) {
			if e.Kind() == ast.IdentKind && forbiddenIdents[e.AsIdent()] {
				found = append(found, e.AsIdent())
			}
		}))
		if len(found) > 0 {
			return fmt.Errorf("%w: %s: %s references %s, which a ValidatingAdmissionPolicy does not have; keep that part of the rule in Rego",
				ErrGenerate, f.path, where, strings.Join(found, " and "))
		}
		return nil
	}
	for _, v := range f.Variables {
		if err := check("variable "+v.Name, v.Expression); err != nil {
			return err
		}
	}
	for _, c := range f.MatchConditions {
		if err := check("matchCondition "+c.Name, c.Expression); err != nil {
			return err
		}
	}
	for i, v := range f.Validations {
		if err := check(fmt.Sprintf("validations[%d]", i), v.Expression); err != nil {
			return err
		}
		if err := check(fmt.Sprintf("validations[%d].messageExpression", i), v.MessageExpression); err != nil {
			return err
		}
	}
	return nil
}

// policyName is the VAP's name for a rule id: macrack-lease-floor.
func policyName(id string) string {
	return "macrack-" + strings.NewReplacer(".", "-", "_", "-").Replace(id)
}

// vap renders the ValidatingAdmissionPolicy. The in-process engine compiles
// this very object, so what runs here is what the API server runs.
func (f *celFile) vap(revision string) *admissionregistrationv1.ValidatingAdmissionPolicy {
	reason := f.Reason
	if reason == "" {
		reason = metav1.StatusReasonInvalid
	}
	validations := make([]admissionregistrationv1.Validation, len(f.Validations))
	for i, v := range f.Validations {
		validations[i] = admissionregistrationv1.Validation{
			Expression:        v.Expression,
			Message:           v.Message,
			MessageExpression: v.MessageExpression,
			Reason:            ptr.To(reason),
		}
	}
	mc := f.MatchConstraints.DeepCopy()
	if mc.MatchPolicy == nil {
		mc.MatchPolicy = ptr.To(admissionregistrationv1.Equivalent)
	}
	p := &admissionregistrationv1.ValidatingAdmissionPolicy{
		TypeMeta: metav1.TypeMeta{APIVersion: "admissionregistration.k8s.io/v1", Kind: "ValidatingAdmissionPolicy"},
		ObjectMeta: metav1.ObjectMeta{
			Name:        policyName(f.ID),
			Labels:      map[string]string{RuleLabel: f.ID, "app.kubernetes.io/part-of": "macrack"},
			Annotations: map[string]string{RevisionAnnotation: revision},
		},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			FailurePolicy:    ptr.To(admissionregistrationv1.Fail),
			MatchConstraints: mc,
			MatchConditions:  f.MatchConditions,
			Variables:        f.Variables,
			Validations:      validations,
		},
	}
	return p
}

// binding renders the policy's binding. No binding takes a param: a
// missing param would deny every request the policy matches.
func (f *celFile) binding() *admissionregistrationv1.ValidatingAdmissionPolicyBinding {
	return &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		TypeMeta: metav1.TypeMeta{APIVersion: "admissionregistration.k8s.io/v1", Kind: "ValidatingAdmissionPolicyBinding"},
		ObjectMeta: metav1.ObjectMeta{
			Name:   policyName(f.ID),
			Labels: map[string]string{RuleLabel: f.ID, "app.kubernetes.io/part-of": "macrack"},
		},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName:        policyName(f.ID),
			ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny},
		},
	}
}
