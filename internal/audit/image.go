package audit

import (
	"slices"
	"strconv"
	"strings"
	"time"

	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
)

// JournalImage appends a golden's replications and evictions on this
// write: one record for the serials that joined status.replicatedOn, one for
// those that left it. A fleet pulling at once is one record per pass, not
// one per chassis.
func JournalImage(before *fleetv1alpha1.MacOSImageStatus, img *fleetv1alpha1.MacOSImage, now time.Time) (dropped int) {
	after := &img.Status
	if slices.Equal(before.ReplicatedOn, after.ReplicatedOn) {
		return 0 // the steady pass: both are sorted
	}
	digest := ""
	if after.Resolved != nil {
		digest = after.Resolved.Digest
	}
	var recs []fleetv1alpha1.AuditRecord
	for _, c := range []struct {
		typ      string
		from, to []string
	}{{"replicated", before.ReplicatedOn, after.ReplicatedOn}, {"evicted", after.ReplicatedOn, before.ReplicatedOn}} {
		var moved []string
		from := make(map[string]bool, len(c.from)) // replicatedOn grows with the fleet
		for _, serial := range c.from {
			from[serial] = true
		}
		for _, serial := range c.to {
			if !from[serial] {
				moved = append(moved, serial)
			}
		}
		if len(moved) > 0 {
			recs = append(recs, record(c.typ, now, "", "", map[string]string{
				"serials": strings.Join(moved, ","), "count": strconv.Itoa(len(moved)), "digest": digest,
			}))
		}
	}
	return Append(&after.Audit, recs...)
}
