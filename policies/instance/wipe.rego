# METADATA
# title: instance.wipe
# description: |
#   Every instance disk is wiped before its instance goes. The
#   macrack.io/disk-wipe finalizer is removed only by the agent of the
#   instance's node, and only once the wipe is recorded in
#   status.runtime.wipedAt; or by the operator, which does so only once
#   that wipe is recorded, with its own audit finalizer, or for a Retired
#   chassis, recording the unwiped disk in the chassis' history.
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

violations contains {"code": code, "message": concat("", ["instance.wipe: ", problem])} if {
	input.request.kind.kind == "MacOSInstance"
	input.request.operation == "UPDATE"
	disk_wipe in lib.removed_finalizers
	some problem in problems
}

problems contains sprintf("only the agent of node %s may remove %s, not %s", [lib.show(node), disk_wipe, lib.username]) if {
	not lib.is_operator
	not lib.is_agent_of(node)
}

problems contains sprintf("agent %s may remove %s only after recording the wipe in status.runtime.wipedAt", [node, disk_wipe]) if {
	lib.is_agent_of(node)
	object.get(lib.new, ["status", "runtime", "wipedAt"], "") == ""
}

# node is the node the instance was placed on, as stored.
node := object.get(lib.old, ["status", "nodeName"], "")
