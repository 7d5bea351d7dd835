# METADATA
# title: agent.scope
# description: |
#   Identities of the agents' namespace act only as enrolled host agents,
#   each only on its own chassis, and never on tenancy. The agent of a node
#   is the ServiceAccount agent-<node> there; any other identity of the
#   namespace may write nothing. On its Node: created only with exactly the
#   macrack.io/unleased taint among macrack.io/ taints and no macrack.io/
#   label, address or Ready condition; afterwards no change to macrack.io/
#   taints, labels, its addresses or its Ready condition, and no delete: the
#   operator writes every macrack.io/ label of a Node, its address, where
#   the API server sends exec, and its Ready condition True or False
#   (kube-controller-manager writes Unknown); the agent's facts (capacity,
#   kubelet port, other conditions) stay its own. On its MacNode: only
#   status.reported changes. On instances placed on its node: only
#   status.runtime and the macrack.io/disk-wipe finalizer change. Leases:
#   only its own node Lease in kube-node-lease. Tokens: only for itself, for
#   the API server's audiences, for at most 24 hours. Secrets: none of the
#   type kubernetes.io/service-account-token, whose token never expires.
#   Events: only about its own Node and MacNode. CertificateSigningRequests:
#   only created, only of the signer macrack.io/kubelet-serving, and named
#   kubelet-serving-<node>-<hash>: the operator approves one only for the
#   agent's own Node and enrolled address.
#   Requests from outside the agents' namespace are not concerned.
#   Which layer proves what: the VAP and this rule both know an agent by its
#   name alone (lib.is_agent_of), as neither reads an inventory here; the
#   name is an enrolled chassis' because enrolment creates the
#   ServiceAccount agent-<serial>, and neither could tell one that anyone
#   else created there. At the API server the VAP refuses every
#   kind above; the webhook, which receives MacNodes and instances and no
#   core kind, refuses those a second time. TokenReviews and
#   SubjectAccessReviews are not here: the API server runs no admission on
#   them, VAP or webhook, so RBAC alone decides who creates them.
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
#   - certificates.k8s.io/CertificateSigningRequest
#   - /Secret
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
	some problem in problems[input.request.kind.kind]
}

# Who asks. The operator writes the agents' namespace into the policy it
# applies; without one, no request is an agent's.

from_agents_namespace if concat("", ["system:serviceaccounts:", lib.agents_namespace]) in object.get(input, ["request", "userInfo", "groups"], [])

from_agents_namespace if startswith(lib.username, concat("", ["system:serviceaccount:", lib.agents_namespace, ":"]))

# node is the requester's node, when the requester is the agent of one.
node := n if {
	from_agents_namespace
	n := trim_prefix(lib.username, agent_prefix)
	lib.is_agent_of(n)
}

agent_prefix := concat("", ["system:serviceaccount:", lib.agents_namespace, ":agent-"])

# name is the name of the object written (or, on DELETE, of the stored one).
name := object.get(lib.new, ["metadata", "name"], object.get(lib.old, ["metadata", "name"], ""))

# MacNodes and instances are the operator's to create and delete.
problems[kind] contains sprintf("may not %s a %s", [lower(lib.operation), kind]) if {
	some kind in {"MacNode", "MacOSInstance"}
	input.request.operation in {"CREATE", "DELETE"}
}

# Node: its own, registered once with only the unleased taint, then only
# the agent's own facts.

problems.Node contains sprintf("may not write Node %s", [name]) if name != node

problems.Node contains "may not delete its Node" if input.request.operation == "DELETE"

problems.Node contains problem if {
	input.request.operation == "CREATE"
	some problem in node_registration_problems
}

problems.Node contains problem if {
	input.request.operation == "UPDATE"
	some problem in node_update_problems
}

node_registration_problems contains sprintf("must create its Node with exactly the macrack.io/unleased taint among macrack.io/ taints, not %v", [sort(keys)]) if {
	keys := {t.key | some t in object.get(lib.new, ["spec", "taints"], []); startswith(t.key, "macrack.io/")}
	keys != {"macrack.io/unleased"}
}

