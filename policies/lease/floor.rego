# METADATA
# title: lease.floor
# description: |
#   A lease lasts at least 24 hours. minimumDuration, when set, is a duration
#   of at least 24h and at most 87600h (ten years). Once the lease is bound,
#   minimumDuration never shrinks, status.earliestReleaseAt never moves
#   earlier, and earliestReleaseAt is at least minimumDuration, rounded up
#   to a whole second, after boundAt.
# custom:
#   id: lease.floor
#   kinds:
#   - leasing.macrack.io/MacNodeLease
#   engines: [rego, cel]
package macrack.lease.floor

import data.macrack.lib

code := "lease.floor"

violations contains {"code": code, "message": concat("", ["lease.floor: ", problem])} if {
	input.request.kind.kind == "MacNodeLease"
	input.request.operation in {"CREATE", "UPDATE"}
	some problem in problems
}

floor_ns := 86400000000000 # 24h

maximum_ns := 315360000000000000 # 87600h, ten years

# minimum is the lease's minimumDuration; undefined when it is not set.
minimum := lib.new.spec.minimumDuration

# minimumDuration, when set, is a duration from 24h to 87600h.

problems contains sprintf("minimumDuration %s is not a duration such as 24h", [lib.show(minimum)]) if {
	not lib.is_duration(minimum)
	not million_hours(minimum)
}

problems contains sprintf("minimumDuration %s is above the 87600h maximum", [minimum]) if million_hours(minimum)

problems contains sprintf("minimumDuration %s is below the 24h floor", [minimum]) if lib.duration_ns(minimum) < floor_ns

problems contains sprintf("minimumDuration %s is above the 87600h maximum", [minimum]) if lib.duration_ns(minimum) > maximum_ns

# Hours written with seven digits or more are a million hours or more:
# beyond the duration pattern, from 2562048h beyond the engines' durations
# too, and above the maximum without being parsed.
million_hours(d) if {
	is_string(d)
	regex.match(`^[1-9][0-9]{6,}h$`, d)
}

# Once the lease is bound, minimumDuration is neither removed nor shortened.

problems contains sprintf("minimumDuration cannot be removed after binding (it was %s)", [was]) if {
	was := bound_minimum
	not has_minimum
}

problems contains sprintf("minimumDuration cannot shrink after binding (from %s to %s)", [was, minimum]) if {
	was := bound_minimum
	lib.duration_ns(minimum) < lib.duration_ns(was)
}

# bound_minimum is the stored minimumDuration of a bound lease being updated.
bound_minimum := d if {
	input.request.operation == "UPDATE"
	lib.old.status.boundAt != null
	d := lib.old.spec.minimumDuration
	lib.is_duration(d)
}

has_minimum if _ = lib.new.spec.minimumDuration

# status.earliestReleaseAt, once set, is never removed, never moved earlier,
# and is at least minimumDuration, rounded up to a whole second, after
# boundAt: Kubernetes stores times to the second, so a fractional duration
# such as 24h0.5s binds until the next whole second.

problems contains sprintf("status.earliestReleaseAt cannot be removed (it was %s)", [was]) if {
	was := old_era
	not new_era
}

problems contains sprintf("status.earliestReleaseAt cannot move earlier (from %s to %s)", [was, era]) if {
	was := old_era
	era := new_era
	time.parse_rfc3339_ns(era) < time.parse_rfc3339_ns(was)
}

problems contains sprintf("status.earliestReleaseAt %s is less than minimumDuration %s after boundAt %s", [era, minimum, bound]) if {
	bound := lib.new.status.boundAt
	bound != null
	era := new_era
	status_times_written
	time.parse_rfc3339_ns(era) - time.parse_rfc3339_ns(bound) < whole_seconds_ns(lib.duration_ns(minimum))
}

# whole_seconds_ns rounds a duration in nanoseconds up to a whole second,
# in integers: exact for every duration the schema admits.
whole_seconds_ns(ns) := ns + ((second_ns - (ns % second_ns)) % second_ns)

second_ns := 1000000000

old_era := e if {
	e := lib.old.status.earliestReleaseAt
	e != null
}

new_era := e if {
	e := lib.new.status.earliestReleaseAt
	e != null
}

status_times_written if lib.changed(["status", "earliestReleaseAt"])

status_times_written if lib.changed(["status", "boundAt"])
