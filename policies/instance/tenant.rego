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

is_instance if input.request.kind.kind == "MacOSInstance"

violations contains {"code": code, "message": msg} if {
	is_instance
	lib.operation == "CREATE"
	not is_object(lease)
	msg := sprintf("instance.tenant: lease %s not found in namespace %s", [lease_name, namespace])
}

violations contains {"code": code, "message": msg} if {
	is_instance
	lib.operation in {"CREATE", "UPDATE"}
	is_object(lease)
	lease_ns := object.get(lease, ["metadata", "namespace"], "")
	lease_ns != namespace
	msg := sprintf("instance.tenant: an instance in namespace %s cannot use lease %s/%s of another namespace", [namespace, lease_ns, object.get(lease, ["metadata", "name"], "")])
}

violations contains {"code": code, "message": msg} if {
	is_instance
	lib.operation in {"CREATE", "UPDATE"}
	is_object(lease)
	object.get(lease, ["metadata", "name"], "") != lease_name
	msg := sprintf("instance.tenant: the instance names lease %s, but the lease supplied is %s", [lease_name, object.get(lease, ["metadata", "name"], "")])
}

violations contains {"code": code, "message": msg} if {
	is_instance
	lib.operation == "CREATE"
	is_object(lease)
	phase := object.get(lease, ["status", "phase"], "Pending")
	phase != "Bound"
	msg := sprintf("instance.tenant: lease %s/%s is %s, not Bound; instances can be created only in a Bound lease", [namespace, lease_name, phase])
}

violations contains {"code": code, "message": msg} if {
	is_instance
	lib.operation == "CREATE"
	is_object(lease)
	object.get(lease, ["status", "phase"], "Pending") == "Bound"
	object.get(lease, ["metadata", "deletionTimestamp"], null) != null
	msg := sprintf("instance.tenant: lease %s/%s is being deleted; instances can be created only in a Bound lease", [namespace, lease_name])
}

violations contains {"code": code, "message": msg} if {
	is_instance
	lib.operation == "UPDATE"
	node := object.get(lib.new, ["status", "nodeName"], "")
	node != ""
	node != object.get(lib.old, ["status", "nodeName"], "")
	lease_node := object.get(input, ["inventory", "lease", "status", "nodeName"], "")
	node != lease_node
	msg := sprintf("instance.tenant: instance %s/%s can be placed only on its lease's node %s, not %s", [namespace, object.get(lib.new, ["metadata", "name"], ""), lib.show(lease_node), node])
}
