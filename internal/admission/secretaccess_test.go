package admission

import (
	"context"
	"errors"
	"net/http"
	"reflect"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
)

// sarStub answers SubjectAccessReviews as an API server would whose RBAC
// lets the users in may get Secret runner-token, and records each review.
type sarStub struct {
	client.Writer // only Create is called
	may           map[string]bool
	err           error
	asked         []authorizationv1.SubjectAccessReviewSpec
}

func (s *sarStub) Create(_ context.Context, obj client.Object, _ ...client.CreateOption) error {
	sar := obj.(*authorizationv1.SubjectAccessReview)
	s.asked = append(s.asked, *sar.Spec.DeepCopy())
	if s.err != nil {
		return s.err
	}
	a := sar.Spec.ResourceAttributes
	sar.Status.Allowed = s.may[sar.Spec.User] && a.Verb == "get" && a.Resource == "secrets" && a.Group == "" && a.Name == "runner-token"
	if !sar.Status.Allowed {
		sar.Status.Reason = "no RBAC policy matched"
	}
	return nil
}

var runnerKind = metav1.GroupVersionKind{Group: "workloads.macrack.io", Version: "v1alpha1", Kind: "GitLabRunner"}

// glRunner is a GitLabRunner of lease build in namespace t, as the API
// server sends it.
func glRunner(url, secret, ca string, concurrency int64) map[string]any {
	gl := map[string]any{"url": url, "tokenSecretRef": map[string]any{"name": secret, "key": "token"}}
	if ca != "" {
		gl["caBundle"] = ca
	}
	return map[string]any{"apiVersion": "workloads.macrack.io/v1alpha1", "kind": "GitLabRunner",
		"metadata": map[string]any{"name": "ios", "namespace": "t", "uid": "r-1"},
		"spec": map[string]any{"leaseName": "build", "imageName": "sequoia", "concurrency": concurrency,
			"template": map[string]any{"cpu": int64(4), "memory": "8Gi", "disk": "200Gi"}, "gitlab": gl}}
}

func TestTheSecretReviewAsksAsTheRequesterExactly(t *testing.T) {
	req := admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{UserInfo: authenticationv1.UserInfo{
		Username: "alice", UID: "u-alice", Groups: []string{"devs", "system:authenticated"},
		Extra: map[string]authenticationv1.ExtraValue{"scopes.example.com": {"ci", "read"}},
	}}}
	got := secretReview(req, "t", "runner-token").Spec
	want := authorizationv1.SubjectAccessReviewSpec{
		User: "alice", UID: "u-alice", Groups: []string{"devs", "system:authenticated"},
		Extra:              map[string]authorizationv1.ExtraValue{"scopes.example.com": {"ci", "read"}},
		ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: "t", Verb: "get", Version: "v1", Resource: "secrets", Name: "runner-token"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("review\n got %+v\nwant %+v", got, want)
	}
	// The review holds copies: the request is not aliased.
	got.Groups[0], got.Extra["scopes.example.com"][0] = "x", "x"
	if req.UserInfo.Groups[0] != "devs" || req.UserInfo.Extra["scopes.example.com"][0] != "ci" {
		t.Fatal("the review shares the request's slices")
	}
}

func TestWhichRunnerWritesNameTheToken(t *testing.T) {
	base := glRunner("https://gitlab.example.com", "runner-token", "", 1)
	lease := metav1.GroupVersionKind{Group: "leasing.macrack.io", Version: "v1alpha1", Kind: "MacNodeLease"}
	withKey := glRunner("https://gitlab.example.com", "runner-token", "", 1)
	withKey["spec"].(map[string]any)["gitlab"].(map[string]any)["tokenSecretRef"].(map[string]any)["key"] = "other"
	finalized := glRunner("https://gitlab.example.com", "runner-token", "", 1)
	finalized["metadata"].(map[string]any)["finalizers"] = []any{"workloads.macrack.io/runner"}
	for _, c := range []struct {
		name string
		req  admission.Request
		want bool
	}{
		{"a new runner names its token", review(t, admissionv1.Create, runnerKind, "", "alice", base, nil), true},
		{"a new url names it again", review(t, admissionv1.Update, runnerKind, "", "alice", glRunner("https://127.0.0.1:8443", "runner-token", "", 1), base), true},
		{"a new caBundle names it again", review(t, admissionv1.Update, runnerKind, "", "alice", glRunner("https://gitlab.example.com", "runner-token", "PEM", 1), base), true},
		{"a new Secret names it again", review(t, admissionv1.Update, runnerKind, "", "alice", glRunner("https://gitlab.example.com", "db", "", 1), base), true},
		{"a new key names it again", review(t, admissionv1.Update, runnerKind, "", "alice", withKey, base), true},
		{"a new concurrency does not", review(t, admissionv1.Update, runnerKind, "", "alice", glRunner("https://gitlab.example.com", "runner-token", "", 2), base), false},
		{"the operator's finalizer does not", review(t, admissionv1.Update, runnerKind, "", "operator", finalized, base), false},
		{"a status write does not", review(t, admissionv1.Update, runnerKind, "status", "operator", glRunner("https://127.0.0.1", "runner-token", "", 1), base), false},
		{"a delete does not", review(t, admissionv1.Delete, runnerKind, "", "alice", nil, base), false},
		{"another kind does not", review(t, admissionv1.Create, lease, "", "alice", base, nil), false},
	} {
		t.Run(c.name, func(t *testing.T) {
			obj, _ := decode(c.req.Object.Raw)
			old, _ := decode(c.req.OldObject.Raw)
			if got := namesToken(c.req, obj, old); got != c.want {
				t.Fatalf("namesToken = %v, want %v", got, c.want)
			}
		})
	}
}

