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
	count(floor.violations) == 1 with input as lease("86399.999s")
}

test_87600h_is_the_maximum if {
	count(floor.violations) == 0 with input as lease("87600h")
	floor.violations == {{"code": "lease.floor", "message": "lease.floor: minimumDuration 87600h0.001s is above the 87600h maximum"}} with input as lease("87600h0.001s")
	floor.violations == {{"code": "lease.floor", "message": "lease.floor: minimumDuration 100000h is above the 87600h maximum"}} with input as lease("100000h")
}

# 2562048h overflows the engines' durations: refused without being parsed.
test_beyond_the_engines_durations_is_a_clean_denial if {
	floor.violations == {{"code": "lease.floor", "message": "lease.floor: minimumDuration 2562048h is above the 87600h maximum"}} with input as lease("2562048h")
	floor.violations == {{"code": "lease.floor", "message": "lease.floor: minimumDuration 99999999999999999999ns is not a duration such as 24h"}} with input as lease("99999999999999999999ns")
}

test_other_kinds_are_not_concerned if {
	count(floor.violations) == 0 with input as object.union(lease("1h"), {"request": {"kind": {"kind": "MacOSInstance"}}})
}
