package macrack.instance.tenant_test

import data.macrack.instance.tenant

create(phase) := {
	"request": {"operation": "CREATE", "kind": {"kind": "MacOSInstance"}},
	"object": {"metadata": {"name": "ci-1", "namespace": "tenant-b"}, "spec": {"leaseName": "l"}},
	"inventory": {"lease": {"metadata": {"name": "l", "namespace": "tenant-b"}, "status": {"phase": phase}}},
}

test_a_held_lease_takes_no_new_instance if {
	some v in tenant.violations with input as create("Held")
	v.message == "instance.tenant: lease tenant-b/l is Held, not Bound; instances can be created only in a Bound lease"
}

test_a_bound_lease_does if {
	count(tenant.violations) == 0 with input as create("Bound")
}
