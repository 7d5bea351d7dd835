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

applies if {
	input.request.kind.kind == "MacNodeLease"
	lib.operation in {"CREATE", "UPDATE"}
}

spec := object.get(lib.new, "spec", {})

status := object.get(lib.new, "status", {})

old_status := object.get(lib.old, "status", {})

old_spec := object.get(lib.old, "spec", {})

bound_before if {
	lib.operation == "UPDATE"
	object.get(old_status, "boundAt", null) != null
}

violations contains {"code": code, "message": msg} if {
	applies
	"minimumDuration" in object.keys(spec)
	not lib.is_duration(spec.minimumDuration)
	msg := sprintf("lease.floor: minimumDuration %s is not a duration such as 24h", [lib.show(spec.minimumDuration)])
}

violations contains {"code": code, "message": msg} if {
	applies
	lib.is_duration(spec.minimumDuration)
	time.parse_duration_ns(spec.minimumDuration) < lib.floor_ns
	msg := sprintf("lease.floor: minimumDuration %s is below the 24h floor", [spec.minimumDuration])
}

violations contains {"code": code, "message": msg} if {
	bound_before
	old := old_spec.minimumDuration
	lib.is_duration(old)
	not "minimumDuration" in object.keys(spec)
	msg := sprintf("lease.floor: minimumDuration cannot be removed after binding (it was %s)", [old])
}

violations contains {"code": code, "message": msg} if {
	bound_before
	old := old_spec.minimumDuration
	new := spec.minimumDuration
	lib.is_duration(old)
	lib.is_duration(new)
	time.parse_duration_ns(new) < time.parse_duration_ns(old)
	msg := sprintf("lease.floor: minimumDuration cannot shrink after binding (from %s to %s)", [old, new])
}

violations contains {"code": code, "message": msg} if {
	applies
	old := object.get(old_status, "earliestReleaseAt", null)
	old != null
	object.get(status, "earliestReleaseAt", null) == null
	msg := sprintf("lease.floor: status.earliestReleaseAt cannot be removed (it was %s)", [old])
}

violations contains {"code": code, "message": msg} if {
	applies
	old := object.get(old_status, "earliestReleaseAt", null)
	new := object.get(status, "earliestReleaseAt", null)
	old != null
	new != null
	time.parse_rfc3339_ns(new) < time.parse_rfc3339_ns(old)
	msg := sprintf("lease.floor: status.earliestReleaseAt cannot move earlier (from %s to %s)", [old, new])
}

# The check of earliestReleaseAt against boundAt applies when either is
# written, so that a tenant may grow minimumDuration before the operator
# extends earliestReleaseAt.
status_times_written if object.get(status, "earliestReleaseAt", null) != object.get(old_status, "earliestReleaseAt", null)

status_times_written if object.get(status, "boundAt", null) != object.get(old_status, "boundAt", null)

violations contains {"code": code, "message": msg} if {
	applies
	bound := object.get(status, "boundAt", null)
	era := object.get(status, "earliestReleaseAt", null)
	bound != null
	era != null
	status_times_written
	lib.is_duration(spec.minimumDuration)
	time.parse_rfc3339_ns(era) - time.parse_rfc3339_ns(bound) < time.parse_duration_ns(spec.minimumDuration)
	msg := sprintf("lease.floor: status.earliestReleaseAt %s is less than minimumDuration %s after boundAt %s", [era, spec.minimumDuration, bound])
}
