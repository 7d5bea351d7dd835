# METADATA
# title: instance.cap
# description: |
#   A chassis runs at most vmCapacity macOS VMs, and never more than two (the
#   kernel's hv_apple_isa_vm_quota). The cap holds per lease, per node, and on
#   the MacNode's slots. An instance is live, and counts, until the agent
#   reports it Stopped; a Stopping instance counts, and so does one the
#   webhook has admitted that is not stored yet (the lease's reservations,
#   which only the operator writes, as their list version). A workload that keeps a pool of VMs (a
#   GitLabRunner's concurrency) asks for no more than the cap.
# custom:
#   id: instance.cap
#   kinds:
#   - compute.macrack.io/MacOSInstance
#   - leasing.macrack.io/MacNodeLease
#   - fleet.macrack.io/MacNode
#   - workloads.macrack.io/GitLabRunner
#   engines: [rego]
#   inventory:
#   - nodeClass: the class of the lease's (or the node's, or the GitLabRunner's lease's) chassis
#   - leaseInstances: the instances of the lease (index instances-by-lease; read live for a new instance)
#   - leaseReservations: the instances the webhook admitted on the lease that are not stored yet, read live
#   - nodeInstances: the instances placed on the node (index instances-by-node)
package macrack.instance.cap

import data.macrack.lib

code := "instance.cap"

cap := lib.vm_capacity

# A lease runs at most cap live instances, counting those admitted and not
# stored yet.
violations contains {"code": code, "message": msg} if {
	input.request.kind.kind == "MacOSInstance"
	input.request.operation == "CREATE"
	live := array.concat(others(object.get(input, ["inventory", "leaseInstances"], [])), reserved)
	count(live) >= cap
	msg := sprintf("instance.cap: lease %s already has %d live instances (%s); a chassis runs at most %d", [
		object.get(lib.new, ["spec", "leaseName"], "?"), count(live), concat(", ", sort(live)), cap,
	])
}

# Only the operator, whose webhook admits instances, writes a lease's
# reservations and the list version they were decided on.
violations contains {"code": code, "message": msg} if {
	input.request.kind.kind == "MacNodeLease"
	input.request.operation in {"CREATE", "UPDATE"}
	some field in ["reservations", "reservationsListVersion"]
	lib.changed(["status", field])
	not lib.is_operator
	msg := sprintf("instance.cap: only the operator's admission webhook writes status.%s of lease %s, not %s", [field, name, lib.username])
}

# A node runs at most cap live instances.
violations contains {"code": code, "message": msg} if {
	input.request.kind.kind == "MacOSInstance"
	input.request.operation == "UPDATE"
	node := lib.newly_placed_on
	live := others(object.get(input, ["inventory", "nodeInstances"], []))
	count(live) >= cap
	msg := sprintf("instance.cap: node %s already runs %d live instances (%s); it runs at most %d", [node, count(live), concat(", ", sort(live)), cap])
}

# A MacNode has at most cap slots.
violations contains {"code": code, "message": msg} if {
	input.request.kind.kind == "MacNode"
	input.request.operation in {"CREATE", "UPDATE"}
	slots := object.get(lib.new, ["status", "slots"], [])
	count(slots) > cap
	msg := sprintf("instance.cap: MacNode %s has %d slots; its class allows at most %d", [name, count(slots), cap])
}

# A GitLabRunner runs at most cap jobs at once, each in its own VM. Its
# lease's class is the cap; with the lease not found yet, the kernel's two,
# and the controller keeps the pool within the class at run time.
violations contains {"code": code, "message": msg} if {
	input.request.kind.kind == "GitLabRunner"
	input.request.operation in {"CREATE", "UPDATE"}
	want := object.get(lib.new, ["spec", "concurrency"], 1)
	want > cap
	msg := sprintf("instance.cap: GitLabRunner %s asks for concurrency %d, but lease %s's class %s runs at most %d VMs per chassis", [
		name, want, object.get(lib.new, ["spec", "leaseName"], "?"),
		object.get(input, ["inventory", "nodeClass", "metadata", "name"], "?"), cap,
	])
}

# others are the names of the live instances in list, other than the one
# being written.
others(list) := [sprintf("%s", [i.metadata.name]) |
	some i in list
	lib.live(i)
	not same_instance(i)
]

# reserved are the instances the webhook admitted on the lease and the API
# server has not stored yet, other than the one being written.
reserved := [sprintf("%s (admitted, not stored yet)", [r.name]) |
	some r in object.get(input, ["inventory", "leaseReservations"], [])
	r.uid != uid
]

same_instance(i) if {
	uid != ""
	is_object(i)
	object.get(i, ["metadata", "uid"], "") == uid
}

same_instance(i) if {
	uid == ""
	is_object(i)
	object.get(i, ["metadata", "name"], "") == name
	object.get(i, ["metadata", "namespace"], "") == object.get(lib.new, ["metadata", "namespace"], "")
}

uid := object.get(lib.new, ["metadata", "uid"], "")

name := object.get(lib.new, ["metadata", "name"], "")
