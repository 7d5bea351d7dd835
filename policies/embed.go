// Package policies holds MacRack's invariants: every rule in Rego, and the
// ones the API server can enforce also in CEL. Reviewers read and test this
// folder directly (opa test, conftest); the operator embeds it.
package policies

import "embed"

// FS is the policy bundle: <area>/<rule>.rego, their tests, the CEL twins
// (<area>/<rule>.cel.yaml), the conftest entry point, and bundle.yaml, the
// bundle's serial.
//
//go:embed lib lease tenancy instance node quota quarantine agent audit pod runner conftest bundle.yaml
var FS embed.FS
