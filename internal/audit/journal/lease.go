package journal

import (
	"strings"
	"time"

	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
	leasingv1alpha1 "github.com/boualleiguie/macrack-operator/api/leasing/v1alpha1"
)

// Lease appends the records a lease's status write carries: created
// (its first write), each phase it enters, and each condition change. A
// phase's record is timed by the timestamp the lease controller wrote for it
// (boundAt, heldAt, releasedAt): a billing interval runs from the bound
// record's time to the released record's.
func Lease(before *leasingv1alpha1.MacNodeLeaseStatus, lease *leasingv1alpha1.MacNodeLease, now time.Time) (dropped int) {
	return Append(&lease.Status.Audit, leaseRecords(before, lease, now)...)
}

func leaseRecords(before *leasingv1alpha1.MacNodeLeaseStatus, lease *leasingv1alpha1.MacNodeLease, now time.Time) []fleetv1alpha1.AuditRecord {
	after := &lease.Status
	var recs []fleetv1alpha1.AuditRecord
	if after.Audit == nil || after.Audit.NextSequence == 0 {
		recs = append(recs, record("created", lease.CreationTimestamp.Time, "", "", map[string]string{
			"class": lease.Spec.NodeClassName, "minimumDuration": lease.Spec.MinimumDuration,
		}))
	}
	if after.Phase != before.Phase && after.Phase != "" {
		at := now
		switch after.Phase {
		case leasingv1alpha1.LeaseBound:
			at = timeOr(after.BoundAt, now)
		case leasingv1alpha1.LeaseHeld:
			at = timeOr(after.HeldAt, now)
		case leasingv1alpha1.LeaseReleased:
			at = timeOr(after.ReleasedAt, now)
		}
		recs = append(recs, record(strings.ToLower(string(after.Phase)), at, string(after.Phase), "", map[string]string{
			"from": string(before.Phase), "serial": after.Serial, "node": after.NodeName,
			"boundAt": stamp(after.BoundAt), "earliestReleaseAt": stamp(after.EarliestReleaseAt),
			"heldAt": stamp(after.HeldAt), "releasedAt": stamp(after.ReleasedAt),
		}))
	}
	return append(recs, conditionChanges(before.Conditions, after.Conditions, now)...)
}
