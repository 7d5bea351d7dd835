# METADATA
# title: agent.scope
# description: |
#   A host agent (the ServiceAccount "agent-" plus its node's name, in the agents' namespace) acts
#   only on its own chassis, and never on tenancy. On its Node: created only
#   with exactly the macrack.io/unleased taint among macrack.io/ taints and no
#   tenant label; afterwards no change to macrack.io/ taints or the tenant
#   label, and no delete. On its MacNode: only status.reported changes. On
#   instances placed on its node: only status.runtime and the
#   macrack.io/disk-wipe finalizer change. Leases: only its own node Lease in
#   kube-node-lease. Tokens: only for itself. Other requesters are not
#   concerned, but without the agents' namespace parameter every
#   ServiceAccount's request is denied.
# custom:
#   id: agent.scope
#   kinds:
#   - /Node
#   - fleet.macrack.io/MacNode
#   - compute.macrack.io/MacOSInstance
#   - coordination.k8s.io/Lease
#   - authentication.k8s.io/TokenRequest
#   engines: [rego, cel]
#   params:
#   - agentsNamespace: the namespace of the agents' ServiceAccounts
package macrack.agent.scope

import data.macrack.lib

code := "agent.scope"

# Every check opens with the guard on the request's kind (and, where it
# narrows, the operation), which OPA's rule index decides before it
# evaluates a body, and then binds the agent's node, which holds only for an
# agent. The checks read the input directly: object.get(input, ["object",
# ...]) reads the object as lib.new would ({} where absent or null), without
# the cost of a virtual document.

# node is the requesting agent's node: the ServiceAccount agent-<node> in the
# agents' namespace.
node := trim_prefix(user, prefix) if {
	user := input.request.userInfo.username
	ns := input.params.data.agentsNamespace
	is_string(ns)
	ns != ""
	prefix := concat("", ["system:serviceaccount:", ns, ":agent-"])
	startswith(user, prefix)
}

username := object.get(input, ["request", "userInfo", "username"], "")

# For a ServiceAccount, a missing agents' namespace parameter fails closed:
# absent or "" (object.get's default), or not a string. Two positive tests,
# as a negation costs a nested evaluation.
violations contains missing_namespace if {
	input.request.kind.kind in {"Node", "MacNode", "MacOSInstance", "Lease", "TokenRequest"}
	startswith(username, "system:serviceaccount:")
	object.get(input, ["params", "data", "agentsNamespace"], "") == ""
}

violations contains missing_namespace if {
	input.request.kind.kind in {"Node", "MacNode", "MacOSInstance", "Lease", "TokenRequest"}
	startswith(username, "system:serviceaccount:")
	is_string(object.get(input, ["params", "data", "agentsNamespace"], "")) == false
}

missing_namespace := {"code": code, "message": "agent.scope: the agents' namespace parameter (params.data.agentsNamespace) is not set"}

deny(msg) := {"code": code, "message": sprintf("agent.scope: agent %s %s", [node, msg])}

# name is the name of the object written (or, on DELETE, of the stored one).
name := n if {
	n := input.object.metadata.name
} else := object.get(input, ["oldObject", "metadata", "name"], "")

# Node: created only with exactly the macrack.io/unleased taint among
# macrack.io/ taints and no tenant label; afterwards no change to either, and
# no delete.

violations contains deny(sprintf("may not write Node %s", [name])) if {
	input.request.kind.kind == "Node"
	node
	name != node
}

violations contains deny("may not delete its Node") if {
	input.request.kind.kind == "Node"
	input.request.operation == "DELETE"
	node
}

violations contains deny(sprintf("must create its Node with exactly the macrack.io/unleased taint among macrack.io/ taints, not %v", [sort(keys)])) if {
	input.request.kind.kind == "Node"
	input.request.operation == "CREATE"
	node
	keys := {t.key |
		some t in object.get(input, ["object", "spec", "taints"], [])
		startswith(t.key, "macrack.io/")
	}
	keys != {"macrack.io/unleased"}
}

violations contains deny("may not set the macrack.io/tenant label") if {
	input.request.kind.kind == "Node"
	input.request.operation == "CREATE"
	node
	object.get(input, ["object", "metadata", "labels", "macrack.io/tenant"], null) != null
}

violations contains deny("may not change macrack.io/ taints on its Node") if {
	input.request.kind.kind == "Node"
	input.request.operation == "UPDATE"
	node
	lib.macrack_taints(lib.new) != lib.macrack_taints(lib.old)
}

