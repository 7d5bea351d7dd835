# METADATA
# title: agent.scope
# description: |
#   Identities of the agents' namespace act only as enrolled host agents,
#   each only on its own chassis, and never on tenancy. The agent of a node
#   is the ServiceAccount agent-<node> there; any other identity of the
#   namespace may write nothing. On its Node: created only with exactly the
#   macrack.io/unleased taint among macrack.io/ taints and no tenant label;
#   afterwards no change to macrack.io/ taints or the tenant label, and no
#   delete. On its MacNode: only status.reported changes. On instances placed
#   on its node: only status.runtime and the macrack.io/disk-wipe finalizer
#   change. Leases: only its own node Lease in kube-node-lease. Tokens: only
#   for itself, for the API server's audiences, for at most 24 hours. Events:
#   only about its own Node and MacNode.
#   Requests from outside the agents' namespace are not concerned.
# custom:
#   id: agent.scope
#   kinds:
#   - /Node
#   - fleet.macrack.io/MacNode
#   - compute.macrack.io/MacOSInstance
#   - coordination.k8s.io/Lease
#   - authentication.k8s.io/TokenRequest
#   - /Event
#   - events.k8s.io/Event
#   engines: [rego, cel]
#   params:
#   - agentsNamespace: the namespace of the agents' ServiceAccounts
#   - agentTokenAudiences: the API server's audiences, comma-separated
package macrack.agent.scope

import data.macrack.lib

code := "agent.scope"

max_token_seconds := 86400 # 24h

violations contains {"code": code, "message": msg} if {
	from_agents_namespace
	not node
	msg := sprintf("agent.scope: %s is not the agent of a node (agent-<node>) and may write nothing", [lib.username])
}

violations contains {"code": code, "message": sprintf("agent.scope: agent %s %s", [node, problem])} if {
	node
	some problem in problems
}

# Who asks. The operator writes the agents' namespace into the policy it
# applies; without one, no request is an agent's.

agents_namespace := object.get(input, ["params", "data", "agentsNamespace"], "")

from_agents_namespace if {
	agents_namespace != ""
	concat("", ["system:serviceaccounts:", agents_namespace]) in object.get(input, ["request", "userInfo", "groups"], [])
}

from_agents_namespace if {
	agents_namespace != ""
	startswith(lib.username, concat("", ["system:serviceaccount:", agents_namespace, ":"]))
}

agent_prefix := concat("", ["system:serviceaccount:", agents_namespace, ":agent-"])

# node is the requester's node, when the requester is the agent of one.
node := n if {
	from_agents_namespace
	startswith(lib.username, agent_prefix)
	n := trim_prefix(lib.username, agent_prefix)
	n != ""
}

kind := input.request.kind.kind

# name is the name of the object written (or, on DELETE, of the stored one).
name := object.get(lib.new, ["metadata", "name"], object.get(lib.old, ["metadata", "name"], ""))

# Node: registered once, then only the agent's own facts.

problems contains sprintf("may not write Node %s", [name]) if {
	kind == "Node"
	name != node
}

problems contains "may not delete its Node" if {
	kind == "Node"
	lib.operation == "DELETE"
}

problems contains sprintf("must create its Node with exactly the macrack.io/unleased taint among macrack.io/ taints, not %v", [sort(keys)]) if {
	kind == "Node"
	lib.operation == "CREATE"
	keys := {t.key | some t in taints(lib.new); startswith(t.key, "macrack.io/")}
	keys != {"macrack.io/unleased"}
}

problems contains "may not set the macrack.io/tenant label" if {
	kind == "Node"
	lib.operation == "CREATE"
	tenant_label(lib.new) != null
}

problems contains "may not change macrack.io/ taints on its Node" if {
	kind == "Node"
	lib.operation == "UPDATE"
	lib.macrack_taints(lib.new) != lib.macrack_taints(lib.old)
}

problems contains "may not change the macrack.io/tenant label on its Node" if {
	kind == "Node"
	lib.operation == "UPDATE"
	tenant_label(lib.new) != tenant_label(lib.old)
}

taints(n) := object.get(n, ["spec", "taints"], [])

tenant_label(n) := object.get(n, ["metadata", "labels", "macrack.io/tenant"], null)

# MacNode: only status.reported of its own.

problems contains sprintf("may not %s a MacNode", [lower(lib.operation)]) if {
	kind == "MacNode"
	lib.operation in {"CREATE", "DELETE"}
}

problems contains sprintf("may not write MacNode %s", [name]) if {
	kind == "MacNode"
	lib.operation == "UPDATE"
	name != node
}

problems contains sprintf("may change only status.reported of its MacNode, not %s", [field]) if {
	kind == "MacNode"
	lib.operation == "UPDATE"
	fields := (changed_spec | changed_status(operator_status)) | changed_metadata({"labels", "annotations", "finalizers", "ownerReferences"})
	some field in fields
}

