package schema

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	computev1alpha1 "github.com/boualleiguie/macrack-operator/api/compute/v1alpha1"
	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
	leasingv1alpha1 "github.com/boualleiguie/macrack-operator/api/leasing/v1alpha1"
)

// table fetches path as the server-side Table that kubectl get prints, and
// returns its one row's cells by column name, with each column's priority
// (1: shown only with -o wide).
func table(path string) (cells map[string]any, priority map[string]int32) {
	GinkgoHelper()
	hc, err := rest.HTTPClientFor(env.Config)
	Expect(err).NotTo(HaveOccurred())
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(env.Config.Host, "/")+path, nil)
	Expect(err).NotTo(HaveOccurred())
	req.Header.Set("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io")
	resp, err := hc.Do(req)
	Expect(err).NotTo(HaveOccurred())
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	Expect(err).NotTo(HaveOccurred())
	Expect(resp.StatusCode).To(Equal(http.StatusOK), "%s%s: %s", env.Config.Host, path, body)
	t := &metav1.Table{}
	Expect(json.Unmarshal(body, t)).To(Succeed())
	Expect(t.Rows).To(HaveLen(1))
	cells, priority = map[string]any{}, map[string]int32{}
	for i, c := range t.ColumnDefinitions {
		cells[c.Name], priority[c.Name] = t.Rows[0].Cells[i], c.Priority
	}
	return cells, priority
}

func condition(t, status, reason string) metav1.Condition {
	return metav1.Condition{Type: t, Status: metav1.ConditionStatus(status), Reason: reason, Message: "m",
		LastTransitionTime: metav1.Now()}
}

