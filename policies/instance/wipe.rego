# METADATA
# title: instance.wipe
# description: |
#   Every instance disk is wiped before its instance goes. The
#   macrack.io/disk-wipe finalizer is removed only by the agent of the
#   instance's node, and only once the wipe is recorded in
#   status.runtime.wipedAt; or by the operator, which does so only for a
#   Retired chassis, recording the unwiped disk in the chassis' history.
# custom:
#   id: instance.wipe
#   kinds:
#   - compute.macrack.io/MacOSInstance
#   engines: [rego, cel]
#   params:
#   - agentsNamespace: the namespace of the agents' ServiceAccounts
#   - operatorUsername: the operator's own identity
package macrack.instance.wipe

import data.macrack.lib

code := "instance.wipe"

disk_wipe := "macrack.io/disk-wipe"

violations contains {"code": code, "message": msg} if {
	removes_disk_wipe
	not lib.is_operator
	not is_agent_of_node
	msg := sprintf("instance.wipe: only the agent of node %s may remove %s, not %s", [lib.show(node), disk_wipe, lib.username])
}

violations contains {"code": code, "message": msg} if {
	removes_disk_wipe
	is_agent_of_node
	not wiped
	msg := sprintf("instance.wipe: agent %s may remove %s only after recording the wipe in status.runtime.wipedAt", [node, disk_wipe])
}

removes_disk_wipe if {
	lib.operation == "UPDATE"
	disk_wipe in object.get(lib.old, ["metadata", "finalizers"], [])
	not disk_wipe in object.get(lib.new, ["metadata", "finalizers"], [])
}

# node is the node the instance was placed on, as stored.
node := object.get(lib.old, ["status", "nodeName"], "")

is_agent_of_node if {
	node != ""
	lib.username == concat("", ["system:serviceaccount:", lib.agents_namespace, ":agent-", node])
}

wiped if object.get(lib.new, ["status", "runtime", "wipedAt"], "") != ""
