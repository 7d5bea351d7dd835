package phase

import (
	"testing"

	computev1alpha1 "github.com/boualleiguie/macrack-operator/api/compute/v1alpha1"
	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
)

func TestOrPending(t *testing.T) {
	t.Run("an unset MacNode phase reads as the API's Pending", func(t *testing.T) {
		if got := OrPending(fleetv1alpha1.MacNodePhase("")); got != fleetv1alpha1.MacNodePending {
			t.Fatalf("got %q", got)
		}
	})
	t.Run("an unset VM phase reads as the API's Pending", func(t *testing.T) {
		if got := OrPending(computev1alpha1.VMPhase("")); got != computev1alpha1.VMPending {
			t.Fatalf("got %q", got)
		}
	})
	t.Run("a set phase is kept", func(t *testing.T) {
		if got := OrPending(fleetv1alpha1.MacNodeLeased); got != fleetv1alpha1.MacNodeLeased {
			t.Fatalf("got %q", got)
		}
	})
}
