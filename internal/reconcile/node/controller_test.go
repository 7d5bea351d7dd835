package node

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	computev1alpha1 "github.com/boualleiguie/macrack-operator/api/compute/v1alpha1"
	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
	leasingv1alpha1 "github.com/boualleiguie/macrack-operator/api/leasing/v1alpha1"
	"github.com/boualleiguie/macrack-operator/internal/audit/denial"
	"github.com/boualleiguie/macrack-operator/internal/index"
	"github.com/boualleiguie/macrack-operator/internal/policy"
	"github.com/boualleiguie/macrack-operator/internal/reconcile/intent"
	"github.com/boualleiguie/macrack-operator/internal/taints"
	"github.com/boualleiguie/macrack-operator/policies"
)

func reconciler(t *testing.T, objs ...client.Object) (*Reconciler, client.Client) {
	t.Helper()
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, fleetv1alpha1.AddToScheme, leasingv1alpha1.AddToScheme, computev1alpha1.AddToScheme} {
		if err := add(s); err != nil {
			t.Fatal(err)
		}
	}
	engine, err := policy.Load(context.Background(), policies.FS, policy.WithTimeout(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	b := fake.NewClientBuilder().WithScheme(s).WithObjects(objs...).WithStatusSubresource(&fleetv1alpha1.MacNode{})
	for _, ix := range index.Definitions() {
		b = b.WithIndex(ix.Object, ix.Name, ix.Value)
	}
	c := b.Build()
	return &Reconciler{Checker: intent.Checker{Client: c, Engine: engine, Clock: clocktesting.NewFakeClock(time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)),
		Params: policy.Params{AgentsNamespace: "macrack-agents"}, Identity: "operator"}, Recorder: events.NewFakeRecorder(100)}, c
}

func class() *fleetv1alpha1.MacNodeClass {
	return &fleetv1alpha1.MacNodeClass{ObjectMeta: metav1.ObjectMeta{Name: "m4"},
		Spec: fleetv1alpha1.MacNodeClassSpec{Chip: "M4", Memory: resource.MustParse("16Gi"), Disk: resource.MustParse("1T"), NetworkGbps: 10, VMCapacity: 2}}
}

func good() *fleetv1alpha1.ReportedFacts {
	return &fleetv1alpha1.ReportedFacts{Disk: ptr.To(resource.MustParse("1T")), NetworkGbps: ptr.To(int32(10)),
		SIPEnabled: ptr.To(true), VirtualizationEntitlement: ptr.To(true)}
}

func macNode(facts *fleetv1alpha1.ReportedFacts) *fleetv1alpha1.MacNode {
	return &fleetv1alpha1.MacNode{ObjectMeta: metav1.ObjectMeta{Name: "c02a"},
		Spec: fleetv1alpha1.MacNodeSpec{Serial: "C02A", NodeClassName: "m4"}, Status: fleetv1alpha1.MacNodeStatus{Reported: facts}}
}

func run(t *testing.T, r *Reconciler, c client.Client) *fleetv1alpha1.MacNode {
	t.Helper()
	if _, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKey{Name: "c02a"}}); err != nil {
		t.Fatal(err)
	}
	mn := &fleetv1alpha1.MacNode{}
	if err := c.Get(context.Background(), client.ObjectKey{Name: "c02a"}, mn); err != nil {
		t.Fatal(err)
	}
	return mn
}

