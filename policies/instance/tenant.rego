# METADATA
# title: instance.tenant
# description: |
#   An instance lives inside its tenant's lease. A new instance names a lease
#   in its own namespace that is Bound (not Pending, Held, Released or being
#   deleted). An instance is placed only on its own lease's node.
# custom:
#   id: instance.tenant
#   kinds:
#   - compute.macrack.io/MacOSInstance
#   engines: [rego]
#   inventory:
#   - lease: the MacNodeLease that spec.leaseName names, in the instance's namespace
package macrack.instance.tenant

import data.macrack.lib

code := "instance.tenant"

# violations: none for an instance created in the namespace of the Bound
# lease it names, a lease not being deleted; or updated with that lease and
# no new placement; else the checks one by one. Each clause is sufficient for
# "no check fires", and opens with the request's kind and operation. (An
# else chain, not a negation, which would cost a nested evaluation; the
# checks alone write the denial messages.)
violations := set() if {
	input.request.kind.kind == "MacOSInstance"
	input.request.operation == "CREATE"
	lease := input.inventory.lease
	is_object(lease)
	object.get(lease, ["metadata", "namespace"], "") == object.get(input, ["object", "metadata", "namespace"], "")
	object.get(lease, ["metadata", "name"], "") == object.get(input, ["object", "spec", "leaseName"], "")
	object.get(lease, ["status", "phase"], "Pending") == "Bound"
	object.get(lease, ["metadata", "deletionTimestamp"], null) == null
} else := set() if {
	input.request.kind.kind == "MacOSInstance"
	input.request.operation == "UPDATE"
	lease := input.inventory.lease
	is_object(lease)
	object.get(lease, ["metadata", "namespace"], "") == object.get(input, ["object", "metadata", "namespace"], "")
	object.get(lease, ["metadata", "name"], "") == object.get(input, ["object", "spec", "leaseName"], "")
	object.get(input, ["object", "status", "nodeName"], "") == object.get(input, ["oldObject", "status", "nodeName"], "")
} else := checks

# Every check opens with the guard on the kind and the operation, which OPA's
# rule index decides before it evaluates a body, and reads the input
# directly: object.get(input, ["object", ...]) reads the object as lib.new
# would ({} where absent or null), without the cost of a virtual document.

checks contains {"code": code, "message": msg} if {
	input.request.kind.kind == "MacOSInstance"
	input.request.operation == "CREATE"

	# object.get, not input.inventory.lease: OPA would lift an undefined
	# reference out of the negation, and the body would fail.
	not is_object(object.get(input, ["inventory", "lease"], null))
	msg := sprintf("instance.tenant: lease %s not found in namespace %s", [lease_name, namespace])
}

# The supplied lease is in the instance's namespace, and is the one it names.

checks contains {"code": code, "message": msg} if {
	input.request.kind.kind == "MacOSInstance"
	input.request.operation in {"CREATE", "UPDATE"}
	lease := input.inventory.lease
	is_object(lease)
	lease_ns := object.get(lease, ["metadata", "namespace"], "")
	lease_ns != object.get(input, ["object", "metadata", "namespace"], "")
	msg := sprintf("instance.tenant: an instance in namespace %s cannot use lease %s/%s of another namespace", [namespace, lease_ns, object.get(lease, ["metadata", "name"], "")])
}

checks contains {"code": code, "message": msg} if {
	input.request.kind.kind == "MacOSInstance"
	input.request.operation in {"CREATE", "UPDATE"}
	lease := input.inventory.lease
	is_object(lease)
	supplied := object.get(lease, ["metadata", "name"], "")
	supplied != object.get(input, ["object", "spec", "leaseName"], "")
	msg := sprintf("instance.tenant: the instance names lease %s, but the lease supplied is %s", [lease_name, supplied])
}

# A new instance needs a Bound lease that is not being deleted.

checks contains {"code": code, "message": msg} if {
	input.request.kind.kind == "MacOSInstance"
	input.request.operation == "CREATE"
	lease := input.inventory.lease
	is_object(lease)
	phase := object.get(lease, ["status", "phase"], "Pending")
	phase != "Bound"
	msg := sprintf("instance.tenant: lease %s/%s is %s, not Bound; instances can be created only in a Bound lease", [namespace, lease_name, phase])
}

checks contains {"code": code, "message": msg} if {
	input.request.kind.kind == "MacOSInstance"
	input.request.operation == "CREATE"
	lease := input.inventory.lease
	is_object(lease)
	lease.metadata.deletionTimestamp != null
	object.get(lease, ["status", "phase"], "Pending") == "Bound"
	msg := sprintf("instance.tenant: lease %s/%s is being deleted; instances can be created only in a Bound lease", [namespace, lease_name])
}

# An instance is placed only on its lease's node.

checks contains {"code": code, "message": msg} if {
	input.request.kind.kind == "MacOSInstance"
	input.request.operation == "UPDATE"
	node := object.get(input, ["object", "status", "nodeName"], "")
	node != ""
	node != object.get(input, ["oldObject", "status", "nodeName"], "")
	lease_node := object.get(input, ["inventory", "lease", "status", "nodeName"], "")
	node != lease_node
	msg := sprintf("instance.tenant: instance %s/%s can be placed only on its lease's node %s, not %s", [namespace, object.get(lib.new, ["metadata", "name"], ""), lib.show(lease_node), node])
}

# For messages.

namespace := object.get(lib.new, ["metadata", "namespace"], "")

lease_name := object.get(lib.new, ["spec", "leaseName"], "")