# operator_status are the MacNode status fields the operator owns.
operator_status := {"phase", "observedGeneration", "conditions", "binding", "slots", "history"}

# MacOSInstance: only those placed on its node, and only status.runtime and
# the macrack.io/disk-wipe finalizer.

problems contains sprintf("may not %s a MacOSInstance", [lower(lib.operation)]) if {
	kind == "MacOSInstance"
	lib.operation in {"CREATE", "DELETE"}
}

problems contains sprintf("may write only instances placed on its node, not one on %s", [lib.show(placed)]) if {
	kind == "MacOSInstance"
	lib.operation == "UPDATE"
	some placed in {object.get(lib.old, ["status", "nodeName"], ""), object.get(lib.new, ["status", "nodeName"], "")}
	placed != node
}

problems contains sprintf("may change only status.runtime and the macrack.io/disk-wipe finalizer of an instance, not %s", [field]) if {
	kind == "MacOSInstance"
	lib.operation == "UPDATE"
	fields := ((changed_spec | changed_status({"nodeName", "observedGeneration", "conditions"})) | changed_metadata({"labels", "annotations", "ownerReferences"})) | changed_other_finalizers
	some field in fields
}

changed_other_finalizers := {"metadata.finalizers"} if {
	other_finalizers(lib.new) != other_finalizers(lib.old)
} else := set()

other_finalizers(o) := [f | some f in object.get(o, ["metadata", "finalizers"], []); f != "macrack.io/disk-wipe"]

# What an update changed: the spec, the named status fields, the named
# metadata fields (absent is the same as empty).

changed_spec := {"spec"} if {
	object.get(lib.new, "spec", {}) != object.get(lib.old, "spec", {})
} else := set()

changed_status(fields) := {sprintf("status.%s", [f]) |
	some f in fields
	object.get(lib.new, ["status", f], null) != object.get(lib.old, ["status", f], null)
}

changed_metadata(fields) := {sprintf("metadata.%s", [f]) |
	some f in fields
	object.get(lib.new, ["metadata", f], empty_metadata[f]) != object.get(lib.old, ["metadata", f], empty_metadata[f])
}

empty_metadata := {"labels": {}, "annotations": {}, "finalizers": [], "ownerReferences": []}

# coordination.k8s.io Lease: its heartbeat only.

problems contains sprintf("may write only its own Lease kube-node-lease/%s, not %s/%s", [node, namespace, name]) if {
	kind == "Lease"
	input.request.kind.group == "coordination.k8s.io"
	namespace := object.get(input.request, "namespace", "")
	not own_node_lease(namespace)
}

own_node_lease(namespace) if {
	namespace == "kube-node-lease"
	name == node
}

# Tokens: for itself only, for the API server's audiences, for at most 24h.

problems contains sprintf("may request tokens only for itself, not for %s/%s", [namespace, sa]) if {
	kind == "TokenRequest"
	namespace := object.get(input.request, "namespace", "")
	sa := object.get(input.request, "name", "")
	not own_service_account(namespace, sa)
}

own_service_account(namespace, sa) if {
	namespace == agents_namespace
	sa == concat("", ["agent-", node])
}

problems contains sprintf("may request tokens only for the API server's audiences %v, not %v", [sort(api_audiences), sort(audiences)]) if {
	kind == "TokenRequest"
	audiences := {a | some a in object.get(lib.new, ["spec", "audiences"], [])}
	audiences != api_audiences
}

api_audiences := {a |
	some listed in split(object.get(input, ["params", "data", "agentTokenAudiences"], ""), ",")
	a := trim_space(listed)
	a != ""
}

problems contains sprintf("may request tokens for at most %ds, not %s", [max_token_seconds, lib.show(seconds)]) if {
	kind == "TokenRequest"
	seconds := object.get(lib.new, ["spec", "expirationSeconds"], "unset")
	not token_within_bound(seconds)
}

token_within_bound(seconds) if {
	is_number(seconds)
	seconds <= max_token_seconds
}

# Events: only about its own Node and MacNode (core Events name their
# subject involvedObject, events.k8s.io ones regarding).

problems contains sprintf("may write Events only about its own Node and MacNode, not %s %s", [object.get(subject, "kind", ""), object.get(subject, "name", "")]) if {
	kind == "Event"
	lib.operation in {"CREATE", "UPDATE"}
	subject := event_subject
	not own_chassis(subject)
}

event_subject := object.get(lib.new, "regarding", {}) if {
	input.request.kind.group == "events.k8s.io"
} else := object.get(lib.new, "involvedObject", {})

own_chassis(subject) if {
	object.get(subject, "kind", "") in {"Node", "MacNode"}
	object.get(subject, "name", "") == node
	object.get(subject, "namespace", "") == ""
}
