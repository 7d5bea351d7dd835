package lease

import "github.com/boualleiguie/macrack-operator/internal/enforcement"

// Enforcement is where the lease controller enforces a rule itself, with
// no admission in front of it.
var Enforcement = []enforcement.Point{
	{Rule: "lease.floor", Layer: enforcement.Reconciler,
		What:  "the lease controller asks before it binds, extends or releases",
		Proof: enforcement.Proof{File: "test/envtest/reconcilers/refuse_test.go", Test: "the lease controller refuses to bind a 1h lease written straight to storage, and binds a 24h one"}},
	{Rule: "lease.release", Layer: enforcement.Reconciler,
		What:  "the lease controller frees a chassis whose lease is gone only at earliestReleaseAt",
		Proof: enforcement.Proof{File: "test/envtest/reconcilers/refuse_test.go", Test: "a forced finalizer removal at +3h frees nothing: the binding holds the chassis until earliestReleaseAt"}},
}
