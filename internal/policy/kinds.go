package policy

import "k8s.io/apimachinery/pkg/runtime/schema"

// KnownKind reports whether the rules know gk, that is whether Decide can
// derive its resource. Callers that wrap raw manifests (macrackctl policy
// check) refuse other kinds up front, naming the document, rather than
// letting Decide answer policy.error.
func KnownKind(gk schema.GroupKind) bool {
	_, _, ok := resourceFor(gk)
	return ok
}
