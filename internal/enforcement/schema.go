package enforcement

// SchemaPoints are where the CRD schemas (generated from the kubebuilder
// markers in api/) enforce a rule. They live here rather than beside the
// types, so that api/ holds types only; hack/policygen holds each point's
// Field to a constraint in its CRD, so the list cannot claim a constraint
// the schema lacks.
var SchemaPoints = []Point{
	// MacNodeLease
	{Rule: "lease.floor", Layer: Schema, Field: "MacNodeLease spec.minimumDuration",
		What:  "`minimumDuration` is a duration of at most six digits each of hours, minutes and seconds, so nothing beyond Go's durations reaches an engine",
		Proof: Proof{File: "test/envtest/schema/schema_test.go", Test: "refuses a malformed duration"}},
	{Rule: "instance.cap", Layer: Schema, Field: "MacNodeLease .",
		What:  "a bound lease's `nodeClassName`, whose class sets the cap, is immutable",
		Proof: Proof{File: "test/envtest/schema/schema_test.go", Test: "is immutable once the lease is bound"}},
	// MacNodeClass, MacNode
	{Rule: "quota.never-circumvent", Layer: Schema, Field: "MacNodeClass spec.vmCapacity",
		What:  "a class's `vmCapacity` is 1 or 2",
		Proof: Proof{File: "test/envtest/schema/schema_test.go", Test: "refuses 3"}},
	{Rule: "node.commercial", Layer: Schema, Field: "MacNodeClass spec.disk",
		What:  "a class's disk is a positive quantity",
		Proof: Proof{File: "test/envtest/schema/schema_test.go", Test: "refuse a negative or malformed quantity"}},
	{Rule: "instance.cap", Layer: Schema, Field: "MacNode status.slots",
		What:  "a MacNode has at most 2 `slots`",
		Proof: Proof{File: "test/envtest/schema/schema_test.go", Test: "refuses a third slot"}},
	{Rule: "tenancy.serial", Layer: Schema, Field: "MacNode .",
		What:  "a MacNode is named after its serial, so a serial has one MacNode",
		Proof: Proof{File: "test/envtest/schema/schema_test.go", Test: "refuses a MacNode whose name is not its serial in lower case"}},
	{Rule: "tenancy.serial", Layer: Schema, Field: "MacNode spec",
		What:  "a MacNode's serial is immutable",
		Proof: Proof{File: "test/envtest/schema/schema_test.go", Test: "refuses a changed serial"}},
	// GitLabRunner
	{Rule: "runner.secret", Layer: Schema, Field: "GitLabRunner spec.gitlab.tokenSecretRef.key",
		What:  "a runner's `tokenSecretRef.key` is `token`, so only the runner token of the Secret is ever read",
		Proof: Proof{File: "test/envtest/schema/schema_test.go", Test: "refuses a key other than token"}},
	// MacOSInstance
	{Rule: "instance.tenant", Layer: Schema, Field: "MacOSInstance spec.leaseName",
		What:  "an instance's `leaseName` is immutable",
		Proof: Proof{File: "test/envtest/schema/schema_test.go", Test: "refuses a changed leaseName"}},
	{Rule: "instance.image", Layer: Schema, Field: "MacOSInstance spec.disk",
		What:  "an instance's disk is a positive quantity",
		Proof: Proof{File: "test/envtest/schema/schema_test.go", Test: "refuse a negative or malformed quantity"}},
}