node_registration_problems contains sprintf("may not set macrack.io/ labels on its Node, not %s", [concat(", ", sort(keys))]) if {
	keys := macrack_labels(lib.new)
	count(keys) > 0
}

node_registration_problems contains "may not set its Node's addresses: the operator publishes the enrolled address" if {
	count(object.get(lib.new, ["status", "addresses"], [])) > 0
}

node_registration_problems contains "may not set its Node's Ready condition: the operator writes it" if {
	count(ready_conditions(lib.new)) > 0
}

node_update_problems contains "may not change macrack.io/ taints on its Node" if lib.macrack_taints(lib.new) != lib.macrack_taints(lib.old)

node_update_problems contains "may not change its Node's addresses: the operator publishes the enrolled address" if {
	object.get(lib.new, ["status", "addresses"], []) != object.get(lib.old, ["status", "addresses"], [])
}

node_update_problems contains "may not change its Node's Ready condition: the operator writes it" if {
	ready_conditions(lib.new) != ready_conditions(lib.old)
}

node_update_problems contains sprintf("may not change macrack.io/ labels on its Node, not %s", [concat(", ", sort(keys))]) if {
	keys := {k |
		some k in (macrack_labels(lib.new) | macrack_labels(lib.old))
		object.get(lib.new, ["metadata", "labels", k], null) != object.get(lib.old, ["metadata", "labels", k], null)
	}
	count(keys) > 0
}

# ready_conditions are o's conditions of type Ready, as written: a change
# of any of their fields is a change.
ready_conditions(o) := [c | some c in object.get(o, ["status", "conditions"], []); object.get(c, "type", "") == "Ready"]

# macrack_labels are the keys of o's macrack.io/ labels.
macrack_labels(o) := {k | some k, _ in object.get(o, ["metadata", "labels"], {}); startswith(k, "macrack.io/")}

# MacNode: only status.reported of its own.

problems.MacNode contains problem if {
	input.request.operation == "UPDATE"
	some problem in macnode_update_problems
}

macnode_update_problems contains sprintf("may not write MacNode %s", [name]) if name != node

macnode_update_problems contains sprintf("may change only status.reported of its MacNode, not %s", [field]) if {
	some field in changed_fields({"phase", "observedGeneration", "conditions", "binding", "slots", "history", "unwipedDisks", "quarantine", "recentQuarantines", "audit"}, {"labels", "annotations", "finalizers", "ownerReferences"})
}

# MacOSInstance: only those placed on its node, and only status.runtime and
# the macrack.io/disk-wipe finalizer.

problems.MacOSInstance contains problem if {
	input.request.operation == "UPDATE"
	some problem in instance_update_problems
}

instance_update_problems contains sprintf("may write only instances placed on its node, not one on %s", [lib.show(placed)]) if {
	some placed in {object.get(lib.old, ["status", "nodeName"], ""), object.get(lib.new, ["status", "nodeName"], "")}
	placed != node
}

instance_update_problems contains sprintf("may change only status.runtime and the macrack.io/disk-wipe finalizer of an instance, not %s", [field]) if {
	some field in (changed_fields({"nodeName", "observedGeneration", "conditions"}, {"labels", "annotations", "ownerReferences"}) | changed_other_finalizers)
}

changed_other_finalizers := {"metadata.finalizers"} if {
	other_finalizers(lib.new) != other_finalizers(lib.old)
} else := set()

other_finalizers(o) := [f | some f in object.get(o, ["metadata", "finalizers"], []); f != "macrack.io/disk-wipe"]

# changed_fields are what an update changed of the spec, the named status
# fields and the named metadata fields (absent is the same as empty).
changed_fields(status, metadata) := (changed_spec | {sprintf("status.%s", [f]) | some f in status; lib.changed(["status", f])}) | {sprintf("metadata.%s", [f]) |
	some f in metadata
	object.get(lib.new, ["metadata", f], empty_metadata[f]) != object.get(lib.old, ["metadata", f], empty_metadata[f])
}

