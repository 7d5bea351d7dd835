package billing

import (
	"math"
	"strings"
	"testing"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2/event"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8stypes "k8s.io/apimachinery/pkg/types"

	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
	leasingv1alpha1 "github.com/boualleiguie/macrack-operator/api/leasing/v1alpha1"
	"github.com/boualleiguie/macrack-operator/internal/audit/event"
	"github.com/boualleiguie/macrack-operator/internal/audit/journal"
)

// The billing window of these tests: June 1st, 2026, UTC.
var (
	day0 = time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC)
	day1 = day0.Add(24 * time.Hour)
)

func h(hours float64) time.Time { return day0.Add(time.Duration(hours * float64(time.Hour))) }

func metaT(t time.Time) *metav1.Time {
	m := metav1.NewTime(t)
	return &m
}

var origin = event.Origin{Cluster: "eu-1"}

// events makes a journal's records CloudEvents, as the exporter does.
func events(t *testing.T, kind, controller string, obj metav1.Object, j *fleetv1alpha1.AuditJournal) []cloudevents.Event {
	t.Helper()
	var out []cloudevents.Event
	for _, r := range j.Records {
		ev, err := origin.Event(kind, controller, obj, r)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, ev)
	}
	return out
}

// leaseLife journals a lease through the lease controller's writes: created
// and pending, bound at bound, and released at released unless it is zero.
func leaseLife(t *testing.T, tenant, name string, bound, released time.Time) []cloudevents.Event {
	t.Helper()
	l := &leasingv1alpha1.MacNodeLease{}
	l.Namespace, l.Name, l.UID = tenant, name, k8stypes.UID(tenant+"-"+name)
	l.CreationTimestamp = metav1.NewTime(bound.Add(-time.Minute))
	write := func(now time.Time, change func(*leasingv1alpha1.MacNodeLeaseStatus)) {
		before := l.Status.DeepCopy()
		change(&l.Status)
		journal.Lease(before, l, now)
	}
	write(bound.Add(-time.Minute), func(s *leasingv1alpha1.MacNodeLeaseStatus) { s.Phase = leasingv1alpha1.LeasePending })
	// The write lands a few seconds after the claim it records: the bill
	// follows boundAt, not the write.
	write(bound.Add(3*time.Second), func(s *leasingv1alpha1.MacNodeLeaseStatus) {
		s.Phase, s.BoundAt, s.Serial = leasingv1alpha1.LeaseBound, metaT(bound), "SERIAL-"+name
	})
	if !released.IsZero() {
		write(released.Add(3*time.Second), func(s *leasingv1alpha1.MacNodeLeaseStatus) {
			s.Phase, s.ReleasedAt = leasingv1alpha1.LeaseReleased, metaT(released)
		})
	}
	return events(t, "lease", "macrack-lease", l, l.Status.Audit)
}

// chassisStep is one write of a chassis' status.
type chassisStep struct {
	at     time.Time
	change func(*fleetv1alpha1.MacNodeStatus)
}

func chassisLife(t *testing.T, serial string, steps ...chassisStep) []cloudevents.Event {
	t.Helper()
	mn := &fleetv1alpha1.MacNode{}
	mn.Name, mn.UID, mn.Spec.Serial = "mac-"+strings.ToLower(serial), k8stypes.UID("chassis-"+serial), serial
	mn.CreationTimestamp = metav1.NewTime(day0.Add(-30 * 24 * time.Hour))
	for _, s := range steps {
		before := mn.Status.DeepCopy()
		s.change(&mn.Status)
		journal.Chassis(before, mn, s.at)
	}
	return events(t, "chassis", "macrack-node", mn, mn.Status.Audit)
}

func bindTo(tenant, lease string, bound time.Time) chassisStep {
	return chassisStep{bound, func(s *fleetv1alpha1.MacNodeStatus) {
		s.Phase = fleetv1alpha1.MacNodeLeased
		s.Binding = &fleetv1alpha1.Binding{LeaseNamespace: tenant, LeaseName: lease, LeaseUID: k8stypes.UID(tenant + "-" + lease),
			BoundAt: metav1.NewTime(bound), EarliestReleaseAt: metav1.NewTime(bound.Add(24 * time.Hour))}
	}}
}

