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
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	computev1alpha1 "github.com/boualleiguie/macrack-operator/api/compute/v1alpha1"
	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
	leasingv1alpha1 "github.com/boualleiguie/macrack-operator/api/leasing/v1alpha1"
	"github.com/boualleiguie/macrack-operator/internal/index"
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

// review is an admission request as the API server sends it.
func review(t *testing.T, op admissionv1.Operation, kind metav1.GroupVersionKind, sub, user string, obj, old map[string]any) admission.Request {
	t.Helper()
	raw := func(o map[string]any) runtime.RawExtension {
		if o == nil {
			return runtime.RawExtension{}
		}
		b, err := json.Marshal(o)
		if err != nil {
			t.Fatal(err)
		}
		return runtime.RawExtension{Raw: b}
	}
	req := admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
		Operation: op, Kind: kind, SubResource: sub, Object: raw(obj), OldObject: raw(old),
		UserInfo: authenticationv1.UserInfo{Username: user},
	}}
	if m, ok := obj["metadata"].(map[string]any); ok {
		req.Name, _ = m["name"].(string)
		req.Namespace, _ = m["namespace"].(string)
	}
	return req
}

// TestEachRuleAtTheWebhookAlone: the handler, with the bundle and the
// cluster state its caches would hold, refuses each rule's violation with
// the rule's code, and admits the same write made legal beside it.
// Proves: tenancy.serial, tenancy.class, node.commercial, quota.never-circumvent, instance.image, instance.wipe, agent.scope, quarantine.fence, audit.finalizer, runner.secret
func TestEachRuleAtTheWebhookAlone(t *testing.T) {
	v := validator(t)
	s := runtime.NewScheme()
	_ = fleetv1alpha1.AddToScheme(s)
	_ = leasingv1alpha1.AddToScheme(s)
	_ = computev1alpha1.AddToScheme(s)
	state := fake.NewClientBuilder().WithScheme(s).WithObjects(
		&fleetv1alpha1.MacNodeClass{ObjectMeta: metav1.ObjectMeta{Name: "m4"}, Spec: fleetv1alpha1.MacNodeClassSpec{
			Chip: "M4", Memory: resource.MustParse("16Gi"), Disk: resource.MustParse("1T"), NetworkGbps: 10, VMCapacity: 2}},
		&fleetv1alpha1.MacOSImage{ObjectMeta: metav1.ObjectMeta{Name: "sequoia"},
			Status: fleetv1alpha1.MacOSImageStatus{Resolved: &fleetv1alpha1.ResolvedImage{MinimumDisk: resource.MustParse("120Gi")}}},
		&leasingv1alpha1.MacNodeLease{ObjectMeta: metav1.ObjectMeta{Name: "build", Namespace: "t"},
			Spec:   leasingv1alpha1.MacNodeLeaseSpec{NodeClassName: "m4", MinimumDuration: "24h"},
			Status: leasingv1alpha1.MacNodeLeaseStatus{Phase: leasingv1alpha1.LeaseBound, NodeName: "c02a"}},
		// The lease "fenced" holds chassis C02Q, whose kernel VM quota stuck.
		&leasingv1alpha1.MacNodeLease{ObjectMeta: metav1.ObjectMeta{Name: "fenced", Namespace: "t"},
			Spec:   leasingv1alpha1.MacNodeLeaseSpec{NodeClassName: "m4", MinimumDuration: "24h"},
			Status: leasingv1alpha1.MacNodeLeaseStatus{Phase: leasingv1alpha1.LeaseBound, NodeName: "c02q", Serial: "C02Q"}},
		quarantinedChassis("c02q", fleetv1alpha1.MacNodeQuarantined),
	)
	for _, ix := range index.Definitions() {
		state = state.WithIndex(ix.Object, ix.Name, ix.Value)
	}
	cluster := state.Build()
	v.Inventory = inventory.Builder{Reader: cluster}
	v.Reviews = &sarStub{may: map[string]bool{"owner": true}}

	macNode := metav1.GroupVersionKind{Group: "fleet.macrack.io", Version: "v1alpha1", Kind: "MacNode"}
	class := metav1.GroupVersionKind{Group: "fleet.macrack.io", Version: "v1alpha1", Kind: "MacNodeClass"}
	instance := metav1.GroupVersionKind{Group: "compute.macrack.io", Version: "v1alpha1", Kind: "MacOSInstance"}
	node := func(name string, status map[string]any) map[string]any {
		return map[string]any{"apiVersion": "fleet.macrack.io/v1alpha1", "kind": "MacNode",
			"metadata": map[string]any{"name": name}, "spec": map[string]any{"serial": strings.ToUpper(name), "nodeClassName": "m4"},
			"status": status}
	}
	binding := func(uid string) map[string]any {
		return map[string]any{"binding": map[string]any{"leaseUID": uid, "leaseNamespace": "t", "leaseName": uid,
			"earliestReleaseAt": "2026-05-01T00:00:00Z"}}
	}
	classOf := func(disk string, vms int64) map[string]any {
		return map[string]any{"apiVersion": "fleet.macrack.io/v1alpha1", "kind": "MacNodeClass", "metadata": map[string]any{"name": "m4"},
			"spec": map[string]any{"chip": "M4", "memory": "16Gi", "disk": disk, "networkGbps": int64(10), "vmCapacity": vms}}
	}
	inst := func(disk string, finalizers ...any) map[string]any {
		meta := map[string]any{"name": "ci-1", "namespace": "t", "uid": "u-1"}
		if len(finalizers) > 0 {
			meta["finalizers"] = finalizers
		}
		return map[string]any{"apiVersion": "compute.macrack.io/v1alpha1", "kind": "MacOSInstance", "metadata": meta,
			"spec":   map[string]any{"leaseName": "build", "imageName": "sequoia", "cpu": int64(4), "memory": "8Gi", "disk": disk},
			"status": map[string]any{"nodeName": "c02a"}}
	}
	inLease := func(lease string) map[string]any {
		return map[string]any{"apiVersion": "compute.macrack.io/v1alpha1", "kind": "MacOSInstance",
			"metadata": map[string]any{"name": "ci-2", "namespace": "t"},
			"spec":     map[string]any{"leaseName": lease, "imageName": "sequoia", "cpu": int64(4), "memory": "8Gi", "disk": "200Gi"}}
	}
	reclassed := func(n map[string]any) map[string]any {
		n["spec"].(map[string]any)["nodeClassName"] = "m5"
		return n
	}
	agentA := "system:serviceaccount:macrack-agents:agent-c02a"
	reported := map[string]any{"reported": map[string]any{"chip": "M4"}}

	cases := []struct {
		rule            string
		denied, allowed admission.Request
		code            int32
		// legalize, if set, changes the cluster state between the two
		// requests: the positive control is then the same request.
		legalize func(t *testing.T)
	}{
		{"tenancy.serial",
			review(t, admissionv1.Update, macNode, "status", "operator", node("c02a", binding("b")), node("c02a", binding("a"))),
			review(t, admissionv1.Update, macNode, "status", "operator", node("c02a", nil), node("c02a", binding("a"))),
			http.StatusUnprocessableEntity, nil},
		{"node.commercial",
			review(t, admissionv1.Create, class, "", "admin", classOf("500G", 2), nil),
			review(t, admissionv1.Create, class, "", "admin", classOf("1T", 2), nil),
			http.StatusUnprocessableEntity, nil},
		{"quota.never-circumvent",
			review(t, admissionv1.Create, class, "", "admin", classOf("1T", 3), nil),
			review(t, admissionv1.Create, class, "", "admin", classOf("1T", 2), nil),
			http.StatusUnprocessableEntity, nil},
		{"instance.image",
			review(t, admissionv1.Create, instance, "", "alice", inst("100Gi"), nil),
			review(t, admissionv1.Create, instance, "", "alice", inst("200Gi"), nil),
			http.StatusUnprocessableEntity, nil},
		{"instance.wipe",
			review(t, admissionv1.Update, instance, "", "alice", inst("200Gi"), inst("200Gi", fleetv1alpha1.DiskWipeFinalizer)),
			review(t, admissionv1.Update, instance, "", "operator", inst("200Gi"), inst("200Gi", fleetv1alpha1.DiskWipeFinalizer)),
			http.StatusUnprocessableEntity, nil},
		{"agent.scope",
			review(t, admissionv1.Update, macNode, "status", agentA, node("c02b", reported), node("c02b", nil)),
			review(t, admissionv1.Update, macNode, "status", agentA, node("c02a", reported), node("c02a", nil)),
			http.StatusForbidden, nil},
		{"tenancy.class",
			review(t, admissionv1.Update, macNode, "", "admin", reclassed(node("c02a", binding("a"))), node("c02a", binding("a"))),
			review(t, admissionv1.Update, macNode, "", "admin", reclassed(node("c02a", nil)), node("c02a", nil)),
			http.StatusUnprocessableEntity, nil},
		{"audit.finalizer",
			review(t, admissionv1.Update, instance, "", "alice", inst("200Gi"), inst("200Gi", fleetv1alpha1.AuditFinalizer)),
			review(t, admissionv1.Update, instance, "", "operator", inst("200Gi"), inst("200Gi", fleetv1alpha1.AuditFinalizer)),
			http.StatusUnprocessableEntity, nil},
		// The exfiltration of issue 34: a runner pointing a Secret its
		// requester cannot read at the requester's own server.
		{"runner.secret",
			review(t, admissionv1.Create, runnerKind, "", "mallory", glRunner("https://127.0.0.1:8443", "runner-token", "PEM", 1), nil),
			review(t, admissionv1.Create, runnerKind, "", "owner", glRunner("https://127.0.0.1:8443", "runner-token", "PEM", 1), nil),
			http.StatusForbidden, nil},
		// The same instance, refused while its lease's chassis is
		// Quarantined and admitted once the chassis is healthy again.
		{"quarantine.fence",
			review(t, admissionv1.Create, instance, "", "alice", inLease("fenced"), nil),
			review(t, admissionv1.Create, instance, "", "alice", inLease("fenced"), nil),
			http.StatusUnprocessableEntity, func(t *testing.T) { recoverChassis(t, cluster, "c02q") }},
	}
	for _, c := range cases {
		t.Run(c.rule, func(t *testing.T) {
			resp := v.Handle(context.Background(), c.denied)
			if resp.Allowed || resp.Result.Code != c.code || !strings.Contains(resp.Result.Message, c.rule+": ") {
				t.Fatalf("the violation: allowed=%v %d %q, want %d naming %s", resp.Allowed, resp.Result.Code, resp.Result.Message, c.code, c.rule)
			}
			for _, other := range []string{policy.CodeError, policy.CodeDisagreement} {
				if strings.Contains(resp.Result.Message, other) {
					t.Fatalf("refused with %s, not the rule alone: %q", other, resp.Result.Message)
				}
			}
			if c.legalize != nil {
				c.legalize(t)
			}
			if resp := v.Handle(context.Background(), c.allowed); !resp.Allowed {
				t.Fatalf("positive control refused: %d %q", resp.Result.Code, resp.Result.Message)
			}
		})
	}
}

