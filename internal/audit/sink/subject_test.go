package sink

import (
	"strings"
	"testing"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2/event"

	"github.com/boualleiguie/macrack-operator/internal/audit/event"
)

// TestEachRecordHasItsOwnSubject: a record's subject is its type's, then
// its id as one token. Ids that JetStream would read as several tokens or a
// wildcard are escaped, and no two ids share a subject: the stream's one
// message per subject is one record.
func TestEachRecordHasItsOwnSubject(t *testing.T) {
	ev := func(typ, id string) cloudevents.Event {
		e := cloudevents.New()
		e.SetType(typ)
		e.SetID(id)
		return e
	}
	for _, tc := range []struct {
		ev   cloudevents.Event
		want string
	}{
		{ev(event.Type("lease", "bound"), event.ID("lease", "0f6c3a1e-5b7d-4c2a-9e8f-1a2b3c4d5e6f", 3)), "macrack.audit.lease.bound.lease/0f6c3a1e-5b7d-4c2a-9e8f-1a2b3c4d5e6f/3"},
		{ev(event.Type("chassis", "quarantine.ended"), event.ID("chassis", "u-9", 12)), "macrack.audit.chassis.quarantine.ended.chassis/u-9/12"},
		{ev(event.Type("instance", "deleted"), event.DeletedID("instance", "u-2")), "macrack.audit.instance.deleted.instance/u-2/deleted"},
		{ev(event.Type("denial", "webhook"), "denial/0123abcd"), "macrack.audit.denial.webhook.denial/0123abcd"},
		{ev(event.Type("instance", "running"), event.FactID("instance", "u-3", "running", time.Date(2026, 6, 1, 9, 0, 5, 0, time.UTC))),
			"macrack.audit.instance.running.instance/u-3/running/2026-06-01T09%3A00%3A05Z"},
		{ev(event.Type("lease", "bound"), "a.b *>\t%"), "macrack.audit.lease.bound.a%2Eb%20%2A%3E%09%25"},
	} {
		if got := Subject(tc.ev); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.ev.ID(), got, tc.want)
		}
	}
	seen := map[string]string{}
	for _, id := range []string{"a.b", "a%2Eb", "a/b", "a b", "a%20b", "a*", "a>", "a%", "a%25"} {
		s := Subject(ev(event.Type("lease", "bound"), id))
		if other, ok := seen[s]; ok {
			t.Errorf("ids %q and %q share the subject %s", other, id, s)
		}
		seen[s] = id
		token := strings.TrimPrefix(s, "macrack.audit.lease.bound.")
		if strings.ContainsAny(token, ". \t*>") {
			t.Errorf("id %q: token %q is not one literal subject token", id, token)
		}
	}
}
