package v1alpha1

import "github.com/boualleiguie/macrack-operator/internal/enforcement"

// SchemaEnforcement is where the MacNodeLease schema enforces a rule.
var SchemaEnforcement = []enforcement.Point{
	{Rule: "lease.floor", Layer: enforcement.Schema, Field: "MacNodeLease spec.minimumDuration",
		What:  "`minimumDuration` is a duration of at most six digits each of hours, minutes and seconds, so nothing beyond Go's durations reaches an engine",
		Proof: enforcement.Proof{File: "test/envtest/schema/schema_test.go", Test: "refuses a malformed duration"}},
	{Rule: "instance.cap", Layer: enforcement.Schema, Field: "MacNodeLease .",
		What:  "a bound lease's `nodeClassName`, whose class sets the cap, is immutable",
		Proof: enforcement.Proof{File: "test/envtest/schema/schema_test.go", Test: "is immutable once the lease is bound"}},
}
