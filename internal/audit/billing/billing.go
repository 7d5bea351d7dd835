// Package billing sums each tenant's chassis-hours from the audit stream's
// records: what `macrackctl billing report` prints, and what a billing
// system's own consumer of the stream must compute alike.
package billing

import (
	"fmt"
	"sort"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2/event"

	"github.com/boualleiguie/macrack-operator/internal/audit/event"
)

// Usage is one tenant's chassis time within a report's window.
type Usage struct {
	Tenant string `json:"tenant"`
	// Leases counts the leases whose bound time overlaps the window.
	Leases int `json:"leases"`
	// ChassisHours is the billable time: each lease from its bound record to
	// its released record (or the window's end), within the window.
	ChassisHours float64 `json:"chassisHours"`
	// OutageHours is the part of it the tenant's chassis spent in
	// quarantine: each quarantine's started to ended record, within the
	// lease that held the chassis. It is reported apart, for the billing
	// system to credit as its terms say.
	OutageHours float64 `json:"outageHours"`
}

type interval struct {
	tenant     string
	start, end time.Time
	// lease is an outage's lease UID: the outage is the tenant's only
	// while that lease held the chassis.
	lease string
}

// Report sums each tenant's billable chassis-hours over [from, to) from a
// stream's records. It reads each id once, however often the stream holds
// it.
func Report(events []cloudevents.Event, from, to time.Time) ([]Usage, error) {
	if !to.After(from) {
		return nil, fmt.Errorf("the window's end %s is not after its start %s", to.Format(time.RFC3339), from.Format(time.RFC3339))
	}
	seen := map[string]bool{}
	leases := map[string]*interval{}
	outages := map[string]*interval{}
	for _, ev := range events {
		if seen[ev.ID()] {
			continue
		}
		seen[ev.ID()] = true
		var d event.Data
		if err := ev.DataAs(&d); err != nil {
			return nil, fmt.Errorf("record %s: %w", ev.ID(), err)
		}
		switch ev.Type() {
		case event.Type("lease", "bound"):
			l := upsert(leases, d.UID)
			l.tenant, l.start = d.Namespace, attrTime(d, "boundAt", ev.Time())
		case event.Type("lease", "released"):
			l := upsert(leases, d.UID)
			l.tenant, l.end = d.Namespace, attrTime(d, "releasedAt", ev.Time())
		case event.Type("chassis", "quarantine.started"):
			// An unleased chassis' outage is no tenant's: its tenant stays
			// empty, and it counts nothing.
			o := upsert(outages, d.Attributes["serial"]+"/"+d.Attributes["quarantinedAt"])
			o.tenant, o.lease, o.start = d.Attributes["tenant"], d.Attributes["leaseUID"], attrTime(d, "quarantinedAt", ev.Time())
		case event.Type("chassis", "quarantine.ended"):
			// Its tenant is the start's: a lease let go during the
			// quarantine (one that needs a person, a retired chassis) has
			// left no binding, and the end names no tenant.
			o := upsert(outages, d.Attributes["serial"]+"/"+d.Attributes["quarantinedAt"])
			o.end = attrTime(d, "recoveredAt", ev.Time())
		}
	}
	usage := map[string]*Usage{}
	get := func(t string) *Usage {
		if usage[t] == nil {
			usage[t] = &Usage{Tenant: t}
		}
		return usage[t]
	}
	for _, l := range leases {
		if h := l.hoursWithin(from, to); h > 0 {
			u := get(l.tenant)
			u.Leases++
			u.ChassisHours += h
		}
	}
	for _, o := range outages {
		l := leases[o.lease]
		if o.tenant == "" || l == nil {
			continue
		}
		if h := o.within(l).hoursWithin(from, to); h > 0 {
			get(o.tenant).OutageHours += h
		}
	}
	out := make([]Usage, 0, len(usage))
	for _, u := range usage {
		out = append(out, *u)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Tenant < out[j].Tenant })
	return out, nil
}

func upsert(m map[string]*interval, key string) *interval {
	if m[key] == nil {
		m[key] = &interval{}
	}
	return m[key]
}

// hoursWithin is the interval's overlap with [from, to); an interval with
// no end yet runs to the window's end, and one with no start (its start
// record is outside what was read) counts nothing.
func (iv *interval) hoursWithin(from, to time.Time) float64 {
	if iv.start.IsZero() {
		return 0
	}
	end := iv.end
	if end.IsZero() || end.After(to) {
		end = to
	}
	start := iv.start
	if start.Before(from) {
		start = from
	}
	if !end.After(start) {
		return 0
	}
	return end.Sub(start).Hours()
}

// within is the outage iv clipped to its lease l: the part of the lease's
// billed time it took. A lease with no start bills nothing, nor does its
// outage.
func (iv *interval) within(l *interval) *interval {
	out := *iv
	if l.start.IsZero() {
		out.start = time.Time{}
		return &out
	}
	if out.start.Before(l.start) {
		out.start = l.start
	}
	if !l.end.IsZero() && (out.end.IsZero() || l.end.Before(out.end)) {
		out.end = l.end
	}
	return &out
}

func attrTime(d event.Data, key string, fallback time.Time) time.Time {
	if t, err := time.Parse(time.RFC3339, d.Attributes[key]); err == nil {
		return t
	}
	return fallback
}
