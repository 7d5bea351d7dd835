package node

import "github.com/boualleiguie/macrack-operator/internal/enforcement"

// Enforcement is where the node controller enforces a rule itself, with no
// admission in front of it.
var Enforcement = []enforcement.Point{
	{Rule: "node.commercial", Layer: enforcement.Reconciler,
		What:  "the node controller asks before it moves a chassis to Ready",
		Proof: enforcement.Proof{File: "internal/reconcile/node/controller_test.go", Test: "TestPhases/a chassis with a 1 Gb NIC stays Enrolled and says node.commercial"}},
	{Rule: "quota.never-circumvent", Layer: enforcement.Reconciler,
		What:  "the node controller asks before it moves a chassis to Ready",
		Proof: enforcement.Proof{File: "test/envtest/reconcilers/refuse_test.go", Test: "the node controller never moves a SIP-off host to Ready, and moves a compliant one"}},
	{Rule: "quota.never-circumvent", Layer: enforcement.Reconciler,
		What:  "the node controller asks before it moves a chassis to Ready",
		Proof: enforcement.Proof{File: "internal/reconcile/node/controller_test.go", Test: "TestPhases/a chassis with SIP off stays Enrolled and says quota.never-circumvent"}},
}
