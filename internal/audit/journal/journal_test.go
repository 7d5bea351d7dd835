package journal

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	computev1alpha1 "github.com/boualleiguie/macrack-operator/api/compute/v1alpha1"
	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
	leasingv1alpha1 "github.com/boualleiguie/macrack-operator/api/leasing/v1alpha1"
)

// t0 is the tests' clock; every journaled time is truncated to the second.
var t0 = time.Date(2026, 6, 1, 9, 0, 0, 0, time.UTC)

func at(d time.Duration) time.Time { return t0.Add(d) }

func mt(d time.Duration) *metav1.Time {
	t := metav1.NewTime(at(d))
	return &t
}

func rec(typ string) fleetv1alpha1.AuditRecord {
	return fleetv1alpha1.AuditRecord{Type: typ, Time: metav1.NewTime(t0)}
}

func seqs(j *fleetv1alpha1.AuditJournal) []int64 {
	var out []int64
	for _, r := range j.Records {
		out = append(out, r.Sequence)
	}
	return out
}

// types lists the journal's record types past sequence after.
func types(j *fleetv1alpha1.AuditJournal, after int64) []string {
	var out []string
	if j == nil {
		return nil
	}
	for _, r := range j.Records {
		if r.Sequence > after {
			out = append(out, r.Type)
		}
	}
	return out
}

// last is the journal's newest record of type typ.
func last(t *testing.T, j *fleetv1alpha1.AuditJournal, typ string) fleetv1alpha1.AuditRecord {
	t.Helper()
	for i := len(j.Records) - 1; i >= 0; i-- {
		if j.Records[i].Type == typ {
			return j.Records[i]
		}
	}
	t.Fatalf("no %s record in %v", typ, types(j, 0))
	return fleetv1alpha1.AuditRecord{}
}

func next(j *fleetv1alpha1.AuditJournal) int64 {
	if j == nil {
		return 0
	}
	return j.NextSequence - 1
}

func TestAppendNumbersFromOneWithoutGaps(t *testing.T) {
	var j *fleetv1alpha1.AuditJournal
	if dropped := Append(&j); dropped != 0 || j != nil {
		t.Fatalf("appending nothing made a journal %+v (dropped %d)", j, dropped)
	}
	Append(&j, rec("a"), rec("b"))
	Append(&j, rec("c"))
	Append(&j)
	Append(&j, rec("d"))
	if got, want := seqs(j), []int64{1, 2, 3, 4}; !slices.Equal(got, want) {
		t.Errorf("sequences %v, want %v", got, want)
	}
	if got, want := types(j, 0), []string{"a", "b", "c", "d"}; !slices.Equal(got, want) {
		t.Errorf("types %v, want %v", got, want)
	}
	if j.NextSequence != 5 {
		t.Errorf("nextSequence %d, want 5", j.NextSequence)
	}
	// A number the caller put on a record is not kept.
	r := rec("e")
	r.Sequence = 42
	Append(&j, r)
	if got := j.Records[len(j.Records)-1].Sequence; got != 5 {
		t.Errorf("the record took sequence %d, want 5", got)
	}
}

func TestAppendPrunesExportedRecords(t *testing.T) {
	var j *fleetv1alpha1.AuditJournal
	Append(&j, rec("a"), rec("b"), rec("c"))
	j.ExportedSequence = 2
	// Positive control: nothing is pruned until the writer appends.
	if got := seqs(j); len(got) != 3 {
		t.Fatalf("records %v before the append, want 3", got)
	}
	if dropped := Append(&j, rec("d")); dropped != 0 {
		t.Errorf("dropped %d, want 0: pruning acknowledged records loses nothing", dropped)
	}
	if got, want := seqs(j), []int64{3, 4}; !slices.Equal(got, want) {
		t.Errorf("sequences %v, want %v: 1 and 2 were exported", got, want)
	}
	if got := j.Unexported(); len(got) != 2 || got[0].Sequence != 3 {
		t.Errorf("unexported %v", got)
	}
}