func quarantine(start time.Time, needsAttention bool) chassisStep {
	return chassisStep{start, func(s *fleetv1alpha1.MacNodeStatus) {
		s.Phase = fleetv1alpha1.MacNodeQuarantined
		s.Quarantine = &fleetv1alpha1.QuarantineStatus{BootID: "boot", Evidence: "VZErrorDomain code 6", QuarantinedAt: metav1.NewTime(start), NeedsAttention: needsAttention}
	}}
}

func recovered(end time.Time) chassisStep {
	return chassisStep{end, func(s *fleetv1alpha1.MacNodeStatus) {
		s.Quarantine.RebootRequestedAt, s.Quarantine.RebootedAt, s.Quarantine.RecoveredAt = metaT(end.Add(-2*time.Minute)), metaT(end.Add(-time.Minute)), metaT(end)
		s.Phase = fleetv1alpha1.MacNodeReady
		if s.Binding != nil {
			s.Phase = fleetv1alpha1.MacNodeLeased
		}
	}}
}

func unbind(when time.Time) chassisStep {
	return chassisStep{when, func(s *fleetv1alpha1.MacNodeStatus) { s.Binding = nil }}
}

// shuffled is every record twice, in an order that is not the stream's:
// the second half reversed, then the first, then all of it again, reversed.
func shuffled(evs []cloudevents.Event) []cloudevents.Event {
	var out []cloudevents.Event
	half := len(evs) / 2
	for i := len(evs) - 1; i >= half; i-- {
		out = append(out, evs[i])
	}
	out = append(out, evs[:half]...)
	for i := len(evs) - 1; i >= 0; i-- {
		out = append(out, evs[i].Clone())
	}
	return out
}

func usageOf(t *testing.T, us []Usage) map[string]Usage {
	t.Helper()
	m := map[string]Usage{}
	for i, u := range us {
		if i > 0 && us[i-1].Tenant >= u.Tenant {
			t.Errorf("usage not sorted by tenant: %v", us)
		}
		m[u.Tenant] = u
	}
	return m
}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

func expect(t *testing.T, got map[string]Usage, want map[string]Usage) {
	t.Helper()
	for tenant, w := range want {
		g, ok := got[tenant]
		if !ok {
			t.Errorf("no usage for %s", tenant)
			continue
		}
		if g.Leases != w.Leases || !near(g.ChassisHours, w.ChassisHours) || !near(g.OutageHours, w.OutageHours) {
			t.Errorf("%s: %d leases, %.4f chassis-hours, %.4f outage-hours; want %d, %.4f, %.4f",
				tenant, g.Leases, g.ChassisHours, g.OutageHours, w.Leases, w.ChassisHours, w.OutageHours)
		}
	}
	for tenant, g := range got {
		if _, ok := want[tenant]; !ok {
			t.Errorf("usage for %s, which should bill nothing: %+v", tenant, g)
		}
	}
}

// fleet is a day's stream. Hand-computed, for [day0, day1):
//
//	tenant-a  a1 02:00-08:30             6.5 h
//	          a2 May 31 20:00-04:00      4   h (clipped at the start)
//	tenant-b  b1 22:00-(never released)  2   h (runs to the window's end)
//	          b2 10:00-June 2 03:00     14   h (clipped at the end);
//	          its chassis quarantined 12:00-13:15: 1.25 h of outage
//	tenant-c  c1 released at 05:00, bound before the stream began: nothing
//	          c2 May 30 01:00-May 31 01:00: nothing in the window
//	tenant-d  d1 June 2 01:00-02:00: after the window, nothing
func fleet(t *testing.T) []cloudevents.Event {
	var evs []cloudevents.Event
	evs = append(evs, leaseLife(t, "tenant-a", "a1", h(2), h(8.5))...)
	evs = append(evs, leaseLife(t, "tenant-a", "a2", h(-4), h(4))...)
	evs = append(evs, leaseLife(t, "tenant-b", "b1", h(22), time.Time{})...)
	evs = append(evs, leaseLife(t, "tenant-b", "b2", h(10), h(27))...)
	evs = append(evs, chassisLife(t, "B2", bindTo("tenant-b", "b2", h(10)), quarantine(h(12), false), recovered(h(13.25)))...)
	for _, ev := range leaseLife(t, "tenant-c", "c1", h(-100), h(5)) {
		if ev.Type() != event.Type("lease", "bound") {
			evs = append(evs, ev) // its bound record is outside the stream
		}
	}
	evs = append(evs, leaseLife(t, "tenant-c", "c2", h(-47), h(-23))...)
	evs = append(evs, leaseLife(t, "tenant-d", "d1", h(25), h(26))...)
	return evs
}

