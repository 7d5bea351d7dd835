# METADATA
# title: tenancy.class
# description: |
#   A bound chassis keeps the class it was leased as. While a MacNode's
#   binding names a lease (or its phase is Leased), its spec.nodeClassName
#   does not change: the tenant's lease, instance.cap and the Node's class
#   label were all decided by that class. An unbound chassis may be
#   reclassified.
# custom:
#   id: tenancy.class
#   kinds:
#   - fleet.macrack.io/MacNode
#   engines: [rego, cel]
package macrack.tenancy.class

import data.macrack.lib

code := "tenancy.class"

violations contains {"code": code, "message": msg} if {
	input.request.kind.kind == "MacNode"
	input.request.operation == "UPDATE"
	bound
	lib.changed(["spec", "nodeClassName"])
	msg := sprintf("tenancy.class: MacNode %s is bound to lease %s/%s; its nodeClassName stays %s until the lease is released, not %s", [
		lib.show(object.get(lib.old, ["metadata", "name"], "")),
		object.get(lib.old, ["status", "binding", "leaseNamespace"], "?"),
		object.get(lib.old, ["status", "binding", "leaseName"], "?"),
		lib.show(object.get(lib.old, ["spec", "nodeClassName"], "")),
		lib.show(object.get(lib.new, ["spec", "nodeClassName"], "")),
	])
}

# bound: the stored MacNode is bound to a lease.
bound if object.get(lib.old, ["status", "binding"], null) != null

bound if object.get(lib.old, ["status", "phase"], "") == "Leased"
