package policy

import "errors"

// Sentinel errors. Callers match them with errors.Is.
var (
	// ErrLoad means the policy bundle could not be read or compiled.
	ErrLoad = errors.New("loading policies")
	// ErrGenerate means a CEL rule cannot be deployed as a ValidatingAdmissionPolicy.
	ErrGenerate = errors.New("generating admission policies")
	// ErrInput means the policy input is malformed.
	ErrInput = errors.New("malformed policy input")
	// ErrUnknownRule means a rule id names no loaded rule.
	ErrUnknownRule = errors.New("unknown rule")
	// ErrDeadline means the engines did not answer within the timeout.
	ErrDeadline = errors.New("policy deadline exceeded")
)

// Codes the engine itself answers with, beside the rules' own ids.
const (
	// CodeError denies when an engine fails or runs out of time: fail closed.
	CodeError = "policy.error"
	// CodeDisagreement denies when the Rego and CEL twins of a rule differ.
	CodeDisagreement = "policy.disagreement"
)
