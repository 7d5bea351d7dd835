package policy

import (
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// AdmissionPolicy is one CEL rule as the API server runs it: the policy,
// its binding, and the rule id.
type AdmissionPolicy struct {
	Rule    string
	Policy  *admissionregistrationv1.ValidatingAdmissionPolicy
	Binding *admissionregistrationv1.ValidatingAdmissionPolicyBinding
}

// AdmissionPolicies renders every CEL twin as a ValidatingAdmissionPolicy and
// its binding, with p's settings written in. The in-process engine compiles
// these same policies. The operator applies them, since an OLM bundle
// cannot carry them.
func (e *Engine) AdmissionPolicies(p Params) ([]AdmissionPolicy, error) {
	out := make([]AdmissionPolicy, 0, len(e.celFiles))
	for _, f := range e.celFiles {
		rf, err := f.rendered(p)
		if err != nil {
			return nil, err
		}
		out = append(out, AdmissionPolicy{Rule: f.ID, Policy: rf.vap(e.revision), Binding: f.binding()})
	}
	return out, nil
}

// ParamsConfigMap records the settings the policies were rendered with, for
// reviewers and `kubectl get`; no policy reads it.
func ParamsConfigMap(namespace string, p Params) *corev1.ConfigMap {
	return &corev1.ConfigMap{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: metav1.ObjectMeta{
			Name:      ParamsConfigMapName,
			Namespace: namespace,
			Labels:    map[string]string{"app.kubernetes.io/part-of": "macrack"},
		},
		Data: p.Data(),
	}
}
