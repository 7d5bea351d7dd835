package macrack.tenancy.class_test

import data.macrack.tenancy.class

reclass(status, new_class) := {
	"request": {"operation": "UPDATE", "kind": {"kind": "MacNode"}},
	"oldObject": {"metadata": {"name": "c02a"}, "spec": {"nodeClassName": "m4"}, "status": status},
	"object": {"metadata": {"name": "c02a"}, "spec": {"nodeClassName": new_class}, "status": status},
}

test_the_message_names_the_lease_and_both_classes if {
	some v in class.violations with input as reclass({"phase": "Leased", "binding": {"leaseNamespace": "t", "leaseName": "build"}}, "m5")
	v.message == "tenancy.class: MacNode c02a is bound to lease t/build; its nodeClassName stays m4 until the lease is released, not m5"
}

test_an_unbound_chassis_may_be_reclassified if {
	count(class.violations) == 0 with input as reclass({"phase": "Ready"}, "m5")
}
