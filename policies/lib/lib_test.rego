package macrack.lib_test

import data.macrack.lib

test_quantities_as_kubernetes_reads_them if {
	lib.quantity("1T") == 1000000000000
	lib.quantity("1000G") == 1000000000000
	lib.quantity("1e12") == 1000000000000
	lib.quantity(1000000000000) == 1000000000000
	lib.quantity("931Gi") == 999653638144
	lib.quantity("932Gi") == 1000727379968
	lib.quantity("2") == 2
}

test_milli_is_milli_not_mega if {
	lib.quantity("1500m") == 1.5
	lib.quantity("2000m") == 2
}

test_nano_and_micro_scale_by_hand if {
	lib.quantity("1500n") == 0.0000015
	lib.quantity("2u") == 0.000002
}

test_what_kubernetes_refuses_is_not_a_quantity if {
	not lib.is_quantity("")
	not lib.is_quantity("1K")
	not lib.is_quantity("1 TB")
	not lib.is_quantity("1ki")
	not lib.is_quantity(1.5)
	not lib.is_quantity(true)
}

test_durations_are_go_durations if {
	lib.is_duration("24h")
	lib.is_duration("1440m")
	lib.is_duration("23h59m59s")
	lib.is_duration("90000s")
	lib.is_duration("23.99h")
	lib.is_duration("999999h")
	not lib.is_duration("")
	not lib.is_duration("1000000h")
	not lib.is_duration("2562048h")
	not lib.is_duration("30m1h")
	not lib.is_duration("1d")
	not lib.is_duration("-24h")
	not lib.is_duration(86400)
}

test_a_missing_clock_counts_as_before if {
	lib.before("2026-01-01T00:00:00Z") with input as {}
	not lib.before("2026-01-01T00:00:00Z") with input as {"now": "2026-01-01T00:00:00Z"}
}

test_vm_capacity_never_exceeds_two if {
	lib.vm_capacity == 2 with input as {"inventory": {"nodeClass": {"spec": {"vmCapacity": 3}}}}
	lib.vm_capacity == 1 with input as {"inventory": {"nodeClass": {"spec": {"vmCapacity": 1}}}}
	lib.vm_capacity == 2 with input as {"inventory": {}}
}
