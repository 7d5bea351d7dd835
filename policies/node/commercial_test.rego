package macrack.node.commercial_test

import data.macrack.node.commercial

class(disk, gbps) := {
	"request": {"operation": "CREATE", "kind": {"kind": "MacNodeClass"}},
	"object": {"spec": {"disk": disk, "networkGbps": gbps, "vmCapacity": 2}},
}

test_931gi_is_below_1t if {
	commercial.violations == {{"code": "node.commercial", "message": "node.commercial: disk 931Gi is below the 1T commercial floor"}} with input as class("931Gi", 10)
}

test_a_9_gb_nic_is_named if {
	commercial.violations == {{"code": "node.commercial", "message": "node.commercial: networkGbps 9 is below the 10 Gb commercial floor"}} with input as class("1T", 9)
}

test_1t_and_10_gb_pass if {
	count(commercial.violations) == 0 with input as class("1T", 10)
}
