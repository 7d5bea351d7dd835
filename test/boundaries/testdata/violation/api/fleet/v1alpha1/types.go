// Package v1alpha1 is an API package that declares policy points beside its
// types: what the api/ boundary refuses.
package v1alpha1

import "example.com/violation/internal/enforcement"

var SchemaEnforcement = []enforcement.Point{{Rule: "x"}}
