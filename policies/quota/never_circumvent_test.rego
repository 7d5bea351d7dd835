package macrack.quota.never_circumvent_test

import data.macrack.quota.never_circumvent as quota

node(capacity) := {
	"request": {"operation": "UPDATE", "kind": {"group": "", "kind": "Node"}, "subResource": "status"},
	"object": {"metadata": {"name": "n1"}, "status": {"capacity": {"macrack.io/macos-vm": capacity}}},
}

test_three_vms_are_never_advertised if {
	quota.violations == {{"code": "quota.never-circumvent", "message": "quota.never-circumvent: Node n1 advertises capacity macrack.io/macos-vm=3; a chassis runs at most 2 macOS VMs"}} with input as node("3")
}

test_two_are if {
	count(quota.violations) == 0 with input as node("2")
}

test_a_quota_boot_arg_keeps_a_host_out_of_service if {
	some v in quota.violations with input as {
		"request": {"operation": "UPDATE", "kind": {"kind": "MacNode"}},
		"oldObject": {"status": {"phase": "Enrolled"}},
		"object": {"metadata": {"name": "n1"}, "status": {"phase": "Ready", "reported": {"sipEnabled": true, "bootArgs": "hv_apple_isa_vm_quota=0xff"}}},
	}
	v.message == "quota.never-circumvent: MacNode n1 cannot become Ready: its boot-args touch hv_apple_isa_vm_quota"
}