func TestAppendDropsTheOldestBeyondTheBound(t *testing.T) {
	var j *fleetv1alpha1.AuditJournal
	for i := 0; i < fleetv1alpha1.MaxAuditRecords; i++ {
		if dropped := Append(&j, rec(fmt.Sprint(i))); dropped != 0 {
			t.Fatalf("record %d of %d dropped %d", i+1, fleetv1alpha1.MaxAuditRecords, dropped)
		}
	}
	dropped := Append(&j, rec("x"), rec("y"), rec("z"))
	if dropped != 3 {
		t.Errorf("dropped %d, want 3", dropped)
	}
	if len(j.Records) != fleetv1alpha1.MaxAuditRecords {
		t.Errorf("%d records, want %d", len(j.Records), fleetv1alpha1.MaxAuditRecords)
	}
	if first, lastSeq := j.Records[0].Sequence, j.Records[len(j.Records)-1].Sequence; first != 4 || lastSeq != 67 {
		t.Errorf("records %d..%d, want 4..67: the oldest go", first, lastSeq)
	}
	if j.NextSequence != 68 {
		t.Errorf("nextSequence %d, want 68: a dropped record still took its number", j.NextSequence)
	}
	// Positive control: once exported, the same appends drop nothing.
	j.ExportedSequence = j.NextSequence - 1
	if dropped := Append(&j, rec("x"), rec("y"), rec("z")); dropped != 0 || len(j.Records) != 3 {
		t.Errorf("after export: dropped %d, %d records; want 0 and 3", dropped, len(j.Records))
	}
}

func TestRecordsTruncateLongMessages(t *testing.T) {
	r := record("condition", at(0), "R", strings.Repeat("m", 2000), map[string]string{"a": "1", "empty": ""})
	if len(r.Message) != 1024 || !strings.HasSuffix(r.Message, "...") {
		t.Errorf("message of %d bytes, want 1024 ending in ...", len(r.Message))
	}
	if _, ok := r.Attributes["empty"]; ok || r.Attributes["a"] != "1" {
		t.Errorf("attributes %v: an empty value is left out, the others kept", r.Attributes)
	}
	if short := record("condition", at(0), "R", "short", nil); short.Message != "short" {
		t.Errorf("a short message became %q", short.Message)
	}
}

func newLease() *leasingv1alpha1.MacNodeLease {
	l := &leasingv1alpha1.MacNodeLease{}
	l.Namespace, l.Name, l.UID = "tenant-a", "ci", "lease-uid-1"
	l.CreationTimestamp = metav1.NewTime(at(0))
	l.Spec.NodeClassName = "m4-pro"
	l.Spec.MinimumDuration = "24h"
	return l
}

// leaseWrite applies change to the lease's status and journals the write,
// as the lease controller does.
func leaseWrite(l *leasingv1alpha1.MacNodeLease, now time.Time, change func(*leasingv1alpha1.MacNodeLeaseStatus)) int64 {
	before := l.Status.DeepCopy()
	from := next(l.Status.Audit)
	change(&l.Status)
	Lease(before, l, now)
	return from
}

