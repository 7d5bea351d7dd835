package audit

import (
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	computev1alpha1 "github.com/boualleiguie/macrack-operator/api/compute/v1alpha1"
	"github.com/boualleiguie/macrack-operator/internal/audit/journal"
)

// observeInstance journals what moved on an instance since the exporter
// last looked.
func observeInstance(obj client.Object, now time.Time) int {
	inst, ok := obj.(*computev1alpha1.MacOSInstance)
	if !ok {
		return 0
	}
	return journal.Instance(inst, now)
}
