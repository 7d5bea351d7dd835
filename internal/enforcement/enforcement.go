// Package enforcement is the registry of where each rule is enforced. Each
// layer declares its own points next to the code that enforces them: the
// webhook in internal/admission, each reconciler in its package, the host
// agent in internal/agent. The CRD schema's points are in schema.go, as
// api/ holds types only. The ValidatingAdmissionPolicy
// layer is declared by the CEL twins themselves. docs/compliance.md's matrix
// is generated from these points, and hack/policygen's tests hold every
// point to the test that proves its layer alone.
package enforcement

// Layer is one column of the compliance matrix, in the order the API
// server and then the controllers meet a write.
type Layer string

const (
	Schema     Layer = "CRD schema"
	VAP        Layer = "VAP (API server)"
	Webhook    Layer = "webhook"
	Reconciler Layer = "reconciler"
	Agent      Layer = "agent"
)

// Layers are the matrix's columns, in order.
var Layers = []Layer{Schema, VAP, Webhook, Reconciler, Agent}

// Point is one place where a layer enforces a rule.
type Point struct {
	Rule  string
	Layer Layer
	// What the layer does, as the matrix cell says it. For the webhook it
	// is left empty: the cell names the resources the webhook receives,
	// read from its configuration.
	What string
	// Field is, for the schema, the CRD field that holds the constraint:
	// "<Kind> <path>", such as "MacNodeLease spec.minimumDuration", or
	// "<Kind> ." for a rule on the whole object.
	Field string
	// Proof is the test that shows this layer refusing alone.
	Proof Proof
}

// Proof names a test: a file of the repository, and in it a Go test
// function (with a subtest, as "TestX/the subtest's name") or a Ginkgo
// spec's text. The test says which rules it proves: a Ginkgo spec carries
// the label "proves:<rule>", a Go test's doc comment the line
// "Proves: <rule>[, <rule>]".
type Proof struct {
	File string
	Test string
}
