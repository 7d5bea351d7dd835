package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2/event"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
	"github.com/boualleiguie/macrack-operator/internal/audit/billing"
	"github.com/boualleiguie/macrack-operator/internal/audit/denial"
	"github.com/boualleiguie/macrack-operator/internal/audit/event"
	"github.com/boualleiguie/macrack-operator/internal/audit/sink"
)

// The billing window of these tests.
const (
	billFrom = "2026-06-01T00:00:00Z"
	// billTo is past: a window that ends in the future is billed up to now
	// (TestAWindowIntoTheFutureIsBilledUpToNow), these tests bill the day.
	billTo = "2026-06-02T00:00:00Z"
)

var auditOrigin = event.Origin{Cluster: "eu-1"}

func ts(s string) time.Time {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return t
}

// object is a journaled object's identity.
func object(namespace, name, uid string) metav1.Object {
	return &metav1.ObjectMeta{Namespace: namespace, Name: name, UID: types.UID(uid)}
}

func auditEvent(t *testing.T, kind, controller string, obj metav1.Object, seq int64, typ, at string, attrs map[string]string) cloudevents.Event {
	t.Helper()
	ev, err := auditOrigin.Event(kind, controller, obj, fleetv1alpha1.AuditRecord{Sequence: seq, Type: typ, Time: metav1.NewTime(ts(at)), Attributes: attrs})
	if err != nil {
		t.Fatal(err)
	}
	return ev
}

// leaseEvents are a lease's records: created, bound at bound, and released
// at released unless it is empty.
func leaseEvents(t *testing.T, tenant, name, bound, released string) []cloudevents.Event {
	t.Helper()
	obj := object(tenant, name, "uid-"+name)
	evs := []cloudevents.Event{
		auditEvent(t, "lease", "macrack-lease", obj, 1, "created", bound, nil),
		auditEvent(t, "lease", "macrack-lease", obj, 2, "bound", bound, map[string]string{"from": "Pending", "boundAt": bound}),
	}
	if released != "" {
		evs = append(evs, auditEvent(t, "lease", "macrack-lease", obj, 3, "released", released,
			map[string]string{"from": "Bound", "boundAt": bound, "releasedAt": released}))
	}
	return evs
}

// quarantineEvents are a leased chassis' quarantine, started and ended.
func quarantineEvents(t *testing.T, serial, tenant, lease, start, end string) []cloudevents.Event {
	t.Helper()
	obj := object("", "mac-"+strings.ToLower(serial), "uid-"+serial)
	attrs := func() map[string]string {
		return map[string]string{"serial": serial, "quarantinedAt": start, "tenant": tenant, "lease": lease, "leaseUID": "uid-" + lease}
	}
	ended := attrs()
	ended["recoveredAt"] = end
	return []cloudevents.Event{
		auditEvent(t, "chassis", "macrack-node", obj, 7, "quarantine.started", start, attrs()),
		auditEvent(t, "chassis", "macrack-node", obj, 8, "quarantine.ended", end, ended),
	}
}

// dayOfRecords is a day's stream, for [billFrom, billTo):
//
//	tenant-a         a1 02:00-08:30                        6.50 h
//	                 a2 20:00-(never released)             4.00 h
//	tenant-b         b1 May 31 22:00-01:15                 1.25 h
//	                 its chassis quarantined 00:30-01:00   0.50 h of outage
//	tenant-platform  p1 12:00-12:20                        0.33 h
func dayOfRecords(t *testing.T) []cloudevents.Event {
	var evs []cloudevents.Event
	evs = append(evs, leaseEvents(t, "tenant-a", "a1", "2026-06-01T02:00:00Z", "2026-06-01T08:30:00Z")...)
	evs = append(evs, leaseEvents(t, "tenant-a", "a2", "2026-06-01T20:00:00Z", "")...)
	evs = append(evs, leaseEvents(t, "tenant-b", "b1", "2026-05-31T22:00:00Z", "2026-06-01T01:15:00Z")...)
	evs = append(evs, quarantineEvents(t, "C02B1", "tenant-b", "b1", "2026-06-01T00:30:00Z", "2026-06-01T01:00:00Z")...)
	evs = append(evs, leaseEvents(t, "tenant-platform", "p1", "2026-06-01T12:00:00Z", "2026-06-01T12:20:00Z")...)
	d, err := auditOrigin.Denial(denial.Denial{Layer: "webhook", Rule: "lease.floor", Code: "LeaseTooShort", Kind: "MacNodeLease",
		Namespace: "tenant-a", Name: "short", Key: "req-1", At: ts("2026-06-01T03:00:00Z")})
	if err != nil {
		t.Fatal(err)
	}
	return append(evs, d)
}

