package agent

import "example.com/violation/internal/reconcile/lease"

// Uses reaches into the operator's internals, which the boundary forbids.
var Uses = lease.Name
