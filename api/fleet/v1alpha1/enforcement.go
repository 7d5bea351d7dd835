package v1alpha1

import "github.com/boualleiguie/macrack-operator/internal/enforcement"

// SchemaEnforcement is where the fleet schemas enforce a rule.
var SchemaEnforcement = []enforcement.Point{
	{Rule: "quota.never-circumvent", Layer: enforcement.Schema, Field: "MacNodeClass spec.vmCapacity",
		What:  "a class's `vmCapacity` is 1 or 2",
		Proof: enforcement.Proof{File: "test/envtest/schema/schema_test.go", Test: "refuses 3"}},
	{Rule: "node.commercial", Layer: enforcement.Schema, Field: "MacNodeClass spec.disk",
		What:  "a class's disk is a positive quantity",
		Proof: enforcement.Proof{File: "test/envtest/schema/schema_test.go", Test: "refuse a negative or malformed quantity"}},
	{Rule: "instance.cap", Layer: enforcement.Schema, Field: "MacNode status.slots",
		What:  "a MacNode has at most 2 `slots`",
		Proof: enforcement.Proof{File: "test/envtest/schema/schema_test.go", Test: "refuses a third slot"}},
	{Rule: "tenancy.serial", Layer: enforcement.Schema, Field: "MacNode .",
		What:  "a MacNode is named after its serial, so a serial has one MacNode",
		Proof: enforcement.Proof{File: "test/envtest/schema/schema_test.go", Test: "refuses a MacNode whose name is not its serial in lower case"}},
	{Rule: "tenancy.serial", Layer: enforcement.Schema, Field: "MacNode spec",
		What:  "a MacNode's serial is immutable",
		Proof: enforcement.Proof{File: "test/envtest/schema/schema_test.go", Test: "refuses a changed serial"}},
}
