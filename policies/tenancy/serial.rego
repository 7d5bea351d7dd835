# METADATA
# title: tenancy.serial
# description: |
#   A physical serial has one tenant. A MacNode's binding names one lease, and
#   is never replaced by another lease's binding: it must be cleared (released)
#   first. A lease claims a serial only when the MacNode's binding names that
#   lease, and no other lease that is not Released holds the serial. Held
#   leases count.
# custom:
#   id: tenancy.serial
#   kinds:
#   - fleet.macrack.io/MacNode
#   - leasing.macrack.io/MacNodeLease
#   engines: [rego]
#   inventory:
#   - macNode: the MacNode named after the serial the lease claims
#   - leases: every lease whose status.serial is that serial (index lease-by-serial)
package macrack.tenancy.serial

import data.macrack.lib

code := "tenancy.serial"

# A bound MacNode is never bound to another lease.
violations contains {"code": code, "message": msg} if {
	input.request.kind.kind == "MacNode"
	input.request.operation == "UPDATE"
	old_binding := object.get(lib.old, ["status", "binding"], null)
	old_binding != null
	new_binding := object.get(lib.new, ["status", "binding"], null)
	new_binding != null
	new_binding.leaseUID != old_binding.leaseUID
	msg := sprintf("tenancy.serial: serial %s is bound to %s/%s; it cannot also be bound to %s/%s", [
		object.get(lib.new, ["spec", "serial"], "?"),
		old_binding.leaseNamespace, old_binding.leaseName,
		new_binding.leaseNamespace, new_binding.leaseName,
	])
}

# A lease claims a serial only when that MacNode's binding names it, and no
# other lease that is not Released holds the serial.
violations contains {"code": code, "message": concat("", ["tenancy.serial: ", problem])} if {
	input.request.kind.kind == "MacNodeLease"
	input.request.operation == "UPDATE"
	some problem in claim_problems
}

claim_problems contains sprintf("lease %s claims serial %s, but no MacNode for that serial is known", [lease_ref, serial]) if {
	serial := claimed_serial
	not input.inventory.macNode
}

claim_problems contains sprintf("lease %s claims serial %s, but the MacNode's binding does not name it", [lease_ref, serial]) if {
	serial := claimed_serial
	object.get(input.inventory.macNode, ["status", "binding", "leaseUID"], "") != lease_uid
}

claim_problems contains sprintf("serial %s is held by lease %s/%s (%s); it cannot also be leased by %s", [
	serial, other.metadata.namespace, other.metadata.name,
	object.get(other, ["status", "phase"], "Pending"), lease_ref,
]) if {
	serial := claimed_serial
	some other in object.get(input, ["inventory", "leases"], [])
	is_object(other)
	object.get(other, ["status", "serial"], "") == serial
	object.get(other, ["metadata", "uid"], "") != lease_uid
	object.get(other, ["status", "phase"], "") != "Released"
}

# claimed_serial is the serial an update newly writes into a lease's status.
claimed_serial := s if {
	s := object.get(lib.new, ["status", "serial"], "")
	s != ""
	lib.changed(["status", "serial"])
}

lease_uid := object.get(lib.new, ["metadata", "uid"], "")

lease_ref := sprintf("%s/%s", [object.get(lib.new, ["metadata", "namespace"], ""), object.get(lib.new, ["metadata", "name"], "")])
