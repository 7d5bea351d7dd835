package agent

import (
	"context"
	"errors"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
	"github.com/boualleiguie/macrack-operator/internal/agent/host"
	"github.com/boualleiguie/macrack-operator/internal/agent/report"
	macrackscheme "github.com/boualleiguie/macrack-operator/internal/scheme"
)

const testNode = "c02test00001"

// reportFactsOnce publishes the facts into rep, after the instance loop's
// last quota report if there is one, and writes the report, as the agent's
// loops and its reporter do.
func (c Config) reportFactsOnce(ctx context.Context, rep *report.Reporter, last *fleetv1alpha1.QuotaReport) error {
	if last != nil {
		rep.Quota(last)
	}
	return errors.Join(c.publishFacts(ctx, rep), rep.Flush(ctx))
}

// The facts reporter sends the facts source's quota word (OK, in the sim)
// only until the instance loop has reported its own: a Stuck stands. The
// loop's side, that LastQuota is the Stuck it reported, is
// instances' TestLastQuotaIsTheQuotaTheLoopReported.
func TestTheFactsReporterDoesNotUndoAStuckQuota(t *testing.T) {
	scheme, err := macrackscheme.New()
	if err != nil {
		t.Fatal(err)
	}
	mn := &fleetv1alpha1.MacNode{ObjectMeta: metav1.ObjectMeta{Name: testNode},
		Spec: fleetv1alpha1.MacNodeSpec{Serial: "C02TEST00001", NodeClassName: "m4-test"}}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(mn).WithStatusSubresource(&fleetv1alpha1.MacNode{}).Build()
	quota := func() *fleetv1alpha1.QuotaReport {
		t.Helper()
		mn := &fleetv1alpha1.MacNode{}
		if err := c.Get(context.Background(), client.ObjectKey{Name: testNode}, mn); err != nil {
			t.Fatal(err)
		}
		if mn.Status.Reported == nil {
			return nil
		}
		return mn.Status.Reported.Quota
	}
	// What the instance loop last reported: nothing before any refusal.
	var last *fleetv1alpha1.QuotaReport
	rep := &report.Reporter{Client: c, NodeName: testNode}

	cfg := Config{NodeName: testNode, Facts: host.StaticFacts{Reported: &fleetv1alpha1.ReportedFacts{Chip: "M4",
		Quota: &fleetv1alpha1.QuotaReport{State: fleetv1alpha1.QuotaOK}}}}
	if err := cfg.reportFactsOnce(context.Background(), rep, last); err != nil {
		t.Fatal(err)
	}
	if q := quota(); q == nil || q.State != fleetv1alpha1.QuotaOK {
		t.Fatalf("positive control: quota %+v, want the facts' OK before any refusal", q)
	}
	// The loop saw the kernel refuse a start with code 6, one VM running.
	last = &fleetv1alpha1.QuotaReport{State: fleetv1alpha1.QuotaStuck, RunningVMs: 1, LastErrorCode: 6}
	if err := cfg.reportFactsOnce(context.Background(), rep, last); err != nil {
		t.Fatal(err)
	}
	if q := quota(); q == nil || q.State != fleetv1alpha1.QuotaStuck || q.RunningVMs != 1 || q.LastErrorCode != 6 {
		t.Errorf("quota %+v after the facts were reported again, want Stuck with 1 running and code 6", q)
	}
}

// staticBoot is a host whose boot id is fixed.
type staticBoot string

func (b staticBoot) BootID(context.Context) (string, error) { return string(b), nil }