func TestBillingOverAStreamWithDuplicatesOutOfOrder(t *testing.T) {
	evs := fleet(t)
	want := map[string]Usage{
		"tenant-a": {Leases: 2, ChassisHours: 10.5},
		"tenant-b": {Leases: 2, ChassisHours: 16, OutageHours: 1.25},
	}
	// Positive control: the stream in order, each record once.
	got, err := Report(evs, day0, day1)
	if err != nil {
		t.Fatal(err)
	}
	expect(t, usageOf(t, got), want)

	all := shuffled(evs)
	if len(all) != 2*len(evs) {
		t.Fatalf("%d records, want every one of %d twice", len(all), len(evs))
	}
	got, err = Report(all, day0, day1)
	if err != nil {
		t.Fatal(err)
	}
	expect(t, usageOf(t, got), want)
}

func TestBillingClipsToTheWindow(t *testing.T) {
	evs := fleet(t)
	// 09:00-12:30: a1 is over; b2 from 10:00, its outage from 12:00.
	got, err := Report(shuffled(evs), h(9), h(12.5))
	if err != nil {
		t.Fatal(err)
	}
	expect(t, usageOf(t, got), map[string]Usage{"tenant-b": {Leases: 1, ChassisHours: 2.5, OutageHours: 0.5}})

	// 03:00-03:30: a2 (still bound) and a1 (since 02:00).
	got, err = Report(evs, h(3), h(3.5))
	if err != nil {
		t.Fatal(err)
	}
	expect(t, usageOf(t, got), map[string]Usage{"tenant-a": {Leases: 2, ChassisHours: 1}})

	// A window that ends exactly when a1 is bound bills it nothing: [from, to).
	got, err = Report(evs, h(-1), h(2))
	if err != nil {
		t.Fatal(err)
	}
	expect(t, usageOf(t, got), map[string]Usage{"tenant-a": {Leases: 1, ChassisHours: 3}})
}

func TestBillingRunsAnUnreleasedLeaseToTheWindowsEnd(t *testing.T) {
	evs := leaseLife(t, "tenant-b", "b1", h(22), time.Time{})
	for _, to := range []time.Time{h(23), day1, h(24 * 31)} {
		got, err := Report(evs, day0, to)
		if err != nil {
			t.Fatal(err)
		}
		expect(t, usageOf(t, got), map[string]Usage{"tenant-b": {Leases: 1, ChassisHours: to.Sub(h(22)).Hours()}})
	}
	// Positive control: released, it stops at its release.
	got, err := Report(leaseLife(t, "tenant-b", "b1", h(22), h(23.5)), day0, h(24*31))
	if err != nil {
		t.Fatal(err)
	}
	expect(t, usageOf(t, got), map[string]Usage{"tenant-b": {Leases: 1, ChassisHours: 1.5}})
}

func TestBillingReportsAQuarantineApart(t *testing.T) {
	evs := append(leaseLife(t, "tenant-b", "b2", h(10), h(20)),
		chassisLife(t, "B2", bindTo("tenant-b", "b2", h(10)), quarantine(h(12), false), recovered(h(13.25)),
			// A second quarantine of the same chassis, known by its own
			// quarantinedAt.
			quarantine(h(15), false), recovered(h(15.5)))...)
	got, err := Report(shuffled(evs), day0, day1)
	if err != nil {
		t.Fatal(err)
	}
	// The outage is part of the chassis-hours, not taken off them.
	expect(t, usageOf(t, got), map[string]Usage{"tenant-b": {Leases: 1, ChassisHours: 10, OutageHours: 1.75}})

	// An unleased chassis' quarantine is no tenant's.
	got, err = Report(chassisLife(t, "FREE", quarantine(h(1), false), recovered(h(2))), day0, day1)
	if err != nil {
		t.Fatal(err)
	}
	expect(t, usageOf(t, got), nil)
}