func TestJournalLease(t *testing.T) {
	l := newLease()

	from := leaseWrite(l, at(time.Minute), func(s *leasingv1alpha1.MacNodeLeaseStatus) { s.Phase = leasingv1alpha1.LeasePending })
	if got, want := types(l.Status.Audit, from), []string{"created", "pending"}; !slices.Equal(got, want) {
		t.Fatalf("first write: %v, want %v", got, want)
	}
	if c := last(t, l.Status.Audit, "created"); !c.Time.Time.Equal(at(0)) || c.Attributes["class"] != "m4-pro" || c.Attributes["minimumDuration"] != "24h" {
		t.Errorf("created: %+v; want the creation time, the class and the minimum duration", c)
	}

	// A write that changes nothing journals nothing; created comes once.
	from = leaseWrite(l, at(2*time.Minute), func(*leasingv1alpha1.MacNodeLeaseStatus) {})
	if got := types(l.Status.Audit, from); len(got) != 0 {
		t.Errorf("an unchanged write journaled %v", got)
	}

	// Bound: timed by boundAt, not by the write's clock.
	from = leaseWrite(l, at(time.Hour), func(s *leasingv1alpha1.MacNodeLeaseStatus) {
		s.Phase = leasingv1alpha1.LeaseBound
		s.Serial, s.NodeName = "C02XL0GHJGH5", "mac-c02xl0ghjgh5"
		s.BoundAt, s.EarliestReleaseAt = mt(10*time.Minute), mt(24*time.Hour+10*time.Minute)
		s.Conditions = []metav1.Condition{{Type: "Bound", Status: metav1.ConditionTrue, Reason: "ChassisClaimed", Message: "claimed", LastTransitionTime: metav1.NewTime(at(10 * time.Minute))}}
	})
	if got, want := types(l.Status.Audit, from), []string{"bound", "condition"}; !slices.Equal(got, want) {
		t.Fatalf("bind: %v, want %v", got, want)
	}
	b := last(t, l.Status.Audit, "bound")
	if !b.Time.Time.Equal(at(10*time.Minute)) || b.Reason != "Bound" {
		t.Errorf("bound at %s reason %q; want boundAt %s and Bound", b.Time, b.Reason, at(10*time.Minute))
	}
	for k, v := range map[string]string{"from": "Pending", "serial": "C02XL0GHJGH5", "node": "mac-c02xl0ghjgh5",
		"boundAt": "2026-06-01T09:10:00Z", "earliestReleaseAt": "2026-06-02T09:10:00Z"} {
		if b.Attributes[k] != v {
			t.Errorf("bound's %s is %q, want %q", k, b.Attributes[k], v)
		}
	}
	if c := last(t, l.Status.Audit, "condition"); c.Attributes["condition"] != "Bound" || c.Attributes["status"] != "True" || c.Reason != "ChassisClaimed" || !c.Time.Time.Equal(at(10*time.Minute)) {
		t.Errorf("condition record %+v; want Bound True ChassisClaimed at its transition time", c)
	}

	// A message alone changing is no transition; a condition born False
	// records nothing yet.
	from = leaseWrite(l, at(2*time.Hour), func(s *leasingv1alpha1.MacNodeLeaseStatus) {
		s.Conditions[0].Message = "claimed, again in other words"
		s.Conditions = append(s.Conditions, metav1.Condition{Type: "Held", Status: metav1.ConditionFalse, Reason: "NotDeleted"})
	})
	if got := types(l.Status.Audit, from); len(got) != 0 {
		t.Errorf("a message-only change and a condition born False journaled %v", got)
	}
	// Positive controls: a reason change is one (and the False condition
	// turning True is one, on the hold below).
	from = leaseWrite(l, at(3*time.Hour), func(s *leasingv1alpha1.MacNodeLeaseStatus) {
		s.Conditions[0].Reason = "ChassisReclaimed"
	})
	if got := types(l.Status.Audit, from); !slices.Equal(got, []string{"condition"}) {
		t.Errorf("a reason change journaled %v, want one condition", got)
	}

	// Held, timed by heldAt; the Held condition turning True beside it.
	from = leaseWrite(l, at(5*time.Hour), func(s *leasingv1alpha1.MacNodeLeaseStatus) {
		s.Phase = leasingv1alpha1.LeaseHeld
		s.HeldAt = mt(4 * time.Hour)
		s.Conditions[1].Status, s.Conditions[1].Reason = metav1.ConditionTrue, "DeletedEarly"
	})
	if got, want := types(l.Status.Audit, from), []string{"held", "condition"}; !slices.Equal(got, want) {
		t.Fatalf("hold: %v, want %v", got, want)
	}
	if h := last(t, l.Status.Audit, "held"); !h.Time.Time.Equal(at(4*time.Hour)) || h.Attributes["from"] != "Bound" || h.Attributes["heldAt"] != "2026-06-01T13:00:00Z" {
		t.Errorf("held: %+v; want heldAt, from Bound", h)
	}
	if c := last(t, l.Status.Audit, "condition"); c.Attributes["condition"] != "Held" || !c.Time.Time.Equal(at(5*time.Hour)) {
		t.Errorf("condition %+v: one with no transition time is timed by the write", c)
	}

	// Released, timed by releasedAt.
	from = leaseWrite(l, at(30*time.Hour), func(s *leasingv1alpha1.MacNodeLeaseStatus) {
		s.Phase = leasingv1alpha1.LeaseReleased
		s.ReleasedAt = mt(24*time.Hour + 10*time.Minute)
	})
	if got := types(l.Status.Audit, from); !slices.Equal(got, []string{"released"}) {
		t.Fatalf("release: %v", got)
	}
	if r := last(t, l.Status.Audit, "released"); !r.Time.Time.Equal(at(24*time.Hour+10*time.Minute)) || r.Attributes["releasedAt"] != "2026-06-02T09:10:00Z" || r.Attributes["from"] != "Held" {
		t.Errorf("released: %+v", r)
	}
	if got, want := seqs(l.Status.Audit), []int64{1, 2, 3, 4, 5, 6, 7, 8}; !slices.Equal(got, want) {
		t.Errorf("sequences %v, want %v", got, want)
	}
}

func TestJournalLeaseTimesAPhaseWithoutItsStampByTheWrite(t *testing.T) {
	l := newLease()
	leaseWrite(l, at(time.Minute), func(s *leasingv1alpha1.MacNodeLeaseStatus) { s.Phase = leasingv1alpha1.LeasePending })
	leaseWrite(l, at(time.Hour), func(s *leasingv1alpha1.MacNodeLeaseStatus) { s.Phase = leasingv1alpha1.LeaseBound })
	if b := last(t, l.Status.Audit, "bound"); !b.Time.Time.Equal(at(time.Hour)) {
		t.Errorf("bound without boundAt timed %s, want the write's %s", b.Time, at(time.Hour))
	}
}

func newChassis() *fleetv1alpha1.MacNode {
	mn := &fleetv1alpha1.MacNode{}
	mn.Name, mn.UID = "mac-c02xl0ghjgh5", "chassis-uid-1"
	mn.CreationTimestamp = metav1.NewTime(at(0))
	mn.Spec.Serial, mn.Spec.NodeClassName = "C02XL0GHJGH5", "m4-pro"
	return mn
}

