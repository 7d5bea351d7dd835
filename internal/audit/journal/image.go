package journal

import (
	"time"

	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
)

// RecordResolved is an image's record of the artifact it resolved to.
const RecordResolved = "resolved"

// Image appends a golden's resolution on this write: a record when
// status.resolved takes a digest it did not hold. Its copies are the
// chassis' records (replicated, evicted), each journaled by its MacNode.
func Image(before *fleetv1alpha1.MacOSImageStatus, img *fleetv1alpha1.MacOSImage, now time.Time) (dropped int) {
	after := img.Status.Resolved
	if after == nil || (before.Resolved != nil && before.Resolved.Digest == after.Digest) {
		return 0
	}
	return Append(&img.Status.Audit, record(RecordResolved, now, "", "", map[string]string{
		"image": img.Name, "digest": after.Digest, "macOSVersion": after.MacOSVersion, "source": img.Spec.Source,
	}))
}
