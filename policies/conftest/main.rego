# METADATA
# title: conftest entry point
# description: |
#   Wraps a raw manifest into MacRack's policy input, as a CREATE by a tenant,
#   and reports every rule's violations as conftest denials:
#     conftest test -p policies manifests/
package main

import data.macrack

kind_of(obj) := {"group": group, "version": version, "kind": obj.kind} if {
	parts := split(obj.apiVersion, "/")
	count(parts) == 2
	group := parts[0]
	version := parts[1]
}

kind_of(obj) := {"group": "", "version": obj.apiVersion, "kind": obj.kind} if {
	not contains(obj.apiVersion, "/")
}

wrapped := {
	"object": input,
	"request": {
		"operation": "CREATE",
		"kind": kind_of(input),
		"subResource": "",
		"name": object.get(input, ["metadata", "name"], ""),
		"namespace": object.get(input, ["metadata", "namespace"], ""),
		"userInfo": {"username": "conftest", "groups": []},
	},
	"params": {"data": {"agentsNamespace": "macrack-agents"}},
	"inventory": {},
}

# The rules a manifest alone can be judged by. The others need cluster state
# (the inventory) or an update; `macrackctl policy check --inventory` covers
# them.
deny contains v.message if {
	some v in macrack.lease.floor.violations with input as wrapped
}

deny contains v.message if {
	some v in macrack.node.commercial.violations with input as wrapped
}

deny contains v.message if {
	some v in macrack.quota.never_circumvent.violations with input as wrapped
}
