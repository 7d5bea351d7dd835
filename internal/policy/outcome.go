package policy

import (
	"slices"
	"strings"
)

// Violation is one reason a request is refused.
type Violation struct {
	// Rule is the rule id, e.g. lease.floor.
	Rule string `json:"rule"`
	// Code is what callers match on: the rule id, or policy.error or
	// policy.disagreement when the engine itself refuses.
	Code string `json:"code"`
	// Message names the rule and the numbers: "lease.floor: minimumDuration
	// 23h is below the 24h floor".
	Message string `json:"message"`
}

// AnswerKind is an engine's normalised answer.
type AnswerKind string

// The normalised answers. Missing is a twin that a rule declares but the
// bundle lacks; it never equals another answer.
const (
	AnswerAllow   AnswerKind = "allow"
	AnswerDeny    AnswerKind = "deny"
	AnswerError   AnswerKind = "error"
	AnswerMissing AnswerKind = "missing"
)

// Answer is one engine's normalised answer to one rule: allow, deny with a
// set of codes, or error.
type Answer struct {
	Kind  AnswerKind `json:"kind"`
	Codes []string   `json:"codes,omitempty"`
	// Detail carries the messages or the errors, for logs.
	Detail []string `json:"detail,omitempty"`
}

// Equal compares two answers as the disagreement check does: kind and codes.
func (a Answer) Equal(b Answer) bool {
	return a.Kind == b.Kind && a.Kind != AnswerMissing && slices.Equal(a.Codes, b.Codes)
}

func (a Answer) String() string {
	switch a.Kind {
	case AnswerDeny:
		return "deny(" + strings.Join(a.Codes, ",") + ")"
	case AnswerError:
		return "error(" + strings.Join(a.Detail, "; ") + ")"
	}
	return string(a.Kind)
}

// outcome is an engine's raw answer before normalisation.
type outcome struct {
	violations []Violation
	errs       []string
	missing    bool
}

func (o outcome) answer() Answer {
	switch {
	case o.missing:
		return Answer{Kind: AnswerMissing}
	case len(o.errs) > 0:
		return Answer{Kind: AnswerError, Detail: o.errs}
	case len(o.violations) > 0:
		var codes, detail []string
		for _, v := range o.violations {
			if !slices.Contains(codes, v.Code) {
				codes = append(codes, v.Code)
			}
			detail = append(detail, v.Message)
		}
		slices.Sort(codes)
		return Answer{Kind: AnswerDeny, Codes: codes, Detail: detail}
	}
	return Answer{Kind: AnswerAllow}
}
