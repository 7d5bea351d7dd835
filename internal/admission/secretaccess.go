package admission

import (
	"context"
	"fmt"
	"reflect"
	"strings"

	admissionv1 "k8s.io/api/admission/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	workloadsv1alpha1 "github.com/boualleiguie/macrack-operator/api/workloads/v1alpha1"
)

// +kubebuilder:rbac:groups=authorization.k8s.io,resources=subjectaccessreviews,verbs=create

// TokenSecretAccessRole is the inventory role of runner.secret's fact: the
// API server's answer to whether the requester may get the Secret a
// GitLabRunner names.
const TokenSecretAccessRole = "tokenSecretAccess"

// tokenFields are the GitLabRunner fields that say which Secret is read and
// where its token goes: a change to any of them names the token again.
var tokenFields = [][]string{
	{"spec", "gitlab", "tokenSecretRef"},
	{"spec", "gitlab", "url"},
	{"spec", "gitlab", "caBundle"},
}

var gitLabRunnerKind = workloadsv1alpha1.GroupVersion.WithKind("GitLabRunner").GroupKind()

// namesToken says whether req is a GitLabRunner write whose requester must
// be allowed to get its token Secret: a CREATE, or an UPDATE that changes
// a token field.
func namesToken(req admission.Request, obj, old map[string]any) bool {
	if (schema.GroupKind{Group: req.Kind.Group, Kind: req.Kind.Kind}) != gitLabRunnerKind || req.SubResource != "" {
		return false
	}
	switch req.Operation {
	case admissionv1.Create:
		return true
	case admissionv1.Update:
		for _, f := range tokenFields {
			if !reflect.DeepEqual(nested(obj, f...), nested(old, f...)) {
				return true
			}
		}
	}
	return false
}

// secretReview asks whether req's requester, exactly as the API server
// authenticated them, may get Secret namespace/name.
func secretReview(req admission.Request, namespace, name string) *authorizationv1.SubjectAccessReview {
	u := req.UserInfo
	var extra map[string]authorizationv1.ExtraValue
	if len(u.Extra) > 0 {
		extra = make(map[string]authorizationv1.ExtraValue, len(u.Extra))
		for k, v := range u.Extra {
			extra[k] = authorizationv1.ExtraValue(append([]string(nil), v...))
		}
	}
	return &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User: u.Username, UID: u.UID, Groups: append([]string(nil), u.Groups...), Extra: extra,
		ResourceAttributes: &authorizationv1.ResourceAttributes{
			Namespace: namespace, Verb: "get", Version: "v1", Resource: "secrets", Name: name,
		},
	}}
}

// tokenSecretAccess asks the API server, for a request that names a
// runner's token, whether its requester may get that Secret, and returns
// the answer as runner.secret reads it. It returns nil when the request
// names no token. An error means no answer: the caller refuses.
func tokenSecretAccess(ctx context.Context, reviews client.Writer, req admission.Request, obj, old map[string]any) (map[string]any, error) {
	if !namesToken(req, obj, old) {
		return nil, nil
	}
	namespace := req.Namespace
	if ns, ok := nested(obj, "metadata", "namespace").(string); ok && ns != "" {
		namespace = ns
	}
	name, _ := nested(obj, "spec", "gitlab", "tokenSecretRef", "name").(string)
	if reviews == nil {
		return nil, fmt.Errorf("asking whether %s may get Secret %s/%s: no SubjectAccessReview client", req.UserInfo.Username, namespace, name)
	}
	sar := secretReview(req, namespace, name)
	if err := reviews.Create(ctx, sar); err != nil {
		return nil, fmt.Errorf("asking whether %s may get Secret %s/%s: %w", req.UserInfo.Username, namespace, name, err)
	}
	fact := map[string]any{
		"namespace": namespace, "name": name, "user": req.UserInfo.Username,
		"allowed": sar.Status.Allowed && !sar.Status.Denied,
	}
	if r := strings.TrimSpace(sar.Status.Reason + " " + sar.Status.EvaluationError); r != "" {
		fact["reason"] = r
	}
	return fact, nil
}

// nested reads a value of m by path; nil when absent.
func nested(m map[string]any, path ...string) any {
	var cur any = m
	for _, p := range path {
		mm, ok := cur.(map[string]any)
		if !ok {
			return nil
		}
		cur = mm[p]
	}
	return cur
}
