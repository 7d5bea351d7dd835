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

is_lease if input.request.kind.kind == "MacNodeLease"

is_macnode if input.request.kind.kind == "MacNode"

lease_era := object.get(lib.old, ["status", "earliestReleaseAt"], null)

violations contains {"code": code, "message": msg} if {
	is_lease
	not lib.is_operator
	some f in lib.removed_macrack_finalizers
	lease_era != null
	lib.before(lease_era)
	msg := sprintf("lease.release: finalizer %s cannot be removed before earliestReleaseAt %s (now %s); only the operator releases a lease", [f, lease_era, lib.show(object.get(input, "now", "unknown"))])
}

violations contains {"code": code, "message": msg} if {
	is_lease
	lib.operation == "UPDATE"
	object.get(lib.new, ["status", "phase"], "") == "Released"
	object.get(lib.old, ["status", "phase"], "") != "Released"
	lease_era != null
	lib.before(lease_era)
	msg := sprintf("lease.release: the lease cannot be Released before earliestReleaseAt %s (now %s)", [lease_era, lib.show(object.get(input, "now", "unknown"))])
}

old_binding := object.get(lib.old, ["status", "binding"], null)

new_binding_uid := object.get(lib.new, ["status", "binding", "leaseUID"], null)

violations contains {"code": code, "message": msg} if {
	is_macnode
	lib.operation in {"UPDATE", "DELETE"}
	old_binding != null
	new_binding_uid != old_binding.leaseUID
	lib.before(old_binding.earliestReleaseAt)
	msg := sprintf("lease.release: chassis %s stays bound to %s/%s until %s (now %s)", [
		object.get(lib.old, ["spec", "serial"], "?"),
		old_binding.leaseNamespace, old_binding.leaseName, old_binding.earliestReleaseAt,
		lib.show(object.get(input, "now", "unknown")),
	])
}
