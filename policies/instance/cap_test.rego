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

runner(concurrency, capacity) := {
	"request": {"operation": "CREATE", "kind": {"kind": "GitLabRunner"}},
	"object": {"metadata": {"name": "ios-ci", "namespace": "t"}, "spec": {"leaseName": "l", "concurrency": concurrency}},
	"inventory": {"nodeClass": {"metadata": {"name": "m1"}, "spec": {"vmCapacity": capacity}}},
}

test_the_message_names_the_runner_the_lease_and_the_class if {
	some v in cap.violations with input as runner(2, 1)
	v.message == "instance.cap: GitLabRunner ios-ci asks for concurrency 2, but lease l's class m1 runs at most 1 VMs per chassis"
}

test_a_runner_within_its_class_is_allowed if {
	count(cap.violations) == 0 with input as runner(2, 2)
}
