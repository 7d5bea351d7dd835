package macrack.instance.cap_test

import data.macrack.instance.cap

create(live) := {
	"request": {"operation": "CREATE", "kind": {"kind": "MacOSInstance"}},
	"object": {"metadata": {"name": "ci-3", "namespace": "t"}, "spec": {"leaseName": "l"}},
	"inventory": {"leaseInstances": [{"metadata": {"name": n, "uid": n}, "status": {"runtime": {"phase": p}}} | some n, p in live]},
}

test_the_message_counts_the_live_instances if {
	some v in cap.violations with input as create({"ci-1": "Running", "ci-2": "Stopping"})
	v.message == "instance.cap: lease l already has 2 live instances (ci-1, ci-2); a chassis runs at most 2"
}

test_stopped_instances_free_their_place if {
	count(cap.violations) == 0 with input as create({"ci-1": "Running", "ci-2": "Stopped"})
}
