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

kind := input.request.kind.kind

node := lib.agent_node

is_agent if node

tenant_label := "macrack.io/tenant"

disk_wipe := "macrack.io/disk-wipe"

name := object.get(lib.new, ["metadata", "name"], object.get(lib.old, ["metadata", "name"], ""))

# Only ServiceAccounts can be agents, and only these kinds concern them; one
# guard, and then only the checks of the request's kind.
violations contains v if {
	startswith(lib.username, "system:serviceaccount:")
	kind in {"Node", "MacNode", "MacOSInstance", "Lease", "TokenRequest"}
	some v in checks
}

# For a ServiceAccount, a missing agents' namespace parameter fails closed.
checks contains {"code": code, "message": "agent.scope: the agents' namespace parameter (params.data.agentsNamespace) is not set"} if {
	not lib.agents_namespace
}

checks contains v if {
	is_agent
	kind == "Node"
	some v in node_checks
}

checks contains v if {
	is_agent
	kind == "MacNode"
	some v in macnode_checks
}

checks contains v if {
	is_agent
	kind == "MacOSInstance"
	some v in instance_checks
}

checks contains v if {
	is_agent
	kind == "Lease"
	some v in lease_checks
}

checks contains v if {
	is_agent
	kind == "TokenRequest"
	some v in token_checks
}

deny(msg) := {"code": code, "message": sprintf("agent.scope: agent %s %s", [node, msg])}

tenant_label_of(o) := object.get(o, ["metadata", "labels", tenant_label], null)

# Node

node_checks contains deny(sprintf("may not write Node %s", [name])) if {
	name != node
}

node_checks contains deny("may not delete its Node") if {
	lib.operation == "DELETE"
}

node_checks contains deny(sprintf("must create its Node with exactly the macrack.io/unleased taint among macrack.io/ taints, not %v", [sort(lib.macrack_taint_keys(lib.new))])) if {
	lib.operation == "CREATE"
	lib.macrack_taint_keys(lib.new) != {"macrack.io/unleased"}
}

node_checks contains deny("may not set the macrack.io/tenant label") if {
	lib.operation == "CREATE"
	tenant_label_of(lib.new) != null
}

node_checks contains deny("may not change macrack.io/ taints on its Node") if {
	lib.operation == "UPDATE"
	lib.macrack_taints(lib.new) != lib.macrack_taints(lib.old)
}

node_checks contains deny("may not change the macrack.io/tenant label on its Node") if {
	lib.operation == "UPDATE"
	tenant_label_of(lib.new) != tenant_label_of(lib.old)
}

# MacNode

macnode_checks contains deny(sprintf("may not %s a MacNode", [lower(lib.operation)])) if {
	lib.operation in {"CREATE", "DELETE"}
}

macnode_checks contains deny(sprintf("may not write MacNode %s", [name])) if {
	lib.operation == "UPDATE"
	name != node
}

operator_status_fields := ["phase", "observedGeneration", "conditions", "binding", "slots", "history"]

macnode_checks contains deny(sprintf("may change only status.reported of its MacNode, not %s", [field])) if {
	lib.operation == "UPDATE"
	some field in changed_macnode_fields
}

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

# MacOSInstance

instance_checks contains deny(sprintf("may not %s a MacOSInstance", [lower(lib.operation)])) if {
	lib.operation in {"CREATE", "DELETE"}
}

instance_checks contains deny(sprintf("may write only instances placed on its node, not one on %s", [lib.show(placed)])) if {
	lib.operation == "UPDATE"
	some placed in {object.get(lib.old, ["status", "nodeName"], ""), object.get(lib.new, ["status", "nodeName"], "")}
	placed != node
}

instance_checks contains deny(sprintf("may change only status.runtime and the macrack.io/disk-wipe finalizer of an instance, not %s", [field])) if {
	lib.operation == "UPDATE"
	some field in changed_instance_fields
}

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

lease_checks contains deny(sprintf("may write only its own Lease kube-node-lease/%s, not %s/%s", [node, namespace, name])) if {
	input.request.kind.group == "coordination.k8s.io"
	namespace := object.get(input.request, "namespace", "")
	not own_node_lease(namespace)
}

own_node_lease(namespace) if {
	namespace == "kube-node-lease"
	name == node
}

# Tokens: for itself only.

token_checks contains deny(sprintf("may request tokens only for itself, not for %s/%s", [namespace, sa])) if {
	namespace := object.get(input.request, "namespace", "")
	sa := object.get(input.request, "name", "")
	not own_service_account(namespace, sa)
}

own_service_account(namespace, sa) if {
	namespace == lib.agents_namespace
	sa == concat("", ["agent-", node])
}
