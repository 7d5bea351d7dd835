package placement

import "github.com/boualleiguie/macrack-operator/internal/enforcement"

// Enforcement is where the placement controller enforces a rule itself,
// with no admission in front of it.
var Enforcement = []enforcement.Point{
	{Rule: "instance.cap", Layer: enforcement.Reconciler,
		What:  "placement claims one of the chassis' slots before it places an instance",
		Proof: enforcement.Proof{File: "internal/reconcile/placement/controller_test.go", Test: "TestThreeWaitingInstancesGetTwoSlotsOldestFirst"}},
	{Rule: "quarantine.fence", Layer: enforcement.Reconciler,
		What:  "placement claims no slot on a chassis that is Quarantined or Rebooting, or whose quarantine is active; an instance created before it waits unplaced, saying so, and the slots already claimed stay",
		Proof: enforcement.Proof{File: "internal/reconcile/placement/controller_test.go", Test: "TestAChassisUnderQuarantineClaimsNoSlot"}},
}
