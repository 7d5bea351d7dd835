package event

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2/event"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
	leasingv1alpha1 "github.com/boualleiguie/macrack-operator/api/leasing/v1alpha1"
	"github.com/boualleiguie/macrack-operator/internal/audit/denial"
)

// t0 is the tests' clock.
var t0 = time.Date(2026, 6, 1, 9, 0, 0, 0, time.UTC)

func at(d time.Duration) time.Time { return t0.Add(d) }

func mt(d time.Duration) *metav1.Time {
	t := metav1.NewTime(at(d))
	return &t
}

func newLease() *leasingv1alpha1.MacNodeLease {
	l := &leasingv1alpha1.MacNodeLease{}
	l.Namespace, l.Name, l.UID = "tenant-a", "ci", "lease-uid-1"
	l.CreationTimestamp = metav1.NewTime(at(0))
	return l
}

func newChassis() *fleetv1alpha1.MacNode {
	mn := &fleetv1alpha1.MacNode{}
	mn.Name, mn.UID = "mac-c02xl0ghjgh5", "chassis-uid-1"
	mn.CreationTimestamp = metav1.NewTime(at(0))
	return mn
}

func TestIDsAndTypes(t *testing.T) {
	for got, want := range map[string]string{
		ID("lease", "u-1", 7):        "lease/u-1/7",
		DeletedID("instance", "u-2"): "instance/u-2/deleted",
		FactID("instance", "u-2", "running", time.Date(2026, 6, 1, 11, 0, 5, 0, time.FixedZone("CEST", 2*3600))): "instance/u-2/running/2026-06-01T09:00:05Z",
		Type("lease", "bound"):                "io.macrack.lease.bound",
		Type("chassis", "quarantine.started"): "io.macrack.chassis.quarantine.started",
	} {
		if got != want {
			t.Errorf("%q, want %q", got, want)
		}
	}
}

func TestEventOfAJournaledRecord(t *testing.T) {
	l := newLease()
	r := fleetv1alpha1.AuditRecord{Sequence: 3, Type: "bound", Time: metav1.NewTime(at(10 * time.Minute)), Reason: "Bound",
		Attributes: map[string]string{"serial": "C02XL0GHJGH5", "boundAt": "2026-06-01T09:10:00Z"}}
	ev, err := Origin{Cluster: "eu-1"}.Event("lease", "macrack-lease", l, r)
	if err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string][2]string{
		"id":          {ev.ID(), "lease/lease-uid-1/3"},
		"type":        {ev.Type(), "io.macrack.lease.bound"},
		"source":      {ev.Source(), "macrack://eu-1/macrack-lease"},
		"subject":     {ev.Subject(), "tenant-a/ci"},
		"specversion": {ev.SpecVersion(), "1.0"},
		"datacontent": {ev.DataContentType(), "application/json"},
	} {
		if c[0] != c[1] {
			t.Errorf("%s %q, want %q", name, c[0], c[1])
		}
	}
	if !ev.Time().Equal(at(10*time.Minute)) || ev.Time().Location() != time.UTC {
		t.Errorf("time %s, want the record's, in UTC", ev.Time())
	}
	if err := ev.Validate(); err != nil {
		t.Errorf("the event does not validate: %v", err)
	}
	var d Data
	if err := ev.DataAs(&d); err != nil {
		t.Fatal(err)
	}
	want := Data{Kind: "lease", UID: "lease-uid-1", Namespace: "tenant-a", Name: "ci", Sequence: 3, Reason: "Bound", Attributes: r.Attributes}
	if !reflect.DeepEqual(d, want) {
		t.Errorf("data %+v, want %+v", d, want)
	}

	// Through JSON and back, as a sink and a reader see it.
	b, err := json.Marshal(ev)
	if err != nil {
		t.Fatal(err)
	}
	var back cloudevents.Event
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	var d2 Data
	if err := back.DataAs(&d2); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(d2, want) || back.ID() != ev.ID() || back.Type() != ev.Type() || back.Subject() != ev.Subject() || !back.Time().Equal(ev.Time()) {
		t.Errorf("round trip: %s\ngave %+v, data %+v", b, back, d2)
	}
}

