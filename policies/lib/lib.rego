# METADATA
# title: Shared helpers
# description: |
#   Helpers every MacRack rule shares: the request, what an update changed,
#   Kubernetes quantities and durations, time, identities, taints and
#   instance liveness. They hold no rule.
package macrack.lib

# The request.

operation := input.request.operation

sub_resource := object.get(input.request, "subResource", "")

username := object.get(input.request, ["userInfo", "username"], "")

# new and old are the written object and the stored one; {} where absent or
# null (oldObject on CREATE, object on DELETE), as in a ValidatingAdmissionPolicy.
default new := {}

new := input.object if is_object(input.object)

default old := {}

old := input.oldObject if is_object(input.oldObject)

# What an update changed.

# changed(path) holds when the field at path differs between the stored
# object and the written one; absent and null are the same.
changed(path) if object.get(new, path, null) != object.get(old, path, null)

# removed_finalizers are the finalizers a write takes off the stored object.
removed_finalizers := {f |
	some f in object.get(old, ["metadata", "finalizers"], [])
	not f in object.get(new, ["metadata", "finalizers"], [])
}

# newly_placed_on is the node an instance update places it on: a node it
# was not on before.
newly_placed_on := node if {
	operation == "UPDATE"
	node := object.get(new, ["status", "nodeName"], "")
	node != ""
	node != object.get(old, ["status", "nodeName"], "")
}

# Quantities and durations.

# The commercial floors.
one_terabyte := 1000000000000 # 1T = 10^12 bytes

min_network_gbps := 10

# quantity_pattern is a Kubernetes quantity, as resource.ParseQuantity
# accepts it.
quantity_pattern := `^[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E|[eE][+-]?[0-9]+)?$`

# duration_pattern is a Go duration as the CRD schema accepts it: hours,
# minutes and seconds, in that order, each at most six digits with an
# optional fraction, which no engine's nanosecond duration overflows.
duration_pattern := `^[0-9]{1,6}(\.[0-9]+)?(h([0-9]{1,6}(\.[0-9]+)?m)?([0-9]{1,6}(\.[0-9]+)?s)?|m([0-9]{1,6}(\.[0-9]+)?s)?|s)$`

# A number is a quantity when it is whole, as the API server decodes JSON
# integers; a fractional number is not.
is_quantity(x) if {
	is_number(x)
	x == floor(x)
}

is_quantity(x) if {
	is_string(x)
	regex.match(quantity_pattern, x)
}

# quantity is the value of a quantity; units.parse, never units.parse_bytes,
# which reads "m" as mega. units.parse has no n or u, so those scale by hand.
quantity(x) := x if {
	is_number(x)
	x == floor(x)
}

quantity(x) := units.parse(x) if {
	is_string(x)
	not endswith(x, "n")
	not endswith(x, "u")
	regex.match(quantity_pattern, x)
}

quantity(x) := units.parse(trim_suffix(x, "n")) / 1000000000 if {
	is_string(x)
	endswith(x, "n")
	regex.match(quantity_pattern, x)
}

quantity(x) := units.parse(trim_suffix(x, "u")) / 1000000 if {
	is_string(x)
	endswith(x, "u")
	regex.match(quantity_pattern, x)
}

is_duration(x) if {
	is_string(x)
	regex.match(duration_pattern, x)
}

# duration_ns is a duration in nanoseconds; undefined for anything else.
duration_ns(x) := time.parse_duration_ns(x) if is_duration(x)

# show renders a value for a message: strings as they are, others as JSON.
show(x) := x if is_string(x)

show(x) := json.marshal(x) if not is_string(x)

# Time.

# before(t) holds when now is before the RFC 3339 time t. A missing clock
# counts as before, so that a rule that needs the time fails closed.
before(_) if not input.now

before(t) if time.parse_rfc3339_ns(input.now) < time.parse_rfc3339_ns(t)

# now_shown is the clock, for messages.
now_shown := show(object.get(input, "now", "unknown"))

# Identities.

# The operator's own identity, from the params.
is_operator if {
	op := input.params.data.operatorUsername
	op != ""
	username == op
}

# agents_namespace is the namespace that holds the agents' ServiceAccounts.
agents_namespace := ns if {
	ns := input.params.data.agentsNamespace
	is_string(ns)
	ns != ""
}

# is_agent_of(node) holds when the requester is the host agent of node: the
# ServiceAccount agent-<node> of the agents' namespace.
is_agent_of(node) if {
	node != ""
	username == concat("", ["system:serviceaccount:", agents_namespace, ":agent-", node])
}

# Nodes and instances.

# macrack_taints are a Node's macrack.io/ taints, as key=value:effect strings.
macrack_taints(node) := {sprintf("%s=%s:%s", [t.key, object.get(t, "value", ""), object.get(t, "effect", "")]) |
	some t in object.get(node, ["spec", "taints"], [])
	startswith(t.key, "macrack.io/")
}

# An instance is live, and counts toward the cap, until the agent reports it stopped.
live(instance) if {
	is_object(instance)
	object.get(instance, ["status", "runtime", "phase"], "") != "Stopped"
}

# vm_capacity is the inventory class's capacity, never above the kernel's
# two, and two when the class is unknown.
vm_capacity := min([c, 2]) if {
	c := input.inventory.nodeClass.spec.vmCapacity
	is_number(c)
} else := 2

# Phases in which a MacNode may host a lease.
serving_phases := {"Ready", "Leased"}

# enters_service holds when a MacNode status write moves it into Ready or Leased.
enters_service if {
	operation == "UPDATE"
	object.get(new, ["status", "phase"], "") in serving_phases
	not object.get(old, ["status", "phase"], "") in serving_phases
}
