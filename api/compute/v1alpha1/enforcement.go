package v1alpha1

import "github.com/boualleiguie/macrack-operator/internal/enforcement"

// SchemaEnforcement is where the MacOSInstance schema enforces a rule.
var SchemaEnforcement = []enforcement.Point{
	{Rule: "instance.tenant", Layer: enforcement.Schema, Field: "MacOSInstance spec.leaseName",
		What:  "an instance's `leaseName` is immutable",
		Proof: enforcement.Proof{File: "test/envtest/schema/schema_test.go", Test: "refuses a changed leaseName"}},
	{Rule: "instance.image", Layer: enforcement.Schema, Field: "MacOSInstance spec.disk",
		What:  "an instance's disk is a positive quantity",
		Proof: enforcement.Proof{File: "test/envtest/schema/schema_test.go", Test: "refuse a negative or malformed quantity"}},
}