// The requester who may not read the Secret is refused whatever else the
// runner says; one who may is admitted; an update that names no token is
// not asked about.
func TestTheWebhookAsksTheAPIServerAsTheRequester(t *testing.T) {
	v := validator(t)
	stub := &sarStub{may: map[string]bool{"owner": true}}
	v.Reviews = stub
	base := glRunner("https://gitlab.example.com", "runner-token", "", 1)

	resp := v.Handle(context.Background(), review(t, admissionv1.Create, runnerKind, "", "mallory", glRunner("https://127.0.0.1:8443", "runner-token", "PEM", 1), nil))
	if resp.Allowed || resp.Result.Code != http.StatusForbidden ||
		!strings.Contains(resp.Result.Message, "runner.secret: mallory may not create or repoint GitLabRunner ios: mallory may not get Secret t/runner-token") {
		t.Fatalf("mallory: allowed=%v %d %q", resp.Allowed, resp.Result.Code, resp.Result.Message)
	}
	if len(stub.asked) != 1 || stub.asked[0].User != "mallory" || stub.asked[0].ResourceAttributes.Name != "runner-token" {
		t.Fatalf("asked %+v", stub.asked)
	}
	if resp := v.Handle(context.Background(), review(t, admissionv1.Create, runnerKind, "", "owner", base, nil)); !resp.Allowed {
		t.Fatalf("owner refused: %q", resp.Result.Message)
	}
	stub.asked = nil
	more := glRunner("https://gitlab.example.com", "runner-token", "", 2)
	if resp := v.Handle(context.Background(), review(t, admissionv1.Update, runnerKind, "", "mallory", more, base)); !resp.Allowed {
		t.Fatalf("an update naming no token refused: %q", resp.Result.Message)
	}
	if len(stub.asked) != 0 {
		t.Fatalf("an update naming no token was asked about: %+v", stub.asked)
	}
}

// A review that fails refuses the runner as policy.error, and only the
// runner: the other kinds never wait on it.
func TestAFailedReviewRefusesOnlyGitLabRunners(t *testing.T) {
	v := validator(t)
	v.Reviews = &sarStub{err: errors.New("the API server is unreachable")}
	resp := v.Handle(context.Background(), review(t, admissionv1.Create, runnerKind, "", "owner", glRunner("https://gitlab.example.com", "runner-token", "", 1), nil))
	if resp.Allowed || resp.Result.Code != http.StatusInternalServerError ||
		!strings.Contains(resp.Result.Message, "policy.error: asking whether owner may get Secret t/runner-token: the API server is unreachable") {
		t.Fatalf("allowed=%v %d %q", resp.Allowed, resp.Result.Code, resp.Result.Message)
	}
	v.Reviews = nil
	if resp := v.Handle(context.Background(), review(t, admissionv1.Create, runnerKind, "", "owner", glRunner("https://gitlab.example.com", "runner-token", "", 1), nil)); resp.Allowed {
		t.Fatal("admitted a runner with no way to ask")
	}
	v.Reviews = &sarStub{err: errors.New("the API server is unreachable")}
	leaseKind := metav1.GroupVersionKind{Group: "leasing.macrack.io", Version: "v1alpha1", Kind: "MacNodeLease"}
	lease := map[string]any{"apiVersion": "leasing.macrack.io/v1alpha1", "kind": "MacNodeLease",
		"metadata": map[string]any{"name": "l", "namespace": "t"}, "spec": map[string]any{"nodeClassName": "m4", "minimumDuration": "24h"}}
	if resp := v.Handle(context.Background(), review(t, admissionv1.Create, leaseKind, "", "alice", lease, nil)); !resp.Allowed {
		t.Fatalf("a lease refused for a runner's review: %q", resp.Result.Message)
	}
}
