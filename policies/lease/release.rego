# METADATA
# title: lease.release
# description: |
#   A chassis goes back to the pool no earlier than earliestReleaseAt. Before
#   then: no lease is marked Released, no MacNode binding is cleared or
#   replaced, and nobody but the operator removes a macrack.io/ finalizer from
#   a lease. A delete is not refused: the finalizer keeps the lease, in Held.
# custom:
#   id: lease.release
#   kinds:
#   - leasing.macrack.io/MacNodeLease
#   - fleet.macrack.io/MacNode
#   engines: [rego]
package macrack.lease.release

import data.macrack.lib

code := "lease.release"

# Before the stored lease's earliestReleaseAt, the lease is not released.
violations contains {"code": code, "message": concat("", ["lease.release: ", problem])} if {
	input.request.kind.kind == "MacNodeLease"
	input.request.operation == "UPDATE"
	some problem in early_release_problems
}

# Before the binding's earliestReleaseAt, the chassis stays bound to its lease.
violations contains {"code": code, "message": msg} if {
	input.request.kind.kind == "MacNode"
	input.request.operation in {"UPDATE", "DELETE"}
	binding := object.get(lib.old, ["status", "binding"], null)
	binding != null
	object.get(lib.new, ["status", "binding", "leaseUID"], null) != binding.leaseUID
	lib.before(binding.earliestReleaseAt)
	msg := sprintf("lease.release: chassis %s stays bound to %s/%s until %s (now %s)", [
		object.get(lib.old, ["spec", "serial"], "?"),
		binding.leaseNamespace, binding.leaseName, binding.earliestReleaseAt,
		lib.now_shown,
	])
}

# Nobody but the operator removes a macrack.io/ finalizer, and nobody marks
# the lease Released. Each check reads the clock last, once the rest holds.

early_release_problems contains sprintf("finalizer %s cannot be removed before earliestReleaseAt %s (now %s); only the operator releases a lease", [f, era, lib.now_shown]) if {
	some f in object.get(input, ["oldObject", "metadata", "finalizers"], [])
	startswith(f, "macrack.io/")
	not f in object.get(input, ["object", "metadata", "finalizers"], [])
	not lib.is_operator
	era := stored_era
	lib.before(era)
}

early_release_problems contains sprintf("the lease cannot be Released before earliestReleaseAt %s (now %s)", [era, lib.now_shown]) if {
	object.get(input, ["object", "status", "phase"], "") == "Released"
	object.get(input, ["oldObject", "status", "phase"], "") != "Released"
	era := stored_era
	lib.before(era)
}

# stored_era is the stored lease's earliestReleaseAt, once it has one.
stored_era := era if {
	era := object.get(input, ["oldObject", "status", "earliestReleaseAt"], null)
	era != null
}