func chassisWrite(mn *fleetv1alpha1.MacNode, now time.Time, change func(*fleetv1alpha1.MacNodeStatus)) int64 {
	before := mn.Status.DeepCopy()
	from := next(mn.Status.Audit)
	change(&mn.Status)
	Chassis(before, mn, now)
	return from
}

func binding() *fleetv1alpha1.Binding {
	return &fleetv1alpha1.Binding{LeaseNamespace: "tenant-a", LeaseName: "ci", LeaseUID: "lease-uid-1",
		BoundAt: metav1.NewTime(at(time.Hour)), EarliestReleaseAt: metav1.NewTime(at(25 * time.Hour))}
}

func TestJournalChassis(t *testing.T) {
	mn := newChassis()
	from := chassisWrite(mn, at(time.Minute), func(s *fleetv1alpha1.MacNodeStatus) { s.Phase = fleetv1alpha1.MacNodePending })
	if got, want := types(mn.Status.Audit, from), []string{"enrolled", "pending"}; !slices.Equal(got, want) {
		t.Fatalf("first write: %v, want %v", got, want)
	}
	if e := last(t, mn.Status.Audit, "enrolled"); !e.Time.Time.Equal(at(0)) || e.Attributes["serial"] != "C02XL0GHJGH5" || e.Attributes["class"] != "m4-pro" {
		t.Errorf("enrolled: %+v", e)
	}
	from = chassisWrite(mn, at(2*time.Minute), func(*fleetv1alpha1.MacNodeStatus) {})
	if got := types(mn.Status.Audit, from); len(got) != 0 {
		t.Errorf("an unchanged write journaled %v", got)
	}

	from = chassisWrite(mn, at(3*time.Minute), func(s *fleetv1alpha1.MacNodeStatus) { s.Phase = fleetv1alpha1.MacNodeReady })
	if got := types(mn.Status.Audit, from); !slices.Equal(got, []string{"ready"}) {
		t.Fatalf("ready: %v", got)
	}
	if r := last(t, mn.Status.Audit, "ready"); r.Attributes["from"] != "Pending" || !r.Time.Time.Equal(at(3*time.Minute)) {
		t.Errorf("ready: %+v", r)
	}

	// The phase has one writer, the node controller, which journals every
	// write: the phase it read is the one last journaled. A stale key from
	// the days of several writers is dropped, and misleads no record.
	mn.Status.Audit.Observed = map[string]string{legacyObservedPhase: string(fleetv1alpha1.MacNodeEnrolled)}
	from = chassisWrite(mn, at(4*time.Minute), func(*fleetv1alpha1.MacNodeStatus) {})
	if got := types(mn.Status.Audit, from); len(got) != 0 {
		t.Errorf("an unchanged phase journaled %v", got)
	}
	if _, ok := mn.Status.Audit.Observed[legacyObservedPhase]; ok {
		t.Errorf("observed %v still holds the phase", mn.Status.Audit.Observed)
	}
	// Positive control: a move from the phase read is recorded, from it.
	from = chassisWrite(mn, at(5*time.Minute), func(s *fleetv1alpha1.MacNodeStatus) { s.Phase = fleetv1alpha1.MacNodeEnrolled })
	from2 := chassisWrite(mn, at(6*time.Minute), func(s *fleetv1alpha1.MacNodeStatus) { s.Phase = fleetv1alpha1.MacNodeReady })
	if got := types(mn.Status.Audit, from); !slices.Equal(got, []string{"enrolled", "ready"}) {
		t.Errorf("Enrolled then Ready journaled %v", got)
	} else if r := last(t, mn.Status.Audit, "ready"); r.Sequence < from2 || r.Attributes["from"] != "Enrolled" {
		t.Errorf("ready: %+v, want from Enrolled", r)
	}

	// Leased: from the binding, timed by its boundAt.
	from = chassisWrite(mn, at(2*time.Hour), func(s *fleetv1alpha1.MacNodeStatus) {
		s.Binding = binding()
	})
	if got := types(mn.Status.Audit, from); !slices.Equal(got, []string{"bound"}) {
		t.Fatalf("binding: %v", got)
	}
	lr := last(t, mn.Status.Audit, "bound")
	for k, v := range map[string]string{"tenant": "tenant-a", "lease": "ci", "leaseUID": "lease-uid-1", "serial": "C02XL0GHJGH5", "earliestReleaseAt": "2026-06-02T10:00:00Z"} {
		if lr.Attributes[k] != v {
			t.Errorf("bound's %s is %q, want %q", k, lr.Attributes[k], v)
		}
	}
	if !lr.Time.Time.Equal(at(time.Hour)) {
		t.Errorf("bound at %s, want the binding's boundAt", lr.Time)
	}
	from = chassisWrite(mn, at(3*time.Hour), func(*fleetv1alpha1.MacNodeStatus) {})
	if got := types(mn.Status.Audit, from); len(got) != 0 {
		t.Errorf("the same binding journaled %v again", got)
	}

	// A quarantine: its start, then each step once.
	from = chassisWrite(mn, at(4*time.Hour), func(s *fleetv1alpha1.MacNodeStatus) {
		s.Phase = fleetv1alpha1.MacNodeQuarantined
		s.Quarantine = &fleetv1alpha1.QuarantineStatus{BootID: "boot-1", Evidence: "VZErrorDomain code 6", QuarantinedAt: metav1.NewTime(at(4 * time.Hour))}
	})
	if got, want := types(mn.Status.Audit, from), []string{"quarantined", "quarantine.started"}; !slices.Equal(got, want) {
		t.Fatalf("quarantine: %v, want %v", got, want)
	}
	qs := last(t, mn.Status.Audit, "quarantine.started")
	if !qs.Time.Time.Equal(at(4*time.Hour)) || qs.Message != "VZErrorDomain code 6" || qs.Attributes["tenant"] != "tenant-a" || qs.Attributes["leaseUID"] != "lease-uid-1" || qs.Attributes["quarantinedAt"] != "2026-06-01T13:00:00Z" || qs.Attributes["bootID"] != "boot-1" {
		t.Errorf("quarantine.started: %+v", qs)
	}
	steps := []struct {
		change func(*fleetv1alpha1.QuarantineStatus)
		phase  fleetv1alpha1.MacNodePhase
		want   []string
	}{
		{func(q *fleetv1alpha1.QuarantineStatus) { q.RebootRequestedAt = mt(4*time.Hour + 5*time.Minute) }, fleetv1alpha1.MacNodeRebooting, []string{"rebooting", "quarantine.reboot-requested"}},
		{func(q *fleetv1alpha1.QuarantineStatus) { q.RebootedAt = mt(4*time.Hour + 10*time.Minute) }, fleetv1alpha1.MacNodeRebooting, []string{"quarantine.rebooted"}},
		{func(q *fleetv1alpha1.QuarantineStatus) { q.RecoveredAt = mt(4*time.Hour + 30*time.Minute) }, fleetv1alpha1.MacNodeLeased, []string{"leased", "quarantine.ended"}},
		{func(*fleetv1alpha1.QuarantineStatus) {}, fleetv1alpha1.MacNodeLeased, nil},
	}
	for i, st := range steps {
		from = chassisWrite(mn, at(5*time.Hour+time.Duration(i)*time.Minute), func(s *fleetv1alpha1.MacNodeStatus) {
			st.change(s.Quarantine)
			s.Phase = st.phase
		})
		if got := types(mn.Status.Audit, from); !slices.Equal(got, st.want) {
			t.Errorf("quarantine step %d: %v, want %v", i, got, st.want)
		}
	}
	for typ, want := range map[string]time.Time{
		"quarantine.reboot-requested": at(4*time.Hour + 5*time.Minute),
		"quarantine.rebooted":         at(4*time.Hour + 10*time.Minute),
		"quarantine.ended":            at(4*time.Hour + 30*time.Minute),
	} {
		if r := last(t, mn.Status.Audit, typ); !r.Time.Time.Equal(want) {
			t.Errorf("%s at %s, want its step's timestamp %s", typ, r.Time, want)
		}
	}
	end := last(t, mn.Status.Audit, "quarantine.ended")
	if end.Attributes["outageSeconds"] != "1800" || end.Attributes["recoveredAt"] != "2026-06-01T13:30:00Z" || end.Attributes["tenant"] != "tenant-a" {
		t.Errorf("quarantine.ended: %+v", end.Attributes)
	}
	for _, typ := range []string{"quarantine.started", "quarantine.reboot-requested", "quarantine.rebooted", "quarantine.ended"} {
		if n := count(mn.Status.Audit, typ); n != 1 {
			t.Errorf("%d %s records, want 1", n, typ)
		}
	}

	// A second quarantine, known by its new quarantinedAt, records its start
	// and every step anew, with new sequence numbers.
	firstStarted := last(t, mn.Status.Audit, "quarantine.started").Sequence
	from = chassisWrite(mn, at(8*time.Hour), func(s *fleetv1alpha1.MacNodeStatus) {
		s.Phase = fleetv1alpha1.MacNodeQuarantined
		s.Quarantine = &fleetv1alpha1.QuarantineStatus{BootID: "boot-2", Evidence: "again", QuarantinedAt: metav1.NewTime(at(8 * time.Hour)),
			RebootRequestedAt: mt(8*time.Hour + time.Minute)}
	})
	if got, want := types(mn.Status.Audit, from), []string{"quarantined", "quarantine.started", "quarantine.reboot-requested"}; !slices.Equal(got, want) {
		t.Fatalf("second quarantine: %v, want %v", got, want)
	}
	second := last(t, mn.Status.Audit, "quarantine.started")
	if second.Sequence <= firstStarted || second.Attributes["quarantinedAt"] != "2026-06-01T17:00:00Z" || second.Attributes["bootID"] != "boot-2" {
		t.Errorf("second quarantine.started: %+v (the first was sequence %d)", second, firstStarted)
	}

	// Unbound when the binding goes, naming the lease that went.
	from = chassisWrite(mn, at(30*time.Hour), func(s *fleetv1alpha1.MacNodeStatus) {
		s.Quarantine.RebootedAt, s.Quarantine.RecoveredAt = mt(8*time.Hour+2*time.Minute), mt(8*time.Hour+3*time.Minute)
		s.Phase, s.Binding = fleetv1alpha1.MacNodeReady, nil
	})
	if got, want := types(mn.Status.Audit, from), []string{"ready", "unbound", "quarantine.rebooted", "quarantine.ended"}; !slices.Equal(got, want) {
		t.Fatalf("release: %v, want %v", got, want)
	}
	if u := last(t, mn.Status.Audit, "unbound"); u.Attributes["leaseUID"] != "lease-uid-1" || !u.Time.Time.Equal(at(30*time.Hour)) {
		t.Errorf("unbound: %+v", u)
	}
	if _, ok := mn.Status.Audit.Observed[observedLease]; ok {
		t.Errorf("observed %v still names a lease", mn.Status.Audit.Observed)
	}
	// A new binding, to another lease, is bound again.
	from = chassisWrite(mn, at(31*time.Hour), func(s *fleetv1alpha1.MacNodeStatus) {
		b := binding()
		b.LeaseUID, b.LeaseNamespace = "lease-uid-2", "tenant-b"
		s.Binding = b
	})
	if got := types(mn.Status.Audit, from); !slices.Equal(got, []string{"bound"}) {
		t.Errorf("a second binding: %v", got)
	}
	for i, s := range seqs(mn.Status.Audit) {
		if s != int64(i+1) {
			t.Fatalf("sequences %v have a gap", seqs(mn.Status.Audit))
		}
	}
}

