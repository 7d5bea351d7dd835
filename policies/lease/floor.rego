# METADATA
# title: lease.floor
# description: |
#   A lease lasts at least 24 hours. minimumDuration, when set, is a duration
#   of at least 24h and at most 87600h (ten years). Once the lease is bound,
#   minimumDuration never shrinks, status.earliestReleaseAt never moves
#   earlier, and earliestReleaseAt is at least minimumDuration after boundAt.
# custom:
#   id: lease.floor
#   kinds:
#   - leasing.macrack.io/MacNodeLease
#   engines: [rego, cel]
package macrack.lease.floor

import data.macrack.lib

code := "lease.floor"

# violations: none for a lease created with a minimumDuration from 24h to
# 87600h and no status times, or updated with the same minimumDuration (in
# that range), boundAt and earliestReleaseAt; else the checks one by one. Each
# clause is sufficient for "no check fires", and opens with the request's
# kind and operation. (An else chain, not a negation, which would cost a
# nested evaluation; the checks alone write the denial messages.)
violations := set() if {
	input.request.kind.kind == "MacNodeLease"
	input.request.operation == "CREATE"
	d := input.object.spec.minimumDuration
	is_string(d)
	regex.match(`^[0-9]{1,6}(\.[0-9]+)?(h([0-9]{1,6}(\.[0-9]+)?m)?([0-9]{1,6}(\.[0-9]+)?s)?|m([0-9]{1,6}(\.[0-9]+)?s)?|s)$`, d)
	ns := time.parse_duration_ns(d)
	ns >= 86400000000000 # 24h, written out (see lib.rego)
	ns <= 315360000000000000 # 87600h
	object.get(input, ["object", "status", "boundAt"], null) == null
	object.get(input, ["oldObject", "status", "earliestReleaseAt"], null) == null
} else := set() if {
	input.request.kind.kind == "MacNodeLease"
	input.request.operation == "UPDATE"
	d := input.object.spec.minimumDuration
	is_string(d)
	regex.match(`^[0-9]{1,6}(\.[0-9]+)?(h([0-9]{1,6}(\.[0-9]+)?m)?([0-9]{1,6}(\.[0-9]+)?s)?|m([0-9]{1,6}(\.[0-9]+)?s)?|s)$`, d)
	ns := time.parse_duration_ns(d)
	ns >= 86400000000000
	ns <= 315360000000000000
	d == object.get(input, ["oldObject", "spec", "minimumDuration"], null)
	object.get(input, ["object", "status", "boundAt"], null) == object.get(input, ["oldObject", "status", "boundAt"], null)
	object.get(input, ["object", "status", "earliestReleaseAt"], null) == object.get(input, ["oldObject", "status", "earliestReleaseAt"], null)
} else := checks

# Every check opens with the same guard on the request's kind, which OPA's
# rule index decides once, before it evaluates any body. The checks read the
# input directly: on an admitted request a virtual document costs more than
# the check itself (BENCHMARKS.md).

# Not a duration: not a string, or a string that is not one. A duration is
# what the CRD schema admits: hours, minutes and seconds, in that order, each
# at most six digits with an optional fraction, so that no duration overflows
# the engines' nanoseconds (Go's durations end at 2562047h). The pattern is
# written out here, as calling lib.is_duration costs more than matching.
checks contains {"code": code, "message": msg} if {
	input.request.kind.kind == "MacNodeLease"
	input.request.operation in {"CREATE", "UPDATE"}
	d := input.object.spec.minimumDuration
	not is_string(d)
	msg := sprintf("lease.floor: minimumDuration %s is not a duration such as 24h", [lib.show(d)])
}

checks contains {"code": code, "message": msg} if {
	input.request.kind.kind == "MacNodeLease"
	input.request.operation in {"CREATE", "UPDATE"}
	d := input.object.spec.minimumDuration
	is_string(d)
	not regex.match(`^[0-9]{1,6}(\.[0-9]+)?(h([0-9]{1,6}(\.[0-9]+)?m)?([0-9]{1,6}(\.[0-9]+)?s)?|m([0-9]{1,6}(\.[0-9]+)?s)?|s)$`, d)
	not regex.match(`^[1-9][0-9]{6,}h$`, d)
	msg := sprintf("lease.floor: minimumDuration %s is not a duration such as 24h", [d])
}

# Hours written with seven digits or more are a million hours or more: beyond
# the pattern, from 2562048h beyond the engines' durations too, and above the
# maximum without being parsed.
checks contains {"code": code, "message": msg} if {
	input.request.kind.kind == "MacNodeLease"
	input.request.operation in {"CREATE", "UPDATE"}
	d := input.object.spec.minimumDuration
	is_string(d)
	regex.match(`^[1-9][0-9]{6,}h$`, d)
	msg := sprintf("lease.floor: minimumDuration %s is above the 87600h maximum", [d])
}