// dayTable is dayOfRecords' report, to the byte.
const dayTable = `TENANT           LEASES  CHASSIS-HOURS  OUTAGE-HOURS
tenant-a         2       10.50          0.00
tenant-b         1       1.25           0.50
tenant-platform  1       0.33           0.00
TOTAL            4       12.08          0.50
`

// writeLines writes evs as the operator's stdout sink does, to a file.
func writeLines(t *testing.T, evs []cloudevents.Event, extra ...string) string {
	t.Helper()
	var buf bytes.Buffer
	sink := sink.NewLines(&buf)
	for _, ev := range evs {
		if err := sink.Publish(context.Background(), ev); err != nil {
			t.Fatal(err)
		}
	}
	for _, s := range extra {
		buf.WriteString(s)
	}
	path := filepath.Join(t.TempDir(), "events.jsonl")
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// withDuplicates is evs, then every one of them again in reverse order, and
// the first three a third time: what an exporter that lost its
// acknowledgements would have sent to stdout.
func withDuplicates(evs []cloudevents.Event) []cloudevents.Event {
	out := append([]cloudevents.Event{}, evs...)
	for i := len(evs) - 1; i >= 0; i-- {
		out = append(out, evs[i])
	}
	return append(out, evs[:3]...)
}

func TestBillingReportFromAFileWithDuplicates(t *testing.T) {
	t.Parallel()
	evs := dayOfRecords(t)
	file := writeLines(t, withDuplicates(evs), "\n   \n")

	r := runAt(t, afterTheDay, "", "billing", "report", "--from", billFrom, "--to", billTo, "--file", file)
	if r.code != 0 || r.stdout != dayTable {
		t.Errorf("exit %d\nstdout:\n%s\nwant:\n%s\nstderr:\n%s", r.code, r.stdout, dayTable, r.stderr)
	}
	// Positive control: each record once gives the same table.
	once := runAt(t, afterTheDay, "", "billing", "report", "--from", billFrom, "--to", billTo, "--file", writeLines(t, evs))
	if once.code != 0 || once.stdout != dayTable {
		t.Errorf("without duplicates: exit %d\n%s%s", once.code, once.stdout, once.stderr)
	}

	js := runAt(t, afterTheDay, "", "billing", "report", "--from", billFrom, "--to", billTo, "--file", file, "-o", "json")
	if js.code != 0 {
		t.Fatalf("-o json: exit %d\n%s", js.code, js.stderr)
	}
	var rep BillingReport
	if err := json.Unmarshal([]byte(js.stdout), &rep); err != nil {
		t.Fatalf("-o json is not JSON: %v\n%s", err, js.stdout)
	}
	if rep.APIVersion != "macrackctl/v1" || rep.Kind != "BillingReport" || rep.From != billFrom || rep.To != billTo {
		t.Errorf("envelope %+v", rep)
	}
	if rep.Records != 2*len(evs)+3 || rep.Duplicates != len(evs)+3 {
		t.Errorf("records %d duplicates %d, want %d and %d", rep.Records, rep.Duplicates, 2*len(evs)+3, len(evs)+3)
	}
	want := []billing.Usage{
		{Tenant: "tenant-a", Leases: 2, ChassisHours: 10.5},
		{Tenant: "tenant-b", Leases: 1, ChassisHours: 1.25, OutageHours: 0.5},
		{Tenant: "tenant-platform", Leases: 1, ChassisHours: 1.0 / 3},
	}
	if len(rep.Usage) != len(want) {
		t.Fatalf("usage %+v, want %+v", rep.Usage, want)
	}
	for i, u := range rep.Usage {
		w := want[i]
		if u.Tenant != w.Tenant || u.Leases != w.Leases || !near(u.ChassisHours, w.ChassisHours) || !near(u.OutageHours, w.OutageHours) {
			t.Errorf("usage[%d] %+v, want %+v", i, u, w)
		}
	}
	var raw map[string]any
	_ = json.Unmarshal([]byte(js.stdout), &raw)
	for _, k := range []string{"apiVersion", "kind", "from", "to", "records", "duplicates", "usage"} {
		if _, ok := raw[k]; !ok {
			t.Errorf("the JSON report lacks %q:\n%s", k, js.stdout)
		}
	}
}

func near(a, b float64) bool { return a-b < 1e-9 && b-a < 1e-9 }

func TestBillingReportReadsStdin(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile(writeLines(t, withDuplicates(dayOfRecords(t))))
	if err != nil {
		t.Fatal(err)
	}
	r := runAt(t, afterTheDay, string(data), "billing", "report", "--from", billFrom, "--to", billTo, "--file", "-")
	if r.code != 0 || r.stdout != dayTable {
		t.Errorf("exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
}

func TestBillingReportWithNothingToBill(t *testing.T) {
	t.Parallel()
	file := writeLines(t, dayOfRecords(t))
	r := runAt(t, afterTheDay, "", "billing", "report", "--from", "2026-01-01T00:00:00Z", "--to", "2026-02-01T00:00:00Z", "--file", file)
	want := "TENANT  LEASES  CHASSIS-HOURS  OUTAGE-HOURS\nTOTAL   0       0.00           0.00\n"
	if r.code != 0 || r.stdout != want {
		t.Errorf("exit %d\n%q\nwant %q\n%s", r.code, r.stdout, want, r.stderr)
	}
	js := runAt(t, afterTheDay, "", "billing", "report", "--from", "2026-01-01T00:00:00Z", "--to", "2026-02-01T00:00:00Z", "--file", file, "-o", "json")
	if js.code != 0 || !strings.Contains(js.stdout, `"usage": []`) {
		t.Errorf("an empty report's usage is not []: exit %d\n%s", js.code, js.stdout)
	}
}

// Each refusal beside its positive control: the same run with the one
// fault mended succeeds.
func TestBillingReportErrors(t *testing.T) {
	t.Parallel()
	good := writeLines(t, dayOfRecords(t))
	notCE := writeLines(t, dayOfRecords(t)[:2], `{"level":"info","msg":"a log line, not a record"}`+"\n")
	notJSON := writeLines(t, dayOfRecords(t)[:2], "\n", "level=info msg=hello\n")
	invalid := writeLines(t, dayOfRecords(t)[:1], `{"specversion":"1.0","id":"x","type":"io.macrack.lease.bound"}`+"\n")
	window := []string{"--from", billFrom, "--to", billTo}
	cases := []struct {
		name      string
		args      []string
		stderr    []string
		mendedArg []string
	}{
		{"--from missing", []string{"--to", billTo, "--file", good},
			[]string{"--from is required"}, []string{"--from", billFrom, "--to", billTo, "--file", good}},
		{"--from not RFC 3339", []string{"--from", "2026-06-01", "--to", billTo, "--file", good},
			[]string{`--from "2026-06-01" is not an RFC 3339 time`}, []string{"--from", "2026-06-01T00:00:00+02:00", "--to", billTo, "--file", good}},
		{"--to missing", []string{"--from", billFrom, "--file", good},
			[]string{"--to is required"}, append(window, "--file", good)},
		{"--to not RFC 3339", []string{"--from", billFrom, "--to", "tomorrow", "--file", good},
			[]string{`--to "tomorrow" is not an RFC 3339 time`}, append(window, "--file", good)},
		{"--to before --from", []string{"--from", billTo, "--to", billFrom, "--file", good},
			[]string{"--to " + billFrom + " is not after --from " + billTo}, append(window, "--file", good)},
		{"--to equal to --from", []string{"--from", billFrom, "--to", billFrom, "--file", good},
			[]string{"is not after --from"}, append(window, "--file", good)},
		{"both --nats and --file", append(window, "--nats", "nats://127.0.0.1:1", "--file", good),
			[]string{"--nats and --file are exclusive"}, append(window, "--file", good)},
		{"neither --nats nor --file", window,
			[]string{"want --nats URL (the audit stream) or --file FILE"}, append(window, "--file", good)},
		{"--stream with --file", append(window, "--file", good, "--stream", "OTHER"),
			[]string{"--stream applies to --nats"}, append(window, "--file", good)},
		{"an unknown output", append(window, "--file", good, "-o", "yaml"),
			[]string{`"yaml" is not text or json`}, append(window, "--file", good, "-o", "text")},
		{"a positional argument", append(window, "--file", good, "extra"),
			[]string{`unexpected argument "extra"`}, append(window, "--file", good)},
		{"a missing file", append(window, "--file", good+".missing"),
			[]string{"events.jsonl.missing", "no such file"}, append(window, "--file", good)},
		{"a JSON line that is not a CloudEvent", append(window, "--file", notCE),
			[]string{notCE + ":3: not a CloudEvent"}, append(window, "--file", good)},
		{"a line that is not JSON", append(window, "--file", notJSON),
			[]string{notJSON + ":4: not a CloudEvent"}, append(window, "--file", good)},
		{"a CloudEvent that does not validate", append(window, "--file", invalid),
			[]string{invalid + ":2: not a CloudEvent", "source"}, append(window, "--file", good)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := runAt(t, afterTheDay, "", append([]string{"billing", "report"}, tc.args...)...)
			expectation{code: 2, stderr: tc.stderr, absent: append([]string{"TENANT"}, noStackTrace...)}.check(t, r)
			mended := runAt(t, afterTheDay, "", append([]string{"billing", "report"}, tc.mendedArg...)...)
			expectation{code: 0, stdout: []string{"TENANT", "TOTAL"}}.check(t, mended)
		})
	}
}

func TestBillingUsage(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want expectation
	}{
		{[]string{"billing", "report", "--help"}, expectation{code: 0, stdout: []string{"--from TIME", "--file FILE", "OUTAGE-HOURS", "Exit codes:"}}},
		{[]string{"help", "billing"}, expectation{code: 0, stdout: []string{"report"}}},
		{[]string{"billing"}, expectation{code: 2, stderr: []string{"no subcommand given", "macrackctl billing --help"}}},
		{[]string{"billing", "invoice"}, expectation{code: 2, stderr: []string{`unknown subcommand "invoice"`}}},
		{[]string{"help"}, expectation{code: 0, stdout: []string{"audit ", "billing "}}},
	} {
		tc.want.check(t, runAt(t, afterTheDay, "", tc.args...))
	}
}

// afterTheDay is a clock past the billed day.
var afterTheDay = time.Date(2026, 6, 3, 0, 0, 0, 0, time.UTC)

// TestAWindowIntoTheFutureIsBilledUpToNow: a lease still bound counts up
// to now, not to a window's end that has not come; the same report run
// after the window ends counts the whole window.
func TestAWindowIntoTheFutureIsBilledUpToNow(t *testing.T) {
	bound := time.Date(2026, 6, 1, 10, 0, 0, 0, time.UTC)
	lease := &metav1.ObjectMeta{Name: "mini", Namespace: "tenant-a", UID: "l-open"}
	ev, err := event.Origin{Cluster: "c"}.Event("lease", "macrack-lease", lease, fleetv1alpha1.AuditRecord{
		Sequence: 2, Type: "bound", Time: metav1.NewTime(bound),
		Attributes: map[string]string{"boundAt": bound.Format(time.RFC3339)},
	})
	if err != nil {
		t.Fatal(err)
	}
	file := writeLines(t, []cloudevents.Event{ev})
	now := time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)
	r := runAt(t, now, "", "billing", "report", "--from", billFrom, "--to", billTo, "--file", file, "-o", "json")
	var rep BillingReport
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil || len(rep.Usage) != 1 || rep.Usage[0].ChassisHours != 2 || rep.To != "2026-06-01T12:00:00Z" {
		t.Fatalf("at noon: %v %s", err, r.stdout)
	}
	r = runAt(t, afterTheDay, "", "billing", "report", "--from", billFrom, "--to", billTo, "--file", file, "-o", "json")
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil || len(rep.Usage) != 1 || rep.Usage[0].ChassisHours != 14 {
		t.Fatalf("after the day: %v %s", err, r.stdout)
	}
	// --now says what the report is as of, whatever this machine's clock.
	r = runAt(t, afterTheDay, "", "billing", "report", "--from", billFrom, "--to", billTo, "--file", file, "--now", "2026-06-01T13:00:00Z", "-o", "json")
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil || len(rep.Usage) != 1 || rep.Usage[0].ChassisHours != 3 {
		t.Fatalf("--now 13:00: %v %s", err, r.stdout)
	}
	r = runAt(t, afterTheDay, "", "billing", "report", "--from", billFrom, "--to", billTo, "--file", file, "--now", "1pm")
	if r.code != 2 || !strings.Contains(r.stderr, `--now "1pm" is not an RFC 3339 time`) {
		t.Fatalf("a bad --now: exit %d %s", r.code, r.stderr)
	}
}