func count(j *fleetv1alpha1.AuditJournal, typ string) int {
	n := 0
	for _, r := range j.Records {
		if r.Type == typ {
			n++
		}
	}
	return n
}

func TestJournalChassisQuarantineOfAnUnleasedChassisNamesNoTenant(t *testing.T) {
	mn := newChassis()
	chassisWrite(mn, at(time.Minute), func(s *fleetv1alpha1.MacNodeStatus) {
		s.Phase = fleetv1alpha1.MacNodeQuarantined
		s.Quarantine = &fleetv1alpha1.QuarantineStatus{BootID: "b", Evidence: "e", QuarantinedAt: metav1.NewTime(at(time.Minute)), NeedsAttention: true}
	})
	if s := last(t, mn.Status.Audit, "quarantine.started"); s.Attributes["tenant"] != "" || s.Attributes["leaseUID"] != "" {
		t.Errorf("an unleased chassis' quarantine names %v", s.Attributes)
	}
	if n := count(mn.Status.Audit, "quarantine.needs-attention"); n != 1 {
		t.Errorf("%d needs-attention records, want 1", n)
	}
	chassisWrite(mn, at(time.Hour), func(*fleetv1alpha1.MacNodeStatus) {})
	if n := count(mn.Status.Audit, "quarantine.needs-attention"); n != 1 {
		t.Errorf("%d needs-attention records after a second write, want 1", n)
	}
}