checks contains {"code": code, "message": msg} if {
	input.request.kind.kind == "MacNodeLease"
	input.request.operation in {"CREATE", "UPDATE"}
	d := input.object.spec.minimumDuration
	is_string(d)
	regex.match(`^[0-9]{1,6}(\.[0-9]+)?(h([0-9]{1,6}(\.[0-9]+)?m)?([0-9]{1,6}(\.[0-9]+)?s)?|m([0-9]{1,6}(\.[0-9]+)?s)?|s)$`, d)
	time.parse_duration_ns(d) < 86400000000000 # 24h, written out (see lib.rego)
	msg := sprintf("lease.floor: minimumDuration %s is below the 24h floor", [d])
}

checks contains {"code": code, "message": msg} if {
	input.request.kind.kind == "MacNodeLease"
	input.request.operation in {"CREATE", "UPDATE"}
	d := input.object.spec.minimumDuration
	is_string(d)
	regex.match(`^[0-9]{1,6}(\.[0-9]+)?(h([0-9]{1,6}(\.[0-9]+)?m)?([0-9]{1,6}(\.[0-9]+)?s)?|m([0-9]{1,6}(\.[0-9]+)?s)?|s)$`, d)
	time.parse_duration_ns(d) > 315360000000000000 # 87600h, ten years, written out
	msg := sprintf("lease.floor: minimumDuration %s is above the 87600h maximum", [d])
}

# After binding (the stored lease has a boundAt), minimumDuration can be
# neither removed nor shortened.

checks contains {"code": code, "message": msg} if {
	input.request.kind.kind == "MacNodeLease"
	input.request.operation == "UPDATE"
	input.oldObject.status.boundAt != null
	old := input.oldObject.spec.minimumDuration
	lib.is_duration(old)
	not has_minimum
	msg := sprintf("lease.floor: minimumDuration cannot be removed after binding (it was %s)", [old])
}

checks contains {"code": code, "message": msg} if {
	input.request.kind.kind == "MacNodeLease"
	input.request.operation == "UPDATE"
	input.oldObject.status.boundAt != null
	old := input.oldObject.spec.minimumDuration
	d := input.object.spec.minimumDuration
	lib.is_duration(old)
	lib.is_duration(d)
	time.parse_duration_ns(d) < time.parse_duration_ns(old)
	msg := sprintf("lease.floor: minimumDuration cannot shrink after binding (from %s to %s)", [old, d])
}

has_minimum if {
	_ = input.object.spec.minimumDuration
}

# status.earliestReleaseAt, once set, is never removed, never moved earlier,
# and is at least minimumDuration after boundAt.

checks contains {"code": code, "message": msg} if {
	input.request.kind.kind == "MacNodeLease"
	input.request.operation in {"CREATE", "UPDATE"}
	old_era := input.oldObject.status.earliestReleaseAt
	old_era != null
	not new_era
	msg := sprintf("lease.floor: status.earliestReleaseAt cannot be removed (it was %s)", [old_era])
}

checks contains {"code": code, "message": msg} if {
	input.request.kind.kind == "MacNodeLease"
	input.request.operation in {"CREATE", "UPDATE"}
	old_era := input.oldObject.status.earliestReleaseAt
	old_era != null
	era := new_era
	time.parse_rfc3339_ns(era) < time.parse_rfc3339_ns(old_era)
	msg := sprintf("lease.floor: status.earliestReleaseAt cannot move earlier (from %s to %s)", [old_era, era])
}

checks contains {"code": code, "message": msg} if {
	input.request.kind.kind == "MacNodeLease"
	input.request.operation in {"CREATE", "UPDATE"}
	bound := input.object.status.boundAt
	bound != null
	era := new_era
	status_times_written
	d := input.object.spec.minimumDuration
	lib.is_duration(d)
	time.parse_rfc3339_ns(era) - time.parse_rfc3339_ns(bound) < time.parse_duration_ns(d)
	msg := sprintf("lease.floor: status.earliestReleaseAt %s is less than minimumDuration %s after boundAt %s", [era, d, bound])
}

new_era := e if {
	e := input.object.status.earliestReleaseAt
	e != null
}

status_times_written if object.get(input, ["object", "status", "earliestReleaseAt"], null) != object.get(input, ["oldObject", "status", "earliestReleaseAt"], null)

status_times_written if object.get(input, ["object", "status", "boundAt"], null) != object.get(input, ["oldObject", "status", "boundAt"], null)