// TestADenialOnAStaleCacheIsDecidedAgainLive: the cache still shows the
// lease Pending while the API server has it Bound (the tenant saw it Bound
// and created an instance at once). The webhook decides again on live reads
// and admits; with both readers showing Pending, it denies.
func TestADenialOnAStaleCacheIsDecidedAgainLive(t *testing.T) {
	s := runtime.NewScheme()
	_ = fleetv1alpha1.AddToScheme(s)
	_ = leasingv1alpha1.AddToScheme(s)
	_ = computev1alpha1.AddToScheme(s)
	image := &fleetv1alpha1.MacOSImage{ObjectMeta: metav1.ObjectMeta{Name: "sequoia"},
		Status: fleetv1alpha1.MacOSImageStatus{Resolved: &fleetv1alpha1.ResolvedImage{MinimumDisk: resource.MustParse("120Gi")}}}
	class := &fleetv1alpha1.MacNodeClass{ObjectMeta: metav1.ObjectMeta{Name: "m4"}, Spec: fleetv1alpha1.MacNodeClassSpec{
		Chip: "M4", Memory: resource.MustParse("16Gi"), Disk: resource.MustParse("1T"), NetworkGbps: 10, VMCapacity: 2}}
	lease := func(phase leasingv1alpha1.MacNodeLeasePhase) *leasingv1alpha1.MacNodeLease {
		return &leasingv1alpha1.MacNodeLease{ObjectMeta: metav1.ObjectMeta{Name: "build", Namespace: "t"},
			Spec:   leasingv1alpha1.MacNodeLeaseSpec{NodeClassName: "m4", MinimumDuration: "24h"},
			Status: leasingv1alpha1.MacNodeLeaseStatus{Phase: phase}}
	}
	reader := func(phase leasingv1alpha1.MacNodeLeasePhase) client.Reader {
		b := fake.NewClientBuilder().WithScheme(s).WithObjects(image.DeepCopy(), class.DeepCopy(), lease(phase))
		for _, ix := range index.Definitions() {
			b = b.WithIndex(ix.Object, ix.Name, ix.Value)
		}
		return b.Build()
	}
	instance := metav1.GroupVersionKind{Group: "compute.macrack.io", Version: "v1alpha1", Kind: "MacOSInstance"}
	req := request(t, instance, "bob", map[string]any{"apiVersion": "compute.macrack.io/v1alpha1", "kind": "MacOSInstance",
		"metadata": map[string]any{"name": "ci-1", "namespace": "t"},
		"spec":     map[string]any{"leaseName": "build", "imageName": "sequoia", "cpu": int64(4), "memory": "8Gi", "disk": "200Gi"}})

	v := validator(t)
	v.Inventory = inventory.Builder{Reader: reader(leasingv1alpha1.LeasePending)}
	v.Live = reader(leasingv1alpha1.LeaseBound)
	if resp := v.Handle(context.Background(), req); !resp.Allowed {
		t.Fatalf("a lease Bound on the API server, Pending in the cache: denied with %q", resp.Result.Message)
	}
	v.Live = reader(leasingv1alpha1.LeasePending)
	resp := v.Handle(context.Background(), req)
	if resp.Allowed || !strings.Contains(resp.Result.Message, "instance.tenant: lease t/build is Pending, not Bound") {
		t.Fatalf("a lease Pending on both: got allowed=%v %v", resp.Allowed, resp.Result)
	}
}