// A derived record's event is named by its fact, not a sequence: the same
// record derived again is the same event, and its data has no sequence.
func TestEventOfADerivedRecord(t *testing.T) {
	inst := newLease() // any namespaced object
	r := fleetv1alpha1.AuditRecord{Type: "running", Time: metav1.NewTime(at(10 * time.Minute)), Attributes: map[string]string{"node": "c02a"}}
	o := Origin{Cluster: "eu-1"}
	ev, err := o.Fact("instance", "macrack-audit", inst, r)
	if err != nil {
		t.Fatal(err)
	}
	if ev.ID() != "instance/lease-uid-1/running/2026-06-01T09:10:00Z" || ev.Type() != "io.macrack.instance.running" || !ev.Time().Equal(at(10*time.Minute)) {
		t.Fatalf("id %s, type %s, time %s", ev.ID(), ev.Type(), ev.Time())
	}
	var d Data
	if err := ev.DataAs(&d); err != nil || d.Sequence != 0 || d.Attributes["node"] != "c02a" {
		t.Fatalf("data %+v (%v)", d, err)
	}
	again, err := o.Fact("instance", "macrack-audit", inst, *r.DeepCopy())
	if err != nil {
		t.Fatal(err)
	}
	a, _ := json.Marshal(ev)
	b, _ := json.Marshal(again)
	if string(a) != string(b) {
		t.Fatalf("derived twice, two events:\n%s\n%s", a, b)
	}
}

func TestEventOfAClusterScopedObjectIsSubjectByName(t *testing.T) {
	mn := newChassis()
	ev, err := Origin{Cluster: "eu-1"}.Event("chassis", "macrack-node", mn, fleetv1alpha1.AuditRecord{Sequence: 1, Type: "enrolled", Time: metav1.NewTime(t0)})
	if err != nil {
		t.Fatal(err)
	}
	if ev.Subject() != "mac-c02xl0ghjgh5" || ev.ID() != "chassis/chassis-uid-1/1" || ev.Source() != "macrack://eu-1/macrack-node" {
		t.Errorf("subject %q id %q source %q", ev.Subject(), ev.ID(), ev.Source())
	}
}

func TestDeletedIsTimedByTheDeletion(t *testing.T) {
	l := newLease()
	o := Origin{Cluster: "eu-1"}
	ev, err := o.Deleted("lease", "macrack-lease", l, at(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if ev.ID() != "lease/lease-uid-1/deleted" || ev.Type() != "io.macrack.lease.deleted" || !ev.Time().Equal(at(time.Hour)) {
		t.Errorf("without a deletion timestamp: id %q type %q time %s", ev.ID(), ev.Type(), ev.Time())
	}
	l.DeletionTimestamp = mt(30 * time.Minute)
	if ev, err = o.Deleted("lease", "macrack-lease", l, at(time.Hour)); err != nil || !ev.Time().Equal(at(30*time.Minute)) {
		t.Errorf("with one: time %s (%v), want the deletion's", ev.Time(), err)
	}
}

func TestDenialIDsAreStableAndDistinct(t *testing.T) {
	o := Origin{Cluster: "eu-1"}
	d := denial.Denial{Layer: "webhook", Rule: "lease.floor", Code: "LeaseTooShort", Revision: "rev1", Message: "too short",
		Kind: "MacNodeLease", Namespace: "tenant-a", Name: "ci", Operation: "CREATE", User: "alice", Key: "req-1", At: at(0)}
	a, err := o.Denial(d)
	if err != nil {
		t.Fatal(err)
	}
	again, _ := o.Denial(d)
	if a.ID() != again.ID() || !strings.HasPrefix(a.ID(), "denial/") || len(a.ID()) != len("denial/")+32 {
		t.Errorf("ids %q and %q: want the same denial/<32 hex>", a.ID(), again.ID())
	}
	if a.Type() != "io.macrack.denial.webhook" || a.Source() != "macrack://eu-1/macrack-webhook" || a.Subject() != "tenant-a/ci" {
		t.Errorf("type %q source %q subject %q", a.Type(), a.Source(), a.Subject())
	}
	// Positive control: another request's refusal is another record.
	d.Key = "req-2"
	if b, _ := o.Denial(d); b.ID() == a.ID() {
		t.Errorf("two requests' refusals share id %q", a.ID())
	}
	var data Data
	if err := a.DataAs(&data); err != nil || data.Attributes["rule"] != "lease.floor" || data.Attributes["revision"] != "rev1" || data.Reason != "LeaseTooShort" {
		t.Errorf("denial data %+v (%v)", data, err)
	}
}
