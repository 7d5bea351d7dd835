package image

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
	"github.com/boualleiguie/macrack-operator/internal/conditions"
)

// updateStatus sets the Resolved condition and emits the pass's Events.
func (r *Reconciler) updateStatus(s *scope) {
	img := s.image
	now := metav1.NewTime(r.Clock.Now())
	c := &img.Status.Conditions
	switch res := img.Status.Resolved; {
	case res != nil:
		img.Status.ObservedGeneration = img.Generation
		conditions.Set(c, conditions.True(fleetv1alpha1.ConditionResolved, fleetv1alpha1.ReasonResolved,
			fmt.Sprintf("macOS %s, Xcode %s: a %s disk in %d %s chunks (%s to pull), fits disks of %s and more",
				res.MacOSVersion, strings.Join(res.XcodeVersions, ", "), res.DiskSize.String(), res.Chunks,
				res.Compression, res.CompressedSize.String(), res.MinimumDisk.String())), img.Generation, now)
	case s.resolveReason != "":
		if conditions.Set(c, conditions.False(fleetv1alpha1.ConditionResolved, s.resolveReason, s.resolveMessage), img.Generation, now) {
			r.Recorder.Eventf(img, nil, corev1.EventTypeWarning, s.resolveReason, "Resolve", "%s", s.resolveMessage)
		}
	}
}