func TestJournalImageRecordsEachDigestResolved(t *testing.T) {
	img := &fleetv1alpha1.MacOSImage{}
	img.Name, img.UID, img.Spec.Source = "sequoia", "image-uid-1", "registry.example/goldens/sequoia@sha256:abc"
	write := func(now time.Time, res *fleetv1alpha1.ResolvedImage) int64 {
		before := img.Status.DeepCopy()
		from := next(img.Status.Audit)
		img.Status.Resolved = res
		Image(before, img, now)
		return from
	}
	if from := write(at(0), nil); len(types(img.Status.Audit, from)) != 0 {
		t.Errorf("an unresolved image journaled %v", types(img.Status.Audit, from))
	}
	from := write(at(time.Minute), &fleetv1alpha1.ResolvedImage{Digest: "sha256:abc", MacOSVersion: "15.5"})
	if got := types(img.Status.Audit, from); !slices.Equal(got, []string{RecordResolved}) {
		t.Fatalf("resolving: %v, want one resolved record", got)
	}
	r := last(t, img.Status.Audit, RecordResolved)
	if r.Attributes["digest"] != "sha256:abc" || r.Attributes["macOSVersion"] != "15.5" || r.Attributes["image"] != "sequoia" ||
		r.Attributes["source"] != img.Spec.Source || !r.Time.Time.Equal(at(time.Minute)) {
		t.Errorf("resolved: %+v", r)
	}
	if from = write(at(2*time.Minute), &fleetv1alpha1.ResolvedImage{Digest: "sha256:abc", MacOSVersion: "15.5"}); len(types(img.Status.Audit, from)) != 0 {
		t.Errorf("the same digest journaled %v", types(img.Status.Audit, from))
	}
	if from = write(at(3*time.Minute), &fleetv1alpha1.ResolvedImage{Digest: "sha256:def"}); !slices.Equal(types(img.Status.Audit, from), []string{RecordResolved}) {
		t.Errorf("a new digest journaled %v, want one resolved record", types(img.Status.Audit, from))
	}
}

