package audit

import (
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	computev1alpha1 "github.com/boualleiguie/macrack-operator/api/compute/v1alpha1"
	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
	leasingv1alpha1 "github.com/boualleiguie/macrack-operator/api/leasing/v1alpha1"
	"github.com/boualleiguie/macrack-operator/internal/audit/journal"
	"github.com/boualleiguie/macrack-operator/internal/chassis"
)

// kind is what the exporter needs to know of one journaled kind.
type kind struct {
	// name is the stream's kind: lease, instance, chassis, image.
	name string
	// controller is the journal's writer, the records' source.
	controller string
	newObject  func() client.Object
	newList    func() client.ObjectList
	journal    func(client.Object) **fleetv1alpha1.AuditJournal
	// finalized kinds carry the audit finalizer: whoever deletes one (a
	// tenant its lease or instance, an administrator a chassis or an
	// image), its last records must not go with it.
	finalized bool
	// derive, if set, makes the kind's records from the facts its status
	// keeps, in place of a journal (an instance, whose transitions two
	// parties write: issue 39). Such a kind has no journal and no cursor;
	// the exporter remembers what the sink acknowledged.
	derive func(client.Object) []fleetv1alpha1.AuditRecord
	// final, if set, says that a deleted object's journal is complete: no
	// record will follow the ones it holds.
	final func(client.Object) bool
	// takes, if set, names the other finalizers on obj that the exporter
	// takes off with its own, in the same write (issue 39): those whose
	// owner's work is done and on record in the status, so that nothing
	// will journal on obj again. Their owners leave them to it when the
	// audit finalizer is on.
	takes func(client.Object) []string
	// lazyCursor kinds' cursor is written only when their journal needs
	// the room (cursorRoom), not after every publish (issue 39): a lease
	// goes with its audit finalizer, whose removal says that every record
	// is out, and a chassis' writer prunes what is past the cursor.
	lazyCursor bool
}

// cursorRoom is how many records past its cursor a lazyCursor kind's
// journal holds before the exporter writes the cursor, so that the
// journal's writer prunes them on its next append: half of what a journal
// holds, far above the dozen records of a lease's life. A chassis, which
// lives for ever, has its cursor written once every 32 records, and its
// journal keeps the other half for records not yet out.
const cursorRoom = fleetv1alpha1.MaxAuditRecords / 2

// cursorDue reports whether the exporter writes obj's cursor once the sink
// acknowledged through exported: never for an object on its way out with
// its last record journaled (the finalizer's removal says as much); for a
// lazyCursor kind, only once its journal holds cursorRoom records past the
// stored cursor.
func (k *kind) cursorDue(obj client.Object, j *fleetv1alpha1.AuditJournal, exported int64) bool {
	if exported <= j.ExportedSequence || k.last(obj) {
		return false
	}
	return !k.lazyCursor || len(j.Unexported()) >= cursorRoom
}

// unacknowledged is the records of j that no sink has acknowledged: past the
// cursor, and past sent, what this exporter knows it published since.
func unacknowledged(j *fleetv1alpha1.AuditJournal, sent int64) int64 {
	if j == nil || j.NextSequence == 0 {
		return 0
	}
	return max(0, j.NextSequence-1-max(j.ExportedSequence, sent))
}

// last reports whether obj is being deleted with its journal complete.
func (k *kind) last(obj client.Object) bool {
	return k.final != nil && !obj.GetDeletionTimestamp().IsZero() && k.final(obj)
}

// objects are a list's items.
func objects(l client.ObjectList) []client.Object {
	items, err := meta.ExtractList(l)
	if err != nil {
		return nil // every list here is a typed list of our kinds
	}
	out := make([]client.Object, 0, len(items))
	for _, o := range items {
		out = append(out, o.(client.Object))
	}
	return out
}

func kinds() []*kind {
	return []*kind{
		{
			name: fleetv1alpha1.AuditKindLease, controller: "macrack-lease", finalized: true, lazyCursor: true,
			newObject: func() client.Object { return &leasingv1alpha1.MacNodeLease{} },
			newList:   func() client.ObjectList { return &leasingv1alpha1.MacNodeLeaseList{} },
			journal: func(o client.Object) **fleetv1alpha1.AuditJournal {
				return &o.(*leasingv1alpha1.MacNodeLease).Status.Audit
			},
			// Released: the lease controller journals nothing after.
			final: func(o client.Object) bool {
				return o.(*leasingv1alpha1.MacNodeLease).Status.Phase == leasingv1alpha1.LeaseReleased
			},
			// Released: the chassis is back, and the lease controller,
			// whose finalizer says it is not yet, leaves it to this write.
			takes: func(o client.Object) []string {
				if o.(*leasingv1alpha1.MacNodeLease).Status.Phase == leasingv1alpha1.LeaseReleased {
					return []string{fleetv1alpha1.LeaseFinalizer}
				}
				return nil
			},
		},
		{
			// Derived: a deleted instance's records are complete once no
			// other finalizer is left but the agent's with the wipe's
			// evidence on record, which finalize waits for anyway.
			name: fleetv1alpha1.AuditKindInstance, controller: "macrack-audit", finalized: true,
			newObject: func() client.Object { return &computev1alpha1.MacOSInstance{} },
			newList:   func() client.ObjectList { return &computev1alpha1.MacOSInstanceList{} },
			derive: func(o client.Object) []fleetv1alpha1.AuditRecord {
				return journal.Instance(o.(*computev1alpha1.MacOSInstance))
			},
			// The wipe on record (instance.wipe): the agent, which writes
			// it and nothing after, leaves its finalizer to this write.
			takes: func(o client.Object) []string {
				if chassis.Wiped(o.(*computev1alpha1.MacOSInstance)) {
					return []string{fleetv1alpha1.DiskWipeFinalizer}
				}
				return nil
			},
		},
		{
			name: fleetv1alpha1.AuditKindChassis, controller: "macrack-node", finalized: true, lazyCursor: true,
			newObject: func() client.Object { return &fleetv1alpha1.MacNode{} },
			newList:   func() client.ObjectList { return &fleetv1alpha1.MacNodeList{} },
			journal:   func(o client.Object) **fleetv1alpha1.AuditJournal { return &o.(*fleetv1alpha1.MacNode).Status.Audit },
		},
		{
			name: fleetv1alpha1.AuditKindImage, controller: "macrack-image", finalized: true,
			newObject: func() client.Object { return &fleetv1alpha1.MacOSImage{} },
			newList:   func() client.ObjectList { return &fleetv1alpha1.MacOSImageList{} },
			journal:   func(o client.Object) **fleetv1alpha1.AuditJournal { return &o.(*fleetv1alpha1.MacOSImage).Status.Audit },
		},
	}
}
