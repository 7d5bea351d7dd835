package admission

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
	leasingv1alpha1 "github.com/boualleiguie/macrack-operator/api/leasing/v1alpha1"
	"github.com/boualleiguie/macrack-operator/internal/inventory"
	"github.com/boualleiguie/macrack-operator/internal/policy"
	"github.com/boualleiguie/macrack-operator/policies"
)

func validator(t *testing.T) *PolicyValidator {
	t.Helper()
	engine, err := policy.Load(context.Background(), policies.FS, policy.WithTimeout(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	s := runtime.NewScheme()
	_ = fleetv1alpha1.AddToScheme(s)
	_ = leasingv1alpha1.AddToScheme(s)
	return &PolicyValidator{Engine: engine, Inventory: inventory.Builder{Reader: fake.NewClientBuilder().WithScheme(s).Build()},
		Clock:  clocktesting.NewFakeClock(time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)),
		Params: policy.Params{AgentsNamespace: "macrack-agents", OperatorUsername: "operator"}, Metrics: NewMetrics()}
}

func request(t *testing.T, kind metav1.GroupVersionKind, user string, obj any) admission.Request {
	t.Helper()
	raw, err := json.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	return admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
		Operation: admissionv1.Create, Kind: kind, Object: runtime.RawExtension{Raw: raw},
		UserInfo: authenticationv1.UserInfo{Username: user},
	}}
}

func TestDenialsCarryTheRuleAndTheRightCode(t *testing.T) {
	v := validator(t)
	leaseKind := metav1.GroupVersionKind{Group: "leasing.macrack.io", Version: "v1alpha1", Kind: "MacNodeLease"}
	lease := func(d string) map[string]any {
		return map[string]any{"apiVersion": "leasing.macrack.io/v1alpha1", "kind": "MacNodeLease",
			"metadata": map[string]any{"name": "l", "namespace": "t"}, "spec": map[string]any{"nodeClassName": "m4", "minimumDuration": d}}
	}
	macNodeKind := metav1.GroupVersionKind{Group: "fleet.macrack.io", Version: "v1alpha1", Kind: "MacNode"}
	macNode := map[string]any{"apiVersion": "fleet.macrack.io/v1alpha1", "kind": "MacNode",
		"metadata": map[string]any{"name": "c02a"}, "spec": map[string]any{"serial": "C02A", "nodeClassName": "m4"}}

	cases := []struct {
		name    string
		req     admission.Request
		allowed bool
		code    int32
		message string
	}{
		{"a 24h lease is allowed", request(t, leaseKind, "alice", lease("24h")), true, 0, ""},
		{"a 23h lease is refused as invalid, naming lease.floor and the numbers", request(t, leaseKind, "alice", lease("23h")), false,
			http.StatusUnprocessableEntity, "lease.floor: minimumDuration 23h is below the 24h floor"},
		{"an agent creating a MacNode is forbidden, naming agent.scope",
			request(t, macNodeKind, "system:serviceaccount:macrack-agents:agent-c02a", macNode), false,
			http.StatusForbidden, "agent.scope: agent c02a may not create a MacNode"},
		{"an undecodable object fails closed with an internal error",
			admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{Operation: admissionv1.Create, Kind: leaseKind,
				Object: runtime.RawExtension{Raw: []byte("{not json")}}}, false, http.StatusInternalServerError, "policy.error"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			resp := v.Handle(context.Background(), c.req)
			if resp.Allowed != c.allowed {
				t.Fatalf("allowed=%v, want %v: %+v", resp.Allowed, c.allowed, resp.Result)
			}
			if !c.allowed && (resp.Result.Code != c.code || !strings.Contains(resp.Result.Message, c.message)) {
				t.Fatalf("got %d %q, want %d containing %q", resp.Result.Code, resp.Result.Message, c.code, c.message)
			}
		})
	}
}

func TestTheDefaulterFillsOnlyAnUnsetDuration(t *testing.T) {
	l := &leasingv1alpha1.MacNodeLease{}
	_ = LeaseDefaulter{}.Default(context.Background(), l)
	if l.Spec.MinimumDuration != "24h" {
		t.Fatalf("unset became %q", l.Spec.MinimumDuration)
	}
	l.Spec.MinimumDuration = "23h"
	_ = LeaseDefaulter{}.Default(context.Background(), l)
	if l.Spec.MinimumDuration != "23h" {
		t.Fatal("the defaulter must not touch a set value; validation refuses it")
	}
}