// TestPhases: the node controller alone, with no admission, moves a chassis
// to Ready only when its facts pass the policies.
// Proves: node.commercial, quota.never-circumvent
func TestPhases(t *testing.T) {
	slow := good()
	slow.NetworkGbps = ptr.To(int32(1))
	sipOff := good()
	sipOff.SIPEnabled = ptr.To(false)
	cacheOnly := &fleetv1alpha1.ReportedFacts{Quota: &fleetv1alpha1.QuotaReport{State: fleetv1alpha1.QuotaOK},
		ImageCache: &fleetv1alpha1.ImageCacheReport{Used: resource.MustParse("0"), Budget: resource.MustParse("200Gi")}}
	noNIC := good()
	noNIC.NetworkGbps = nil
	cases := []struct {
		name      string
		facts     *fleetv1alpha1.ReportedFacts
		withClass bool
		want      fleetv1alpha1.MacNodePhase
		problem   string
	}{
		{"a chassis whose agent has not reported is Pending", nil, true, fleetv1alpha1.MacNodePending, ""},
		{"a chassis whose agent reported its golden cache and quota, not its facts, is Pending", cacheOnly, true, fleetv1alpha1.MacNodePending, ""},
		{"a chassis whose facts name no NIC speed is Pending", noNIC, true, fleetv1alpha1.MacNodePending, ""},
		{"a compliant chassis becomes Ready", good(), true, fleetv1alpha1.MacNodeReady, ""},
		{"a chassis with a 1 Gb NIC stays Enrolled and says node.commercial", slow, true, fleetv1alpha1.MacNodeEnrolled, "node.commercial:"},
		{"a chassis with SIP off stays Enrolled and says quota.never-circumvent", sipOff, true, fleetv1alpha1.MacNodeEnrolled, "quota.never-circumvent:"},
		{"a chassis of an unknown class stays Enrolled", good(), false, fleetv1alpha1.MacNodeEnrolled, "does not exist"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			objs := []client.Object{macNode(c.facts)}
			if c.withClass {
				objs = append(objs, class())
			}
			r, cl := reconciler(t, objs...)
			mn := run(t, r, cl)
			if mn.Status.Phase != c.want {
				t.Fatalf("phase %s, want %s", mn.Status.Phase, c.want)
			}
			var hc *metav1.Condition
			for i := range mn.Status.Conditions {
				if mn.Status.Conditions[i].Type == fleetv1alpha1.ConditionHardwareCompliant {
					hc = &mn.Status.Conditions[i]
				}
			}
			if hc == nil {
				t.Fatal("no HardwareCompliant condition")
			}
			if c.problem != "" && (hc.Status != metav1.ConditionFalse || !strings.Contains(hc.Message, c.problem)) {
				t.Fatalf("want HardwareCompliant=False saying %q, got %+v", c.problem, hc)
			}
		})
	}
}

func TestTheNodesTaintsFollowTheBindingAndForeignTaintsStay(t *testing.T) {
	mn := macNode(good())
	mn.Status.Binding = &fleetv1alpha1.Binding{LeaseNamespace: "tenant-a", LeaseName: "l", LeaseUID: "u",
		BoundAt: metav1.NewTime(time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)), EarliestReleaseAt: metav1.NewTime(time.Date(2026, 6, 2, 12, 0, 0, 0, time.UTC))}
	lease := &leasingv1alpha1.MacNodeLease{ObjectMeta: metav1.ObjectMeta{Name: "l", Namespace: "tenant-a", UID: "u"}}
	notReady := corev1.Taint{Key: "node.kubernetes.io/not-ready", Effect: corev1.TaintEffectNoSchedule}
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "c02a"}, Spec: corev1.NodeSpec{Taints: []corev1.Taint{notReady, taints.Desired("")[0]}}}
	r, c := reconciler(t, class(), mn, lease, n)
	got := run(t, r, c)
	if got.Status.Phase != fleetv1alpha1.MacNodeLeased {
		t.Fatalf("a bound chassis is Leased, got %s", got.Status.Phase)
	}
	node := &corev1.Node{}
	if err := c.Get(context.Background(), client.ObjectKey{Name: "c02a"}, node); err != nil {
		t.Fatal(err)
	}
	want := []corev1.Taint{notReady, taints.Desired("tenant-a")[0]}
	if len(node.Spec.Taints) != 2 || node.Spec.Taints[0] != want[0] || node.Spec.Taints[1] != want[1] || node.Labels[taints.TenantLabel] != "tenant-a" {
		t.Fatalf("taints %v labels %v, want %v and the tenant label", node.Spec.Taints, node.Labels, want)
	}
}

// TestAChassisIsJudgedOnlyOnceItsFactsAreIn: before its agent reports the
// facts the policies judge, a chassis records no denial, is not Ready and
// says it waits for facts; once a compliant report is in, it is Ready; a
// non-compliant one, the positive control, records the denial naming the
// rule.
func TestAChassisIsJudgedOnlyOnceItsFactsAreIn(t *testing.T) {
	slow := good()
	slow.NetworkGbps = ptr.To(int32(1))
	sipOff := good()
	sipOff.SIPEnabled = ptr.To(false)
	early := &fleetv1alpha1.ReportedFacts{Quota: &fleetv1alpha1.QuotaReport{State: fleetv1alpha1.QuotaOK}}
	for _, tc := range []struct {
		name    string
		facts   *fleetv1alpha1.ReportedFacts
		phase   fleetv1alpha1.MacNodePhase
		ready   string // Ready's reason
		denials []string
	}{
		{"before its facts: no denial, waits for facts", early, fleetv1alpha1.MacNodePending, fleetv1alpha1.ReasonAwaitingFacts, nil},
		{"compliant facts: Ready", good(), fleetv1alpha1.MacNodeReady, string(fleetv1alpha1.MacNodeReady), nil},
		{"a 1 Gb NIC: denied by node.commercial", slow, fleetv1alpha1.MacNodeEnrolled, fleetv1alpha1.ReasonAwaitingCompliance, []string{"node.commercial"}},
		{"SIP off: denied by quota.never-circumvent", sipOff, fleetv1alpha1.MacNodeEnrolled, fleetv1alpha1.ReasonAwaitingCompliance, []string{"quota.never-circumvent"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, c := reconciler(t, macNode(tc.facts), class())
			r.Denials = denial.NewBuffer(16, nil)
			mn := run(t, r, c)
			ready := meta.FindStatusCondition(mn.Status.Conditions, fleetv1alpha1.ConditionReady)
			if mn.Status.Phase != tc.phase || ready == nil || ready.Reason != tc.ready {
				t.Fatalf("phase %s, Ready %+v; want %s, reason %s", mn.Status.Phase, ready, tc.phase, tc.ready)
			}
			var rules []string
			for r.Denials.Len() > 0 {
				d, _ := r.Denials.Next(context.Background())
				rules = append(rules, d.Rule)
			}
			slices.Sort(rules)
			if rules = slices.Compact(rules); !slices.Equal(rules, tc.denials) {
				t.Fatalf("denials %v, want %v", rules, tc.denials)
			}
		})
	}
}

