package agent

import "github.com/boualleiguie/macrack-operator/internal/enforcement"

// Enforcement is where the host agent enforces a rule itself, whatever the
// API server admitted.
var Enforcement = []enforcement.Point{
	{Rule: "instance.cap", Layer: enforcement.Agent,
		What:  "starts a VM only for an instance that a slot of its chassis names",
		Proof: enforcement.Proof{File: "internal/agent/instances/instances_test.go", Test: "TestAnInstancePlacedWithoutASlotIsNeverStarted"}},
	{Rule: "instance.image", Layer: enforcement.Agent,
		What:  "refuses to boot an image from a disk smaller than the image",
		Proof: enforcement.Proof{File: "internal/agent/vmspec/vmspec_test.go", Test: "TestRenderRejects/a disk smaller than the image is refused"}},
	{Rule: "instance.wipe", Layer: enforcement.Agent,
		What:  "records `status.runtime.wipedAt` after the wipe, and only then removes its finalizer",
		Proof: enforcement.Proof{File: "internal/agent/instances/instances_test.go", Test: "TestTheWipeIsRecordedBeforeTheFinalizerComesOff"}},
}