violations contains deny("may not change the macrack.io/tenant label on its Node") if {
	input.request.kind.kind == "Node"
	input.request.operation == "UPDATE"
	node
	object.get(input, ["object", "metadata", "labels", "macrack.io/tenant"], null) != object.get(input, ["oldObject", "metadata", "labels", "macrack.io/tenant"], null)
}

# MacNode: only status.reported changes.

violations contains deny(sprintf("may not %s a MacNode", [lower(input.request.operation)])) if {
	input.request.kind.kind == "MacNode"
	input.request.operation in {"CREATE", "DELETE"}
	node
}

violations contains deny(sprintf("may not write MacNode %s", [name])) if {
	input.request.kind.kind == "MacNode"
	input.request.operation == "UPDATE"
	node
	name != node
}

violations contains deny(sprintf("may change only status.reported of its MacNode, not %s", [field])) if {
	input.request.kind.kind == "MacNode"
	input.request.operation == "UPDATE"
	node
	some field in changed_macnode_fields
}

operator_status_fields := ["phase", "observedGeneration", "conditions", "binding", "slots", "history"]

changed_macnode_fields contains "spec" if object.get(lib.new, "spec", {}) != object.get(lib.old, "spec", {})

changed_macnode_fields contains sprintf("status.%s", [f]) if {
	some f in operator_status_fields
	object.get(lib.new, ["status", f], null) != object.get(lib.old, ["status", f], null)
}

changed_macnode_fields contains sprintf("metadata.%s", [f]) if {
	some f in ["labels", "annotations", "finalizers", "ownerReferences"]
	meta_changed(f)
}

meta_changed(f) if {
	f in {"labels", "annotations"}
	object.get(lib.new, ["metadata", f], {}) != object.get(lib.old, ["metadata", f], {})
}

meta_changed(f) if {
	f in {"finalizers", "ownerReferences"}
	object.get(lib.new, ["metadata", f], []) != object.get(lib.old, ["metadata", f], [])
}

# MacOSInstance: only those placed on its node, and only status.runtime and
# the macrack.io/disk-wipe finalizer.

violations contains deny(sprintf("may not %s a MacOSInstance", [lower(input.request.operation)])) if {
	input.request.kind.kind == "MacOSInstance"
	input.request.operation in {"CREATE", "DELETE"}
	node
}

violations contains deny(sprintf("may write only instances placed on its node, not one on %s", [lib.show(placed)])) if {
	input.request.kind.kind == "MacOSInstance"
	input.request.operation == "UPDATE"
	node
	some placed in {object.get(input, ["oldObject", "status", "nodeName"], ""), object.get(input, ["object", "status", "nodeName"], "")}
	placed != node
}

violations contains deny(sprintf("may change only status.runtime and the macrack.io/disk-wipe finalizer of an instance, not %s", [field])) if {
	input.request.kind.kind == "MacOSInstance"
	input.request.operation == "UPDATE"
	node
	some field in changed_instance_fields
}

disk_wipe := "macrack.io/disk-wipe"

changed_instance_fields contains "spec" if object.get(lib.new, "spec", {}) != object.get(lib.old, "spec", {})

changed_instance_fields contains sprintf("status.%s", [f]) if {
	some f in ["nodeName", "observedGeneration", "conditions"]
	object.get(lib.new, ["status", f], null) != object.get(lib.old, ["status", f], null)
}

changed_instance_fields contains sprintf("metadata.%s", [f]) if {
	some f in ["labels", "annotations", "ownerReferences"]
	meta_changed(f)
}

changed_instance_fields contains "metadata.finalizers" if {
	other_finalizers(lib.new) != other_finalizers(lib.old)
}

other_finalizers(o) := [f | some f in object.get(o, ["metadata", "finalizers"], []); f != disk_wipe]

# coordination.k8s.io Lease: its heartbeat only.

violations contains deny(sprintf("may write only its own Lease kube-node-lease/%s, not %s/%s", [node, namespace, name])) if {
	input.request.kind.kind == "Lease"
	input.request.kind.group == "coordination.k8s.io"
	node
	namespace := object.get(input.request, "namespace", "")
	not own_node_lease(namespace)
}

own_node_lease(namespace) if {
	namespace == "kube-node-lease"
	name == node
}

# Tokens: for itself only.

violations contains deny(sprintf("may request tokens only for itself, not for %s/%s", [namespace, sa])) if {
	input.request.kind.kind == "TokenRequest"
	node
	namespace := object.get(input.request, "namespace", "")
	sa := object.get(input.request, "name", "")
	not own_service_account(namespace, sa)
}

own_service_account(namespace, sa) if {
	namespace == lib.agents_namespace
	sa == concat("", ["agent-", node])
}
