package macrack.tenancy.serial_test

import data.macrack.tenancy.serial

binding(ns, uid) := {"leaseNamespace": ns, "leaseName": "l", "leaseUID": uid, "earliestReleaseAt": "2026-06-02T12:00:00Z"}

rebind(old, new) := {
	"request": {"operation": "UPDATE", "kind": {"kind": "MacNode"}},
	"oldObject": {"spec": {"serial": "C02XL0GHJGH5"}, "status": {"binding": old}},
	"object": {"spec": {"serial": "C02XL0GHJGH5"}, "status": {"binding": new}},
}

test_a_second_tenant_is_named_in_the_message if {
	some v in serial.violations with input as rebind(binding("tenant-a", "a"), binding("tenant-b", "b"))
	v.message == "tenancy.serial: serial C02XL0GHJGH5 is bound to tenant-a/l; it cannot also be bound to tenant-b/l"
}

test_the_same_lease_may_rewrite_its_binding if {
	count(serial.violations) == 0 with input as rebind(binding("tenant-a", "a"), binding("tenant-a", "a"))
}

test_clearing_is_not_this_rules_concern if {
	count(serial.violations) == 0 with input as rebind(binding("tenant-a", "a"), null)
}
