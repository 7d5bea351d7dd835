# METADATA
# title: instance.tenant
# description: |
#   An instance lives inside its tenant's lease. A new instance names a lease
#   in its own namespace that is Bound (not Pending, Held, Released or being
#   deleted). An instance is placed only on its own lease's node, and only
#   while that lease is Bound and not being deleted.
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

violations contains {"code": code, "message": concat("", ["instance.tenant: ", problem])} if {
	input.request.kind.kind == "MacOSInstance"
	some problem in problems
}

problems contains problem if {
	input.request.operation == "CREATE"
	some problem in creation_problems
}

problems contains problem if {
	input.request.operation in {"CREATE", "UPDATE"}
	some problem in lease_problems
}

problems contains problem if {
	input.request.operation == "UPDATE"
	some problem in placement_problems
}

# A new instance names a lease that exists, is Bound, and is not being deleted.

creation_problems contains sprintf("lease %s not found in namespace %s", [lease_name, namespace]) if not is_object(object.get(input, ["inventory", "lease"], null))

creation_problems contains sprintf("lease %s/%s is %s, not Bound; instances can be created only in a Bound lease", [namespace, lease_name, phase]) if {
	phase := object.get(lease, ["status", "phase"], "Pending")
	phase != "Bound"
}

creation_problems contains sprintf("lease %s/%s is being deleted; instances can be created only in a Bound lease", [namespace, lease_name]) if {
	object.get(lease, ["metadata", "deletionTimestamp"], null) != null
	object.get(lease, ["status", "phase"], "Pending") == "Bound"
}

# The lease supplied is the one the instance names, in its own namespace.

lease_problems contains sprintf("an instance in namespace %s cannot use lease %s/%s of another namespace", [namespace, lease_ns, object.get(lease, ["metadata", "name"], "")]) if {
	lease_ns := object.get(lease, ["metadata", "namespace"], "")
	lease_ns != namespace
}

lease_problems contains sprintf("the instance names lease %s, but the lease supplied is %s", [lease_name, supplied]) if {
	supplied := object.get(lease, ["metadata", "name"], "")
	supplied != lease_name
}

# An instance is placed only on its lease's node.

placement_problems contains sprintf("instance %s/%s can be placed only on its lease's node %s, not %s", [namespace, object.get(lib.new, ["metadata", "name"], ""), lib.show(lease_node), node]) if {
	node := lib.newly_placed_on
	lease_node := object.get(input, ["inventory", "lease", "status", "nodeName"], "")
	node != lease_node
}

# An instance is placed only while its lease is Bound and not being deleted:
# a lease deleted as its instance was created holds its chassis (Held) for
# the tenant's bill, not for new work.

placement_problems contains sprintf("lease %s/%s is %s; instance %s/%s is placed only while its lease is Bound", [namespace, lease_name, state, namespace, object.get(lib.new, ["metadata", "name"], "")]) if {
	lib.newly_placed_on
	some state in lease_unbound
}

# lease_unbound says how the lease supplied is not Bound, if it is not.
lease_unbound contains sprintf("%s, not Bound", [phase]) if {
	phase := object.get(lease, ["status", "phase"], "Pending")
	phase != "Bound"
}

lease_unbound contains "being deleted" if {
	object.get(lease, ["metadata", "deletionTimestamp"], null) != null
	object.get(lease, ["status", "phase"], "Pending") == "Bound"
}

# lease is the lease the inventory supplies; undefined when there is none.
lease := l if {
	l := input.inventory.lease
	is_object(l)
}

namespace := object.get(lib.new, ["metadata", "namespace"], "")

lease_name := object.get(lib.new, ["spec", "leaseName"], "")