// quarantinedChassis is a leased chassis of class m4 in phase, with an
// active quarantine.
func quarantinedChassis(name string, phase fleetv1alpha1.MacNodePhase) *fleetv1alpha1.MacNode {
	at := metav1.NewTime(time.Date(2026, 6, 1, 11, 50, 0, 0, time.UTC))
	return &fleetv1alpha1.MacNode{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: fleetv1alpha1.MacNodeSpec{Serial: strings.ToUpper(name), NodeClassName: "m4"},
		Status: fleetv1alpha1.MacNodeStatus{Phase: phase,
			Quarantine: &fleetv1alpha1.QuarantineStatus{BootID: "boot-1", Evidence: "VZErrorDomain code 6 with 1 VM running", QuarantinedAt: at}}}
}

// recoverChassis returns a quarantined chassis to its lease, as the
// quarantine loop does once the probe in the new boot passed.
func recoverChassis(t *testing.T, c client.Client, name string) {
	t.Helper()
	mn := &fleetv1alpha1.MacNode{}
	if err := c.Get(context.Background(), client.ObjectKey{Name: name}, mn); err != nil {
		t.Fatal(err)
	}
	recovered := metav1.NewTime(time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC))
	mn.Status.Phase = fleetv1alpha1.MacNodeLeased
	mn.Status.Quarantine.RecoveredAt = &recovered
	if err := c.Update(context.Background(), mn); err != nil {
		t.Fatal(err)
	}
}

