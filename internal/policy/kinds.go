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

// Namespaced reports whether objects of gk live in a namespace, for the
// kinds KnownKind knows; ok is false for any other. macrackctl puts a
// namespaced manifest that names no namespace in the one it is checked in,
// as the API server puts it in the request's.
func Namespaced(gk schema.GroupKind) (namespaced, ok bool) {
	if !KnownKind(gk) {
		return false, false
	}
	switch kindKey(gk) {
	case "fleet.macrack.io/MacNodeClass", "fleet.macrack.io/MacNode", "fleet.macrack.io/MacOSImage",
		"/Node", "certificates.k8s.io/CertificateSigningRequest":
		return false, true
	}
	return true, true
}