changed_spec := {"spec"} if {
	object.get(lib.new, "spec", {}) != object.get(lib.old, "spec", {})
} else := set()

empty_metadata := {"labels": {}, "annotations": {}, "finalizers": [], "ownerReferences": []}

# coordination.k8s.io Lease: its heartbeat only.

problems.Lease contains sprintf("may write only its own Lease kube-node-lease/%s, not %s/%s", [node, namespace, name]) if {
	input.request.kind.group == "coordination.k8s.io"
	not own_node_lease
}

own_node_lease if {
	namespace == "kube-node-lease"
	name == node
}

namespace := object.get(input.request, "namespace", "")

# Tokens: for itself only, for the API server's audiences, for at most 24h.

problems.TokenRequest contains sprintf("may request tokens only for itself, not for %s/%s", [namespace, sa]) if {
	sa := object.get(input.request, "name", "")
	not own_service_account(sa)
}

own_service_account(sa) if {
	namespace == lib.agents_namespace
	sa == concat("", ["agent-", node])
}

problems.TokenRequest contains sprintf("may request tokens only for the API server's audiences %v, not %v", [sort(api_audiences), sort(audiences)]) if {
	audiences := {a | some a in object.get(lib.new, ["spec", "audiences"], [])}
	audiences != api_audiences
}

api_audiences := {a |
	some listed in split(object.get(input, ["params", "data", "agentTokenAudiences"], ""), ",")
	a := trim_space(listed)
	a != ""
}

problems.TokenRequest contains sprintf("may request tokens for at most %ds, not %s", [max_token_seconds, lib.show(seconds)]) if {
	seconds := object.get(lib.new, ["spec", "expirationSeconds"], "unset")
	not token_within_bound(seconds)
}

token_within_bound(seconds) if {
	is_number(seconds)
	seconds <= max_token_seconds
}

# Secrets: no ServiceAccount token Secret, whose token never expires
# (kube-controller-manager fills it for whichever ServiceAccount the Secret
# names): the agent's tokens are TokenRequests, for itself and at most 24
# hours.

problems.Secret contains sprintf("may not write Secret %s/%s of the type kubernetes.io/service-account-token: its tokens are TokenRequests of at most 24 hours", [namespace, name]) if {
	object.get(lib.new, "type", "") == "kubernetes.io/service-account-token"
}

# Events: only about its own Node and MacNode (core Events name their
# subject involvedObject, events.k8s.io ones regarding).

problems.Event contains sprintf("may write Events only about its own Node and MacNode, not %s %s", [object.get(event_subject, "kind", ""), object.get(event_subject, "name", "")]) if {
	input.request.operation in {"CREATE", "UPDATE"}
	not own_chassis(event_subject)
}

event_subject := object.get(lib.new, "regarding", {}) if {
	input.request.kind.group == "events.k8s.io"
} else := object.get(lib.new, "involvedObject", {})

own_chassis(subject) if {
	object.get(subject, "kind", "") in {"Node", "MacNode"}
	object.get(subject, "name", "") == node
	object.get(subject, "namespace", "") == ""
}

# CertificateSigningRequests: its kubelet API's serving certificate only, of
# MacRack's signer, named after its node. The operator approves one only
# for the agent's own Node and enrolled address; an agent approves, denies,
# signs and changes none (RBAC grants it no update either).

serving_signer := "macrack.io/kubelet-serving"

problems.CertificateSigningRequest contains sprintf("may not %s a CertificateSigningRequest", [lower(lib.operation)]) if {
	lib.operation != "CREATE"
}

problems.CertificateSigningRequest contains sprintf("may create only CertificateSigningRequests of the signer %s, not %s", [serving_signer, lib.show(signer)]) if {
	lib.operation == "CREATE"
	signer := object.get(lib.new, ["spec", "signerName"], "")
	signer != serving_signer
}

problems.CertificateSigningRequest contains sprintf("may create only CertificateSigningRequests named kubelet-serving-%s-<hash>, not %s", [node, name]) if {
	lib.operation == "CREATE"
	not startswith(name, concat("", ["kubelet-serving-", node, "-"]))
}