func TestJournalChassisRecordsEachCopy(t *testing.T) {
	mn := newChassis()
	chassisWrite(mn, at(0), func(s *fleetv1alpha1.MacNodeStatus) { s.Phase = fleetv1alpha1.MacNodeReady })
	report := func(imgs ...fleetv1alpha1.ReportedImage) func(*fleetv1alpha1.MacNodeStatus) {
		return func(s *fleetv1alpha1.MacNodeStatus) { s.Reported = &fleetv1alpha1.ReportedFacts{Images: imgs} }
	}
	ready := func(name, digest string) fleetv1alpha1.ReportedImage {
		return fleetv1alpha1.ReportedImage{Name: name, Digest: digest, Phase: fleetv1alpha1.ImageReady}
	}
	pulling := fleetv1alpha1.ReportedImage{Name: "tahoe", Digest: "sha256:t", Phase: fleetv1alpha1.ImagePulling}

	from := chassisWrite(mn, at(time.Minute), report(ready("sequoia", "sha256:s"), pulling))
	if got := types(mn.Status.Audit, from); !slices.Equal(got, []string{RecordReplicated}) {
		t.Fatalf("one copy verified, one pulling: %v, want one replicated record", got)
	}
	if r := last(t, mn.Status.Audit, RecordReplicated); r.Attributes["serial"] != mn.Spec.Serial ||
		r.Attributes["image"] != "sequoia" || r.Attributes["digest"] != "sha256:s" || !r.Time.Time.Equal(at(time.Minute)) {
		t.Errorf("replicated: %+v", r)
	}
	if from = chassisWrite(mn, at(2*time.Minute), report(ready("sequoia", "sha256:s"), pulling)); len(types(mn.Status.Audit, from)) != 0 {
		t.Errorf("an unchanged cache journaled %v", types(mn.Status.Audit, from))
	}
	from = chassisWrite(mn, at(3*time.Minute), report(ready("tahoe", "sha256:t")))
	if got, want := types(mn.Status.Audit, from), []string{RecordReplicated, RecordEvicted}; !slices.Equal(got, want) {
		t.Fatalf("one verified, one went: %v, want %v", got, want)
	}
	if e := last(t, mn.Status.Audit, RecordEvicted); e.Attributes["image"] != "sequoia" || e.Attributes["digest"] != "sha256:s" {
		t.Errorf("evicted: %+v", e.Attributes)
	}
	from = chassisWrite(mn, at(4*time.Minute), func(s *fleetv1alpha1.MacNodeStatus) { s.Reported = nil })
	if got := types(mn.Status.Audit, from); !slices.Equal(got, []string{RecordEvicted}) {
		t.Errorf("no report: %v, want the last copy evicted", got)
	}
	if _, ok := mn.Status.Audit.Observed[observedImages]; ok {
		t.Errorf("an empty cache left %q observed", mn.Status.Audit.Observed[observedImages])
	}
}

func newInstance() *computev1alpha1.MacOSInstance {
	inst := &computev1alpha1.MacOSInstance{}
	inst.Namespace, inst.Name, inst.UID = "tenant-a", "build-1", "instance-uid-1"
	inst.CreationTimestamp = metav1.NewTime(at(0))
	inst.Spec.LeaseName, inst.Spec.ImageName = "ci", "sequoia"
	return inst
}

// derived is what Instance derives, by type and time.
func derived(inst *computev1alpha1.MacOSInstance) []string {
	var out []string
	for _, r := range Instance(inst) {
		out = append(out, r.Type+"@"+r.Time.UTC().Format("15:04"))
	}
	return out
}

