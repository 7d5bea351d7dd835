package macrack.quarantine.fence_test

import data.macrack.quarantine.fence

create(node_name, chassis) := {
	"request": {"operation": "CREATE", "kind": {"kind": "MacOSInstance"}},
	"object": {"metadata": {"name": "ci-1", "namespace": "t"}, "spec": {"leaseName": "build"}},
	"inventory": {
		"lease": {"metadata": {"name": "build", "namespace": "t"}, "status": {"phase": "Bound", "nodeName": node_name}},
		"macNode": chassis,
	},
}

mac_node(status) := {"metadata": {"name": "c02a"}, "spec": {"serial": "C02A"}, "status": status}

stuck := {"bootID": "boot-1", "evidence": "VZ error 6 with 1 VM running", "quarantinedAt": "2026-06-01T12:00:00Z"}

test_the_message_names_the_chassis_its_phase_and_what_happens if {
	some v in fence.violations with input as create("c02a", mac_node({"phase": "Quarantined", "quarantine": stuck}))
	v.message == "quarantine.fence: chassis C02A is Quarantined: its kernel VM quota stuck and MacRack is rebooting it; new instances are refused until it recovers; the instances you have restart after the reboot"
}

test_a_leased_chassis_admits if {
	count(fence.violations) == 0 with input as create("c02a", mac_node({"phase": "Leased"}))
}

test_an_active_quarantine_fences_whatever_the_phase if {
	some v in fence.violations with input as create("c02a", mac_node({"phase": "Leased", "quarantine": stuck}))
	startswith(v.message, "quarantine.fence: chassis C02A is under quarantine (phase Leased): ")
}

test_a_recovered_quarantine_admits if {
	count(fence.violations) == 0 with input as create("c02a", mac_node({"phase": "Leased", "quarantine": object.union(stuck, {"recoveredAt": "2026-06-01T12:30:00Z"})}))
}

test_a_chassis_that_needs_a_person_says_so if {
	some v in fence.violations with input as create("c02a", mac_node({"phase": "Quarantined", "quarantine": object.union(stuck, {"needsAttention": true})}))
	v.message == "quarantine.fence: chassis C02A is Quarantined: its kernel VM quota stuck more than 3 times in 24 hours and it waits for a person to repair it; new instances are refused until it recovers; the instances you have restart once it is repaired"
}

test_an_unbound_lease_is_not_concerned if {
	count(fence.violations) == 0 with input as create("", mac_node({"phase": "Quarantined", "quarantine": stuck}))
}

test_another_chassis_than_the_leases_is_not_concerned if {
	count(fence.violations) == 0 with input as create("c02b", mac_node({"phase": "Rebooting", "quarantine": stuck}))
}
