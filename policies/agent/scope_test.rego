package macrack.agent.scope_test

import data.macrack.agent.scope

as_agent(req, obj, old) := {
	"request": object.union(req, {"userInfo": {"username": "system:serviceaccount:macrack-agents:agent-n1"}}),
	"params": {"data": {"agentsNamespace": "macrack-agents"}},
	"object": obj,
	"oldObject": old,
}

test_the_agent_names_itself_and_the_field if {
	some v in scope.violations with input as as_agent(
		{"operation": "UPDATE", "kind": {"kind": "MacNode"}},
		{"metadata": {"name": "n1"}, "status": {"slots": [{"uid": "x"}]}},
		{"metadata": {"name": "n1"}, "status": {}},
	)
	v.message == "agent.scope: agent n1 may change only status.reported of its MacNode, not status.slots"
}

test_reported_facts_are_its_own if {
	count(scope.violations) == 0 with input as as_agent(
		{"operation": "UPDATE", "kind": {"kind": "MacNode"}},
		{"metadata": {"name": "n1"}, "status": {"reported": {"disk": "1T"}}},
		{"metadata": {"name": "n1"}, "status": {}},
	)
}

test_people_are_not_agents if {
	count(scope.violations) == 0 with input as {
		"request": {"operation": "DELETE", "kind": {"kind": "Node"}, "userInfo": {"username": "alice"}},
		"params": {"data": {"agentsNamespace": "macrack-agents"}},
		"oldObject": {"metadata": {"name": "n1"}},
	}
}

test_an_agent_is_a_service_account_of_the_agents_namespace if {
	scope.node == "c02aaaaaaaa1" with input as {
		"request": {"userInfo": {"username": "system:serviceaccount:macrack-agents:agent-c02aaaaaaaa1"}},
		"params": {"data": {"agentsNamespace": "macrack-agents"}},
	}
	not scope.node with input as {
		"request": {"userInfo": {"username": "system:serviceaccount:tenant-a:agent-c02aaaaaaaa1"}},
		"params": {"data": {"agentsNamespace": "macrack-agents"}},
	}
	not scope.node with input as {
		"request": {"userInfo": {"username": "system:serviceaccount:macrack-agents:agent-c02aaaaaaaa1"}},
		"params": {"data": {"agentsNamespace": ""}},
	}
}
