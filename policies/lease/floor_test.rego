package macrack.lease.floor_test

import data.macrack.lease.floor

lease(d) := {
	"request": {"operation": "CREATE", "kind": {"group": "leasing.macrack.io", "kind": "MacNodeLease"}},
	"object": {"metadata": {"name": "l", "namespace": "t"}, "spec": {"minimumDuration": d}},
}

test_the_message_names_the_rule_and_the_numbers if {
	floor.violations == {{"code": "lease.floor", "message": "lease.floor: minimumDuration 23h is below the 24h floor"}} with input as lease("23h")
}

test_24h_is_the_floor if {
	count(floor.violations) == 0 with input as lease("24h")
	count(floor.violations) == 1 with input as lease("86399999ms")
}

test_other_kinds_are_not_concerned if {
	count(floor.violations) == 0 with input as object.union(lease("1h"), {"request": {"kind": {"kind": "MacOSInstance"}}})
}
