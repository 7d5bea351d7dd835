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
// its binding, with p's settings written in; a twin with params reads them
// from ParamsConfigMapName in paramsNamespace. The in-process engine
// compiles these same policies. The operator applies them at start-up, since
// an OLM bundle cannot carry them.
func (e *Engine) AdmissionPolicies(paramsNamespace string, p Params) ([]AdmissionPolicy, error) {
	out := make([]AdmissionPolicy, 0, len(e.celFiles))
	for _, f := range e.celFiles {
		rf, err := f.rendered(p)
		if err != nil {
			return nil, err
		}
		out = append(out, AdmissionPolicy{Rule: f.ID, Policy: rf.vap(e.revision), Binding: f.binding(paramsNamespace)})
	}
	return out, nil
}

// ParamsConfigMap is the ConfigMap the policies read as params.
func ParamsConfigMap(namespace string, p Params) *corev1.ConfigMap {
	data := map[string]string{}
	for k, v := range p.Data() {
		data[k] = v.(string)
	}
	return &corev1.ConfigMap{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: metav1.ObjectMeta{
			Name:      ParamsConfigMapName,
			Namespace: namespace,
			Labels:    map[string]string{"app.kubernetes.io/part-of": "macrack"},
		},
		Data: data,
	}
}
