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

# violations: none for an agent's routine writes and for anyone who is not an
# agent, else the checks one by one. Each routine clause is sufficient for
# "no check fires", and opens with the request's kind and operation, so a
# clause for another kind fails at its first expression. In order: an agent
# creates its Node as it registers it (the macrack.io/unleased taint as its
# only taint, no tenant label; other taints go through the checks); updates
# its Node with the same taints and tenant label; reports on its MacNode;
# reports on an instance placed on its node; renews its node Lease; then a
# requester who is not an agent (the parameter set), or not a ServiceAccount
# at all. The agent test compares the username with the one its node's agent
# has. (An else chain, not a negation, which would cost a nested evaluation;
# no helper rule or function, as a reference costs more than the expressions
# it holds; and no comprehension where a plain test suffices.)
violations := set() if {
	input.request.kind.kind == "Node"
	input.request.operation == "CREATE"
	ns := input.params.data.agentsNamespace
	is_string(ns)
	ns != ""
	is_string(input.object.metadata.name)
	input.request.userInfo.username == concat("", ["system:serviceaccount:", ns, ":agent-", input.object.metadata.name])
	count(input.object.spec.taints) == 1
	input.object.spec.taints[0].key == "macrack.io/unleased"
	object.get(input, ["object", "metadata", "labels", "macrack.io/tenant"], null) == null
} else := set() if {
	input.request.kind.kind == "Node"
	input.request.operation == "UPDATE"
	ns := input.params.data.agentsNamespace
	is_string(ns)
	ns != ""
	is_string(input.object.metadata.name)
	input.request.userInfo.username == concat("", ["system:serviceaccount:", ns, ":agent-", input.object.metadata.name])
	object.get(input, ["object", "spec", "taints"], []) == object.get(input, ["oldObject", "spec", "taints"], [])
	object.get(input, ["object", "metadata", "labels", "macrack.io/tenant"], null) == object.get(input, ["oldObject", "metadata", "labels", "macrack.io/tenant"], null)
} else := set() if {
	input.request.kind.kind == "MacNode"
	input.request.operation == "UPDATE"
	ns := input.params.data.agentsNamespace
	is_string(ns)
	ns != ""
	is_string(input.object.metadata.name)
	input.request.userInfo.username == concat("", ["system:serviceaccount:", ns, ":agent-", input.object.metadata.name])
	count(changed_macnode_fields) == 0
} else := set() if {
	input.request.kind.kind == "MacOSInstance"
	input.request.operation == "UPDATE"
	nodeName := input.object.status.nodeName
	ns := input.params.data.agentsNamespace
	is_string(ns)
	ns != ""
	is_string(nodeName)
	input.request.userInfo.username == concat("", ["system:serviceaccount:", ns, ":agent-", nodeName])
	nodeName == input.oldObject.status.nodeName
	count(changed_instance_fields) == 0
} else := set() if {
	input.request.kind.kind == "Lease"
	input.request.kind.group == "coordination.k8s.io"
	input.request.namespace == "kube-node-lease"
	ns := input.params.data.agentsNamespace
	is_string(ns)
	ns != ""
	is_string(input.object.metadata.name)
	input.request.userInfo.username == concat("", ["system:serviceaccount:", ns, ":agent-", input.object.metadata.name])
} else := set() if {
	ns := input.params.data.agentsNamespace
	is_string(ns)
	ns != ""
	startswith(input.request.userInfo.username, concat("", ["system:serviceaccount:", ns, ":agent-"])) == false
} else := set() if {
	startswith(input.request.userInfo.username, "system:serviceaccount:") == false
} else := checks

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
checks contains missing_namespace if {
	input.request.kind.kind in {"Node", "MacNode", "MacOSInstance", "Lease", "TokenRequest"}
	startswith(username, "system:serviceaccount:")
	object.get(input, ["params", "data", "agentsNamespace"], "") == ""
}

checks contains missing_namespace if {
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

checks contains deny(sprintf("may not write Node %s", [name])) if {
	input.request.kind.kind == "Node"
	node
	name != node
}

checks contains deny("may not delete its Node") if {
	input.request.kind.kind == "Node"
	input.request.operation == "DELETE"
	node
}

checks contains deny(sprintf("must create its Node with exactly the macrack.io/unleased taint among macrack.io/ taints, not %v", [sort(keys)])) if {
	input.request.kind.kind == "Node"
	input.request.operation == "CREATE"
	node
	keys := {t.key |
		some t in object.get(input, ["object", "spec", "taints"], [])
		startswith(t.key, "macrack.io/")
	}
	keys != {"macrack.io/unleased"}
}

checks contains deny("may not set the macrack.io/tenant label") if {
	input.request.kind.kind == "Node"
	input.request.operation == "CREATE"
	node
	object.get(input, ["object", "metadata", "labels", "macrack.io/tenant"], null) != null
}

checks contains deny("may not change macrack.io/ taints on its Node") if {
	input.request.kind.kind == "Node"
	input.request.operation == "UPDATE"
	node
	lib.macrack_taints(lib.new) != lib.macrack_taints(lib.old)
}

checks contains deny("may not change the macrack.io/tenant label on its Node") if {
	input.request.kind.kind == "Node"
	input.request.operation == "UPDATE"
	node
	object.get(input, ["object", "metadata", "labels", "macrack.io/tenant"], null) != object.get(input, ["oldObject", "metadata", "labels", "macrack.io/tenant"], null)
}

# MacNode: only status.reported changes.

checks contains deny(sprintf("may not %s a MacNode", [lower(input.request.operation)])) if {
	input.request.kind.kind == "MacNode"
	input.request.operation in {"CREATE", "DELETE"}
	node
}

checks contains deny(sprintf("may not write MacNode %s", [name])) if {
	input.request.kind.kind == "MacNode"
	input.request.operation == "UPDATE"
	node
	name != node
}

checks contains deny(sprintf("may change only status.reported of its MacNode, not %s", [field])) if {
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

checks contains deny(sprintf("may not %s a MacOSInstance", [lower(input.request.operation)])) if {
	input.request.kind.kind == "MacOSInstance"
	input.request.operation in {"CREATE", "DELETE"}
	node
}

checks contains deny(sprintf("may write only instances placed on its node, not one on %s", [lib.show(placed)])) if {
	input.request.kind.kind == "MacOSInstance"
	input.request.operation == "UPDATE"
	node
	some placed in {object.get(input, ["oldObject", "status", "nodeName"], ""), object.get(input, ["object", "status", "nodeName"], "")}
	placed != node
}

checks contains deny(sprintf("may change only status.runtime and the macrack.io/disk-wipe finalizer of an instance, not %s", [field])) if {
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

checks contains deny(sprintf("may write only its own Lease kube-node-lease/%s, not %s/%s", [node, namespace, name])) if {
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

checks contains deny(sprintf("may request tokens only for itself, not for %s/%s", [namespace, sa])) if {
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
