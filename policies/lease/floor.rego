# METADATA
# title: lease.floor
# description: |
#   A lease lasts at least 24 hours. minimumDuration, when set, is a duration
#   of at least 24h. Once the lease is bound, minimumDuration never shrinks,
#   status.earliestReleaseAt never moves earlier, and earliestReleaseAt is at
#   least minimumDuration after boundAt.
# custom:
#   id: lease.floor
#   kinds:
#   - leasing.macrack.io/MacNodeLease
#   engines: [rego, cel]
package macrack.lease.floor

import data.macrack.lib

code := "lease.floor"

# One guard for every check: a request of another kind or operation costs a
# comparison, and the checks read the input directly.
violations contains v if {
	input.request.kind.kind == "MacNodeLease"
	input.request.operation in {"CREATE", "UPDATE"}
	some v in checks
}

# minimum_ns and old_minimum_ns are the written and the stored
# minimumDuration, where each is a duration; evaluated once per request.
minimum_ns := time.parse_duration_ns(input.object.spec.minimumDuration) if lib.is_duration(input.object.spec.minimumDuration)

old_minimum_ns := time.parse_duration_ns(input.oldObject.spec.minimumDuration) if lib.is_duration(input.oldObject.spec.minimumDuration)

# A minimumDuration that is set (even to null) must be a duration.
checks contains {"code": code, "message": msg} if {
	d := input.object.spec.minimumDuration
	not minimum_ns
	msg := sprintf("lease.floor: minimumDuration %s is not a duration such as 24h", [lib.show(d)])
}

checks contains {"code": code, "message": msg} if {
	minimum_ns < lib.floor_ns
	msg := sprintf("lease.floor: minimumDuration %s is below the 24h floor", [input.object.spec.minimumDuration])
}

bound_before if {
	input.request.operation == "UPDATE"
	input.oldObject.status.boundAt != null
}

has_minimum if {
	_ = input.object.spec.minimumDuration
}

checks contains {"code": code, "message": msg} if {
	bound_before
	old_minimum_ns
	not has_minimum
	msg := sprintf("lease.floor: minimumDuration cannot be removed after binding (it was %s)", [input.oldObject.spec.minimumDuration])
}

checks contains {"code": code, "message": msg} if {
	bound_before
	minimum_ns < old_minimum_ns
	msg := sprintf("lease.floor: minimumDuration cannot shrink after binding (from %s to %s)", [input.oldObject.spec.minimumDuration, input.object.spec.minimumDuration])
}

old_era := e if {
	e := input.oldObject.status.earliestReleaseAt
	e != null
}

new_era := e if {
	e := input.object.status.earliestReleaseAt
	e != null
}

checks contains {"code": code, "message": msg} if {
	not new_era
	msg := sprintf("lease.floor: status.earliestReleaseAt cannot be removed (it was %s)", [old_era])
}

checks contains {"code": code, "message": msg} if {
	time.parse_rfc3339_ns(new_era) < time.parse_rfc3339_ns(old_era)
	msg := sprintf("lease.floor: status.earliestReleaseAt cannot move earlier (from %s to %s)", [old_era, new_era])
}

# The check of earliestReleaseAt against boundAt applies when either is
# written, so that a tenant may grow minimumDuration before the operator
# extends earliestReleaseAt.
status_times_written if object.get(input, ["object", "status", "earliestReleaseAt"], null) != object.get(input, ["oldObject", "status", "earliestReleaseAt"], null)

status_times_written if object.get(input, ["object", "status", "boundAt"], null) != object.get(input, ["oldObject", "status", "boundAt"], null)

checks contains {"code": code, "message": msg} if {
	bound := input.object.status.boundAt
	bound != null
	era := new_era
	status_times_written
	time.parse_rfc3339_ns(era) - time.parse_rfc3339_ns(bound) < minimum_ns
	msg := sprintf("lease.floor: status.earliestReleaseAt %s is less than minimumDuration %s after boundAt %s", [era, input.object.spec.minimumDuration, bound])
}