// A lease let go while its chassis is quarantined (the quarantine needs a
// person, or the chassis is retired): the chassis' quarantine.ended comes
// after the binding went, and names no tenant. The outage is the tenant's
// only while the lease held the chassis.
func TestBillingEndsAnOutageWithItsLease(t *testing.T) {
	evs := append(leaseLife(t, "tenant-e", "e1", h(1), h(7)),
		chassisLife(t, "E1", bindTo("tenant-e", "e1", h(1)), quarantine(h(5), true), unbind(h(7)), recovered(h(20)))...)
	got, err := Report(shuffled(evs), day0, day1)
	if err != nil {
		t.Fatal(err)
	}
	expect(t, usageOf(t, got), map[string]Usage{"tenant-e": {Leases: 1, ChassisHours: 6, OutageHours: 2}})

	// A retired chassis never recovers: the next day bills its former
	// tenant nothing, outage included.
	retired := append(leaseLife(t, "tenant-e", "e1", h(1), h(7)),
		chassisLife(t, "E1", bindTo("tenant-e", "e1", h(1)), quarantine(h(5), true), unbind(h(7)))...)
	got, err = Report(retired, day1, day1.Add(24*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	expect(t, usageOf(t, got), nil)
	// Positive control: that day, the outage of a lease still bound counts
	// in full.
	held := append(leaseLife(t, "tenant-e", "e1", h(1), time.Time{}),
		chassisLife(t, "E1", bindTo("tenant-e", "e1", h(1)), quarantine(h(5), true))...)
	got, err = Report(held, day1, day1.Add(24*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	expect(t, usageOf(t, got), map[string]Usage{"tenant-e": {Leases: 1, ChassisHours: 24, OutageHours: 24}})
}

func TestBillingCountsNothingForALeaseWhoseBoundRecordIsMissing(t *testing.T) {
	var evs []cloudevents.Event
	for _, ev := range leaseLife(t, "tenant-c", "c1", h(-100), h(5)) {
		if ev.Type() != event.Type("lease", "bound") {
			evs = append(evs, ev)
		}
	}
	got, err := Report(shuffled(evs), day0, day1)
	if err != nil {
		t.Fatal(err)
	}
	expect(t, usageOf(t, got), nil)
	// Positive control: with its bound record, it bills to its release.
	got, err = Report(leaseLife(t, "tenant-c", "c1", h(-100), h(5)), day0, day1)
	if err != nil {
		t.Fatal(err)
	}
	expect(t, usageOf(t, got), map[string]Usage{"tenant-c": {Leases: 1, ChassisHours: 5}})
}

func TestBillingRefusesAnEmptyWindowAndForeignData(t *testing.T) {
	evs := fleet(t)
	for _, w := range [][2]time.Time{{day1, day0}, {day0, day0}} {
		if _, err := Report(evs, w[0], w[1]); err == nil || !strings.Contains(err.Error(), "is not after its start") {
			t.Errorf("window %s..%s: %v", w[0], w[1], err)
		}
	}
	foreign := cloudevents.New()
	foreign.SetID("x/1")
	foreign.SetType(event.Type("lease", "bound"))
	foreign.SetSource("example")
	if err := foreign.SetData("text/plain", "not json"); err != nil {
		t.Fatal(err)
	}
	if _, err := Report(append(evs, foreign), day0, day1); err == nil || !strings.Contains(err.Error(), "x/1") {
		t.Errorf("a record whose data is not MacRack's: %v", err)
	}
	// Positive control: the same stream without it.
	if _, err := Report(evs, day0, day1); err != nil {
		t.Error(err)
	}
}
