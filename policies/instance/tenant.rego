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

namespace := object.get(lib.new, ["metadata", "namespace"], "")

lease_name := object.get(lib.new, ["spec", "leaseName"], "")

lease := object.get(input, ["inventory", "lease"], null)

# One guard on the kind and the operation (which OPA indexes), and then only
# the checks of that operation.
violations contains v if {
	input.request.kind.kind == "MacOSInstance"
	input.request.operation == "CREATE"
	some v in create_checks
}

violations contains v if {
	input.request.kind.kind == "MacOSInstance"
	input.request.operation == "UPDATE"
	some v in update_checks
}

deny(msg) := {"code": code, "message": msg}

create_checks contains deny(sprintf("instance.tenant: lease %s not found in namespace %s", [lease_name, namespace])) if {
	not is_object(lease)
}

create_checks contains v if {
	is_object(lease)
	some v in lease_checks
}

create_checks contains deny(sprintf("instance.tenant: lease %s/%s is %s, not Bound; instances can be created only in a Bound lease", [namespace, lease_name, phase])) if {
	is_object(lease)
	phase := object.get(lease, ["status", "phase"], "Pending")
	phase != "Bound"
}

create_checks contains deny(sprintf("instance.tenant: lease %s/%s is being deleted; instances can be created only in a Bound lease", [namespace, lease_name])) if {
	is_object(lease)
	lease.metadata.deletionTimestamp != null
	object.get(lease, ["status", "phase"], "Pending") == "Bound"
}

update_checks contains v if {
	is_object(lease)
	some v in lease_checks
}

update_checks contains deny(msg) if {
	node := object.get(lib.new, ["status", "nodeName"], "")
	node != ""
	node != object.get(lib.old, ["status", "nodeName"], "")
	lease_node := object.get(input, ["inventory", "lease", "status", "nodeName"], "")
	node != lease_node
	msg := sprintf("instance.tenant: instance %s/%s can be placed only on its lease's node %s, not %s", [namespace, object.get(lib.new, ["metadata", "name"], ""), lib.show(lease_node), node])
}

# lease_checks hold on a supplied lease: it is in the instance's namespace,
# and it is the one the instance names.
lease_checks contains deny(sprintf("instance.tenant: an instance in namespace %s cannot use lease %s/%s of another namespace", [namespace, lease_ns, object.get(lease, ["metadata", "name"], "")])) if {
	lease_ns := object.get(lease, ["metadata", "namespace"], "")
	lease_ns != namespace
}

lease_checks contains deny(sprintf("instance.tenant: the instance names lease %s, but the lease supplied is %s", [lease_name, supplied])) if {
	supplied := object.get(lease, ["metadata", "name"], "")
	supplied != lease_name
}
