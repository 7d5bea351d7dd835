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

# Every check opens with the guard on the kind and the operation, which OPA's
# rule index decides before it evaluates a body, and reads the input
# directly: object.get(input, ["oldObject", ...]) reads the stored object as
# lib.old would ({} where absent or null), without the cost of a virtual
# document. The clock is read last, once the rest holds.

violations contains {"code": code, "message": msg} if {
	input.request.kind.kind == "MacNodeLease"
	input.request.operation == "UPDATE"
	some f in object.get(input, ["oldObject", "metadata", "finalizers"], [])
	startswith(f, "macrack.io/")
	not f in object.get(input, ["object", "metadata", "finalizers"], [])
	lease_era := object.get(input, ["oldObject", "status", "earliestReleaseAt"], null)
	lease_era != null
	not lib.is_operator
	lib.before(lease_era)
	msg := sprintf("lease.release: finalizer %s cannot be removed before earliestReleaseAt %s (now %s); only the operator releases a lease", [f, lease_era, lib.show(object.get(input, "now", "unknown"))])
}

violations contains {"code": code, "message": msg} if {
	input.request.kind.kind == "MacNodeLease"
	input.request.operation == "UPDATE"
	object.get(input, ["object", "status", "phase"], "") == "Released"
	object.get(input, ["oldObject", "status", "phase"], "") != "Released"
	lease_era := object.get(input, ["oldObject", "status", "earliestReleaseAt"], null)
	lease_era != null
	lib.before(lease_era)
	msg := sprintf("lease.release: the lease cannot be Released before earliestReleaseAt %s (now %s)", [lease_era, lib.show(object.get(input, "now", "unknown"))])
}

violations contains {"code": code, "message": msg} if {
	input.request.kind.kind == "MacNode"
	input.request.operation in {"UPDATE", "DELETE"}
	old_binding := object.get(input, ["oldObject", "status", "binding"], null)
	old_binding != null
	object.get(input, ["object", "status", "binding", "leaseUID"], null) != old_binding.leaseUID
	lib.before(old_binding.earliestReleaseAt)
	msg := sprintf("lease.release: chassis %s stays bound to %s/%s until %s (now %s)", [
		object.get(lib.old, ["spec", "serial"], "?"),
		old_binding.leaseNamespace, old_binding.leaseName, old_binding.earliestReleaseAt,
		lib.show(object.get(input, "now", "unknown")),
	])
}