// Every facts report carries the host's boot id, from which the operator
// reads a reboot, and the facts source's quota word is about that boot. A
// quota the loop reported replaces the one before whole: nothing of an
// earlier boot's report (its probe, its error) survives the merge.
func TestTheFactsReportCarriesTheBootIDAndAWholeQuota(t *testing.T) {
	scheme, err := macrackscheme.New()
	if err != nil {
		t.Fatal(err)
	}
	mn := &fleetv1alpha1.MacNode{ObjectMeta: metav1.ObjectMeta{Name: testNode},
		Spec: fleetv1alpha1.MacNodeSpec{Serial: "C02TEST00001", NodeClassName: "m4-test"}}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(mn).WithStatusSubresource(&fleetv1alpha1.MacNode{}).Build()
	reported := func() *fleetv1alpha1.ReportedFacts {
		t.Helper()
		mn := &fleetv1alpha1.MacNode{}
		if err := c.Get(context.Background(), client.ObjectKey{Name: testNode}, mn); err != nil {
			t.Fatal(err)
		}
		return mn.Status.Reported
	}
	cfg := Config{NodeName: testNode, BootID: staticBoot("boot-1"), Facts: host.StaticFacts{Reported: &fleetv1alpha1.ReportedFacts{Chip: "M4",
		Quota: &fleetv1alpha1.QuotaReport{State: fleetv1alpha1.QuotaOK}}}}
	at := metav1.Now()
	last := &fleetv1alpha1.QuotaReport{State: fleetv1alpha1.QuotaStuck, BootID: "boot-1", RunningVMs: 1, LastErrorCode: 6, LastErrorAt: &at,
		Probe: &fleetv1alpha1.QuotaProbe{BootID: "boot-0", Result: fleetv1alpha1.ProbeFailed, At: at}}
	if err := cfg.reportFactsOnce(context.Background(), &report.Reporter{Client: c, NodeName: testNode}, last); err != nil {
		t.Fatal(err)
	}
	if r := reported(); r.BootID != "boot-1" || r.Quota.State != fleetv1alpha1.QuotaStuck || r.Quota.Probe == nil {
		t.Fatalf("reported %+v, want boot-1 and the loop's Stuck", r)
	}

	// The host rebooted; the agent's new run has reported nothing in the
	// new boot.
	cfg.BootID = staticBoot("boot-2")
	if err := cfg.reportFactsOnce(context.Background(), &report.Reporter{Client: c, NodeName: testNode}, nil); err != nil {
		t.Fatal(err)
	}
	r := reported()
	if r.BootID != "boot-2" {
		t.Fatalf("boot id %q after the reboot, want boot-2", r.BootID)
	}
	if q := r.Quota; q.State != fleetv1alpha1.QuotaOK || q.BootID != "boot-2" || q.Probe != nil || q.LastErrorCode != 0 || q.LastErrorAt != nil || q.RunningVMs != 0 {
		t.Errorf("quota %+v, want the facts source's OK of boot-2 and nothing of the report before", q)
	}
}

// partialFacts is a facts source that could read only some facts.
type partialFacts struct{}

func (partialFacts) Facts(context.Context) (*fleetv1alpha1.ReportedFacts, error) {
	return &fleetv1alpha1.ReportedFacts{Chip: "M4"}, errors.New("sipEnabled unknown: csrutil timed out")
}

// A fact that turns unknown is cleared, not left at its last value: a SIP
// read that fails must not leave an old sipEnabled=true, nor a boot-arg
// read that finds none an old quota boot-arg. The facts read are reported
// all the same, and the other writers' fields stay. The control: a facts
// source that reads SIP on keeps it on.
func TestAFactThatTurnsUnknownIsClearedAndTheRestReported(t *testing.T) {
	scheme, err := macrackscheme.New()
	if err != nil {
		t.Fatal(err)
	}
	inv := &fleetv1alpha1.HostInventory{ObservedAt: metav1.Now()}
	mn := &fleetv1alpha1.MacNode{ObjectMeta: metav1.ObjectMeta{Name: testNode},
		Spec: fleetv1alpha1.MacNodeSpec{Serial: "C02TEST00001", NodeClassName: "m4-test"},
		Status: fleetv1alpha1.MacNodeStatus{Reported: &fleetv1alpha1.ReportedFacts{SIPEnabled: ptr.To(true),
			BootArgs: "hv_apple_isa_vm_quota" + "=4", Chip: "M2", Inventory: inv}}}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(mn).WithStatusSubresource(&fleetv1alpha1.MacNode{}).Build()
	reported := func() *fleetv1alpha1.ReportedFacts {
		t.Helper()
		got := &fleetv1alpha1.MacNode{}
		if err := c.Get(context.Background(), client.ObjectKey{Name: testNode}, got); err != nil {
			t.Fatal(err)
		}
		return got.Status.Reported
	}

	control := Config{NodeName: testNode, Facts: host.StaticFacts{Reported: &fleetv1alpha1.ReportedFacts{SIPEnabled: ptr.To(true), Chip: "M4"}}}
	if err := control.reportFactsOnce(context.Background(), &report.Reporter{Client: c, NodeName: testNode}, nil); err != nil {
		t.Fatal(err)
	}
	if r := reported(); r.SIPEnabled == nil || !*r.SIPEnabled || r.BootArgs != "" || r.Inventory == nil {
		t.Fatalf("control: sipEnabled %v bootArgs %q inventory %v, want SIP on, no boot-args and the reaper's inventory", r.SIPEnabled, r.BootArgs, r.Inventory)
	}

	cfg := Config{NodeName: testNode, Facts: partialFacts{}}
	err = cfg.reportFactsOnce(context.Background(), &report.Reporter{Client: c, NodeName: testNode}, nil)
	if err == nil || !strings.Contains(err.Error(), "sipEnabled unknown") {
		t.Fatalf("want the unknown facts' error back, got %v", err)
	}
	r := reported()
	if r.SIPEnabled != nil || r.Chip != "M4" || r.Inventory == nil {
		t.Fatalf("after a failed SIP read: sipEnabled %v chip %q inventory %v, want SIP cleared, the chip read, the inventory kept", r.SIPEnabled, r.Chip, r.Inventory)
	}
	if r.Quota == nil || r.Quota.State != fleetv1alpha1.QuotaOK {
		t.Fatalf("quota %+v, want OK: no refusal seen in this boot", r.Quota)
	}
}