// TestAFenceOnAStaleCacheIsDecidedAgainLive: the cache still shows the
// chassis Quarantined while the API server has it recovered. The webhook
// reads the lease's MacNode again live and admits; with both readers
// showing it Quarantined, it denies with quarantine.fence, naming the
// serial and the phase.
func TestAFenceOnAStaleCacheIsDecidedAgainLive(t *testing.T) {
	s := runtime.NewScheme()
	_ = fleetv1alpha1.AddToScheme(s)
	_ = leasingv1alpha1.AddToScheme(s)
	_ = computev1alpha1.AddToScheme(s)
	reader := func(chassis *fleetv1alpha1.MacNode) client.Client {
		b := fake.NewClientBuilder().WithScheme(s).WithObjects(
			&fleetv1alpha1.MacOSImage{ObjectMeta: metav1.ObjectMeta{Name: "sequoia"},
				Status: fleetv1alpha1.MacOSImageStatus{Resolved: &fleetv1alpha1.ResolvedImage{MinimumDisk: resource.MustParse("120Gi")}}},
			&fleetv1alpha1.MacNodeClass{ObjectMeta: metav1.ObjectMeta{Name: "m4"}, Spec: fleetv1alpha1.MacNodeClassSpec{
				Chip: "M4", Memory: resource.MustParse("16Gi"), Disk: resource.MustParse("1T"), NetworkGbps: 10, VMCapacity: 2}},
			&leasingv1alpha1.MacNodeLease{ObjectMeta: metav1.ObjectMeta{Name: "build", Namespace: "t"},
				Spec:   leasingv1alpha1.MacNodeLeaseSpec{NodeClassName: "m4", MinimumDuration: "24h"},
				Status: leasingv1alpha1.MacNodeLeaseStatus{Phase: leasingv1alpha1.LeaseBound, NodeName: chassis.Name, Serial: chassis.Spec.Serial}},
			chassis)
		for _, ix := range index.Definitions() {
			b = b.WithIndex(ix.Object, ix.Name, ix.Value)
		}
		return b.Build()
	}
	instance := metav1.GroupVersionKind{Group: "compute.macrack.io", Version: "v1alpha1", Kind: "MacOSInstance"}
	req := request(t, instance, "bob", map[string]any{"apiVersion": "compute.macrack.io/v1alpha1", "kind": "MacOSInstance",
		"metadata": map[string]any{"name": "ci-1", "namespace": "t"},
		"spec":     map[string]any{"leaseName": "build", "imageName": "sequoia", "cpu": int64(4), "memory": "8Gi", "disk": "200Gi"}})

	v := validator(t)
	v.Inventory = inventory.Builder{Reader: reader(quarantinedChassis("c02q", fleetv1alpha1.MacNodeQuarantined))}
	live := reader(quarantinedChassis("c02q", fleetv1alpha1.MacNodeQuarantined))
	recoverChassis(t, live, "c02q")
	v.Live = live
	if resp := v.Handle(context.Background(), req); !resp.Allowed {
		t.Fatalf("a chassis recovered on the API server, Quarantined in the cache: denied with %q", resp.Result.Message)
	}
	v.Live = reader(quarantinedChassis("c02q", fleetv1alpha1.MacNodeRebooting))
	resp := v.Handle(context.Background(), req)
	want := "quarantine.fence: chassis C02Q is Rebooting: its kernel VM quota stuck and MacRack is rebooting it; " +
		"new instances are refused until it recovers; the instances you have restart after the reboot"
	if resp.Allowed || resp.Result.Code != http.StatusUnprocessableEntity || resp.Result.Message != want {
		t.Fatalf("a chassis Rebooting on the API server: got allowed=%v %v, want %q", resp.Allowed, resp.Result, want)
	}
}