// TestACompliantChassisIsJudgedAgainOnlyWhenItsFactsOrClassChange: a pass
// whose chassis changed elsewhere reuses the clean verdict its facts and
// class had, and asks the policies nothing; new facts, or a changed class,
// are judged again, and refused when they fail.
func TestACompliantChassisIsJudgedAgainOnlyWhenItsFactsOrClassChange(t *testing.T) {
	ctx := context.Background()
	r, c := reconciler(t, macNode(good()), class())
	r.Denials = denial.NewBuffer(16, nil)
	judged := func() float64 {
		decisions := r.Engine.Collectors()[0].(*prometheus.CounterVec)
		return testutil.ToFloat64(decisions.WithLabelValues("node.commercial", "allow")) +
			testutil.ToFloat64(decisions.WithLabelValues("node.commercial", "deny"))
	}
	phase := func(want fleetv1alpha1.MacNodePhase) {
		t.Helper()
		if mn := run(t, r, c); mn.Status.Phase != want {
			t.Fatalf("phase %s, want %s", mn.Status.Phase, want)
		}
	}
	setFacts := func(f *fleetv1alpha1.ReportedFacts) {
		t.Helper()
		mn := &fleetv1alpha1.MacNode{}
		if err := c.Get(ctx, client.ObjectKey{Name: "c02a"}, mn); err != nil {
			t.Fatal(err)
		}
		mn.Status.Reported = f
		if err := c.Status().Update(ctx, mn); err != nil {
			t.Fatal(err)
		}
	}

	phase(fleetv1alpha1.MacNodeReady)
	first := judged()
	if first == 0 {
		t.Fatal("the first pass asked node.commercial nothing")
	}
	// Another pass, and one after a write elsewhere in the status (a
	// condition): the same facts and class, not judged again.
	phase(fleetv1alpha1.MacNodeReady)
	mn := &fleetv1alpha1.MacNode{}
	if err := c.Get(ctx, client.ObjectKey{Name: "c02a"}, mn); err != nil {
		t.Fatal(err)
	}
	meta.SetStatusCondition(&mn.Status.Conditions, metav1.Condition{Type: "Elsewhere", Status: metav1.ConditionTrue, Reason: "Test"})
	if err := c.Status().Update(ctx, mn); err != nil {
		t.Fatal(err)
	}
	phase(fleetv1alpha1.MacNodeReady)
	if n := judged(); n != first {
		t.Fatalf("node.commercial judged %v times after passes with the same facts and class, want %v", n, first)
	}

	// New facts: judged again, and a 1 Gb NIC refused.
	slow := good()
	slow.NetworkGbps = ptr.To(int32(1))
	setFacts(slow)
	phase(fleetv1alpha1.MacNodeEnrolled)
	if n := judged(); n <= first {
		t.Fatal("new facts were not judged again")
	}
	// A refusal is asked again on every pass, and recorded each time.
	refused := judged()
	phase(fleetv1alpha1.MacNodeEnrolled)
	if n := judged(); n <= refused {
		t.Fatal("a refused chassis was not judged again on its next pass")
	}
	if r.Denials.Len() == 0 {
		t.Fatal("no denial recorded for the 1 Gb NIC")
	}

	// Good facts again, then a class that asks more than they give: the
	// class' change is judged again, and refused.
	setFacts(good())
	phase(fleetv1alpha1.MacNodeReady)
	cl := &fleetv1alpha1.MacNodeClass{}
	if err := c.Get(ctx, client.ObjectKey{Name: "m4"}, cl); err != nil {
		t.Fatal(err)
	}
	cl.Spec.Disk = resource.MustParse("2T")
	if err := c.Update(ctx, cl); err != nil {
		t.Fatal(err)
	}
	phase(fleetv1alpha1.MacNodeEnrolled)
}