// The columns kubectl get prints, as the API server renders them: a date
// column is the time since it, and a future one renders as <invalid>, so
// the commitment, in the future while it holds, is a string column.
var _ = Describe("The printer columns", func() {
	var ns string
	BeforeEach(func() { ns = newNamespace() })

	It("show a Pending lease's reason, and a bound one's commitment as a time, not <invalid>", func() {
		pending := &leasingv1alpha1.MacNodeLease{}
		pending.Namespace, pending.GenerateName = ns, "pending-"
		pending.Spec = leasingv1alpha1.MacNodeLeaseSpec{NodeClassName: "m4-16g-1t", MinimumDuration: "24h"}
		Expect(k8s.Create(ctx, pending)).To(Succeed())
		pending.Status = leasingv1alpha1.MacNodeLeaseStatus{Phase: leasingv1alpha1.LeasePending, Conditions: []metav1.Condition{
			condition(leasingv1alpha1.ConditionBound, "False", leasingv1alpha1.ReasonNoCapacity),
			condition(leasingv1alpha1.ConditionHeld, "False", leasingv1alpha1.ReasonNotDeleted),
		}}
		Expect(k8s.Status().Update(ctx, pending)).To(Succeed())
		cells, _ := table(fmt.Sprintf("/apis/leasing.macrack.io/v1alpha1/namespaces/%s/macnodeleases/%s", ns, pending.Name))
		Expect(cells).To(HaveKeyWithValue("Phase", "Pending"))
		Expect(cells).To(HaveKeyWithValue("Reason", leasingv1alpha1.ReasonNoCapacity), "the Bound condition's reason, not Held's")
		Expect(cells["Committed Until"]).To(BeNil(), "no commitment before a bind")

		bound := &leasingv1alpha1.MacNodeLease{}
		bound.Namespace, bound.GenerateName = ns, "bound-"
		bound.Spec = pending.Spec
		Expect(k8s.Create(ctx, bound)).To(Succeed())
		boundAt := metav1.NewTime(time.Now().Add(-5 * time.Hour).Truncate(time.Second))
		until := metav1.NewTime(boundAt.Add(24 * time.Hour))
		bound.Status = leasingv1alpha1.MacNodeLeaseStatus{Phase: leasingv1alpha1.LeaseBound, Serial: "C02XL0GHJGH5",
			BoundAt: &boundAt, EarliestReleaseAt: &until, Conditions: []metav1.Condition{
				condition(leasingv1alpha1.ConditionBound, "True", leasingv1alpha1.ReasonBound)}}
		Expect(k8s.Status().Update(ctx, bound)).To(Succeed())
		cells, _ = table(fmt.Sprintf("/apis/leasing.macrack.io/v1alpha1/namespaces/%s/macnodeleases/%s", ns, bound.Name))
		Expect(cells).To(HaveKeyWithValue("Reason", leasingv1alpha1.ReasonBound))
		Expect(cells).To(HaveKeyWithValue("Committed Until", until.UTC().Format(time.RFC3339)), "the future commitment, as a time")
		Expect(cells).To(HaveKeyWithValue("Bound At", MatchRegexp(`^5h`)), "a past time, as the time since it")
		Expect(cells).NotTo(ContainElement("<invalid>"))
	})

	It("show a chassis' silent agent, and its lease's release time on -o wide, not <invalid>", func() {
		mn := &fleetv1alpha1.MacNode{}
		mn.Name = "c02cols0001"
		mn.Spec = fleetv1alpha1.MacNodeSpec{Serial: "C02COLS0001", NodeClassName: "m4-16g-1t"}
		Expect(k8s.Create(ctx, mn)).To(Succeed())
		DeferCleanup(func() { Expect(k8s.Delete(ctx, mn)).To(Succeed()) })
		boundAt := metav1.NewTime(time.Now().Add(-time.Hour).Truncate(time.Second))
		until := metav1.NewTime(boundAt.Add(24 * time.Hour))
		mn.Status = fleetv1alpha1.MacNodeStatus{Phase: fleetv1alpha1.MacNodeLeased,
			Binding: &fleetv1alpha1.Binding{LeaseNamespace: ns, LeaseName: "l1", LeaseUID: "u1", BoundAt: boundAt, EarliestReleaseAt: until},
			Conditions: []metav1.Condition{
				condition(fleetv1alpha1.ConditionAgentReady, "False", fleetv1alpha1.ReasonHeartbeatMissed),
				condition(fleetv1alpha1.ConditionReady, "False", fleetv1alpha1.ReasonHeartbeatMissed),
			}}
		Expect(k8s.Status().Update(ctx, mn)).To(Succeed())
		cells, priority := table("/apis/fleet.macrack.io/v1alpha1/macnodes/" + mn.Name)
		Expect(cells).To(HaveKeyWithValue("Phase", "Leased"), "a silent agent takes no phase of its own")
		Expect(cells).To(HaveKeyWithValue("Agent", fleetv1alpha1.ReasonHeartbeatMissed))
		Expect(priority).To(HaveKeyWithValue("Agent", BeZero()), "shown without -o wide")
		Expect(cells).To(HaveKeyWithValue("Release After", until.UTC().Format(time.RFC3339)))
		Expect(cells).NotTo(ContainElement("<invalid>"))

		// The control: a heartbeating agent reads as such.
		mn.Status.Conditions[0] = condition(fleetv1alpha1.ConditionAgentReady, "True", fleetv1alpha1.ReasonHeartbeatCurrent)
		Expect(k8s.Status().Update(ctx, mn)).To(Succeed())
		cells, _ = table("/apis/fleet.macrack.io/v1alpha1/macnodes/" + mn.Name)
		Expect(cells).To(HaveKeyWithValue("Agent", fleetv1alpha1.ReasonHeartbeatCurrent))
	})

	It("show why an instance is not placed", func() {
		inst := &computev1alpha1.MacOSInstance{}
		inst.Namespace, inst.Name = ns, "waiting"
		inst.Spec = computev1alpha1.MacOSInstanceSpec{LeaseName: "l1", ImageName: "img", CPU: 4,
			Memory: resource.MustParse("8Gi"), Disk: resource.MustParse("200Gi")}
		Expect(k8s.Create(ctx, inst)).To(Succeed())
		inst.Status.Conditions = []metav1.Condition{condition(computev1alpha1.ConditionPlaced, "False", computev1alpha1.ReasonLeaseNotBound)}
		Expect(k8s.Status().Update(ctx, inst)).To(Succeed())
		cells, _ := table(fmt.Sprintf("/apis/compute.macrack.io/v1alpha1/namespaces/%s/macosinstances/%s", ns, inst.Name))
		Expect(cells).To(HaveKeyWithValue("Reason", computev1alpha1.ReasonLeaseNotBound))
		Expect(cells["Node"]).To(BeNil())
	})
})
