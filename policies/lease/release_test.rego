package macrack.lease.release_test

import data.macrack.lease.release

removal(user, now) := {
	"request": {"operation": "UPDATE", "kind": {"kind": "MacNodeLease"}, "userInfo": {"username": user}},
	"params": {"data": {"operatorUsername": "operator"}},
	"now": now,
	"oldObject": {"metadata": {"finalizers": ["macrack.io/lease"]}, "status": {"earliestReleaseAt": "2026-06-02T12:00:00Z"}},
	"object": {"metadata": {"finalizers": []}, "status": {"earliestReleaseAt": "2026-06-02T12:00:00Z"}},
}

test_the_message_names_the_finalizer_and_the_times if {
	some v in release.violations with input as removal("alice", "2026-06-01T15:00:00Z")
	v.message == "lease.release: finalizer macrack.io/lease cannot be removed before earliestReleaseAt 2026-06-02T12:00:00Z (now 2026-06-01T15:00:00Z); only the operator releases a lease"
}

test_only_the_operator_may_remove_it_early if {
	count(release.violations) == 0 with input as removal("operator", "2026-06-01T15:00:00Z")
}

test_without_a_clock_the_removal_is_refused if {
	count(release.violations) == 1 with input as object.remove(removal("alice", ""), ["now"])
}