// An instance's records are derived from its status, each at its fact's
// own time; a later status that still holds a fact derives the same record
// again, unchanged, and a second run is derived with its own start.
func TestJournalInstance(t *testing.T) {
	inst := newInstance()
	if got := derived(inst); !slices.Equal(got, []string{"created@09:00"}) {
		t.Fatalf("new: %v", got)
	}
	c := Instance(inst)[0]
	if c.Attributes["tenant"] != "tenant-a" || c.Attributes["lease"] != "ci" || c.Attributes["image"] != "sequoia" || c.Attributes["node"] != "" {
		t.Errorf("created: %+v", c)
	}
	st := &inst.Status
	// Refused first, then placed: the Placed condition's transition is the
	// placement's time.
	st.Conditions = []metav1.Condition{{Type: computev1alpha1.ConditionPlaced, Status: metav1.ConditionFalse, Reason: computev1alpha1.ReasonCapacityExceeded, LastTransitionTime: *mt(time.Minute)}}
	if got := derived(inst); !slices.Equal(got, []string{"created@09:00"}) {
		t.Errorf("waiting for a slot: %v", got)
	}
	st.NodeName = "mac-c1"
	st.Conditions[0].Status, st.Conditions[0].Reason, st.Conditions[0].LastTransitionTime = metav1.ConditionTrue, computev1alpha1.ReasonPlaced, *mt(2 * time.Minute)
	st.Runtime = &computev1alpha1.RuntimeStatus{Phase: computev1alpha1.VMPulling}
	createdBefore := Instance(inst)[0]
	if got := derived(inst); !slices.Equal(got, []string{"created@09:00", "placed@09:02"}) {
		t.Errorf("placed, pulling: %v", got)
	}
	st.Runtime = &computev1alpha1.RuntimeStatus{Phase: computev1alpha1.VMRunning, StartedAt: mt(10 * time.Minute), LastReportAt: mt(11 * time.Minute)}
	first := Instance(inst)
	if got := derived(inst); !slices.Equal(got, []string{"created@09:00", "placed@09:02", "running@09:10"}) {
		t.Errorf("running: %v", got)
	}
	st.Runtime.Phase = computev1alpha1.VMStopped
	st.Runtime.LastStop = &computev1alpha1.VMStop{Method: computev1alpha1.StopGuestShutdown, Reason: "ChassisQuarantined", At: *mt(20 * time.Minute)}
	if got := derived(inst); !slices.Equal(got, []string{"created@09:00", "placed@09:02", "running@09:10", "stopped@09:20"}) {
		t.Errorf("stopped: %v", got)
	}
	// The same facts, derived from a later status, are the same records.
	if again := Instance(inst)[:3]; !reflect.DeepEqual(again, first) || !reflect.DeepEqual(again[0], createdBefore) {
		t.Errorf("derived again:\n%+v\nwant\n%+v", again, first)
	}
	st.Runtime.Phase, st.Runtime.StartedAt = computev1alpha1.VMRunning, mt(40*time.Minute)
	if got := derived(inst); !slices.Equal(got, []string{"created@09:00", "placed@09:02", "stopped@09:20", "running@09:40"}) {
		t.Errorf("running again after the stop: %v", got)
	}
	st.Runtime.Phase = computev1alpha1.VMStopped
	st.Runtime.LastStop = &computev1alpha1.VMStop{Method: computev1alpha1.StopForced, At: *mt(50 * time.Minute)}
	st.Runtime.Wipe = &fleetv1alpha1.WipeEvidence{Namespace: "tenant-a", Name: "build-1", UID: "instance-uid-1", LeaseName: "ci",
		Files: []string{"disk.img", "aux.img"}, Bytes: 4096, Method: "apfs-clone-unlink", WipedAt: *mt(55 * time.Minute)}
	recs := Instance(inst)
	if got := derived(inst); !slices.Equal(got, []string{"created@09:00", "placed@09:02", "running@09:40", "stopped@09:50", "wiped@09:55"}) {
		t.Errorf("stopped and wiped: %v", got)
	}
	if p := recs[1]; p.Attributes["node"] != "mac-c1" {
		t.Errorf("placed: %+v", p.Attributes)
	}
	if s := recs[3]; s.Reason != "Forced" || s.Attributes["method"] != "Forced" {
		t.Errorf("stopped: %+v", s)
	}
	w := recs[4]
	for k, v := range map[string]string{"method": "apfs-clone-unlink", "bytes": "4096", "files": "disk.img,aux.img", "wipedAt": "2026-06-01T09:55:00Z", "node": "mac-c1"} {
		if w.Attributes[k] != v {
			t.Errorf("wiped's %s is %q, want %q", k, w.Attributes[k], v)
		}
	}
	for _, r := range recs {
		if r.Sequence != 0 {
			t.Errorf("%s numbered %d: a derived record has no sequence", r.Type, r.Sequence)
		}
	}
}
