package vectors

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"testing"
	"time"
)

// mutator sets one schema-valid value, derived from s and n, somewhere in an
// input document. Only values the CRD schemas (or the core API) accept are
// produced: the fuzz looks for disagreements on inputs that can really occur.
type mutator struct {
	name  string
	apply func(doc map[string]any, s string, n int64)
}

var (
	quantitySuffixes = []string{"", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei", "n", "u", "m", "k", "M", "G", "T", "P", "E", "e3", "e12", "E6", "e-3", "e+9"}
	durationUnits    = []string{"ns", "us", "ms", "s", "m", "h"}
	phasesMacNode    = []string{"Pending", "Enrolled", "Ready", "Leased", "Quarantined", "Rebooting", "Retired"}
	phasesLease      = []string{"Pending", "Bound", "Held", "Released"}
	users            = []string{
		"system:serviceaccount:macrack-agents:agent-c02aaaaaaaa1",
		"system:serviceaccount:macrack-agents:agent-c02xl0ghjgh5",
		"system:serviceaccount:macrack-agents:agent-c02bbbbbbbb2",
		"system:serviceaccount:macrack-system:macrack-operator",
		"system:serviceaccount:tenant-a:builder",
		"alice",
	}
)

func pick[T any](list []T, n int64) T {
	if n < 0 {
		n = -n
	}
	if n < 0 { // math.MinInt64
		n = 0
	}
	return list[n%int64(len(list))]
}

func abs(n int64) int64 {
	if n < 0 {
		if n == -n {
			return 0
		}
		return -n
	}
	return n
}

// quantity renders a schema-valid quantity (int-or-string) from n and s.
func quantity(s string, n int64) any {
	v := abs(n) % 10000000
	switch {
	case len(s) > 0 && s[0]%3 == 0:
		return v // an integer, as JSON would carry it
	case len(s) > 0 && s[0]%3 == 1:
		return fmt.Sprintf("%d.%d%s", v/1000, v%1000, pick(quantitySuffixes, int64(len(s))))
	}
	return fmt.Sprintf("%d%s", v, pick(quantitySuffixes, int64(len(s))))
}

func duration(s string, n int64) string {
	d := fmt.Sprintf("%d%s", abs(n)%200000, pick(durationUnits, int64(len(s))))
	if len(s) > 1 && s[1]%2 == 0 {
		d += fmt.Sprintf("%d%s", abs(n/7)%60, pick(durationUnits, int64(s[1])))
	}
	return d
}

func timestamp(n int64) string {
	return time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC).Add(time.Duration(n%(400*3600)) * time.Second).Format(time.RFC3339)
}

// taints renders up to three Node taints, macrack.io/ and foreign, from s and n.
func taints(s string, n int64) []any {
	keys := []string{"macrack.io/unleased", "macrack.io/leased", "example.com/x", "macrack.io/quarantined"}
	var out []any
	for i := int64(0); i < abs(n)%4; i++ {
		out = append(out, map[string]any{"key": pick(keys, n/(i+1)), "value": s, "effect": "NoSchedule"})
	}
	return out
}

func set(doc map[string]any, value any, path ...string) {
	m := doc
	for _, p := range path[:len(path)-1] {
		next, ok := m[p].(map[string]any)
		if !ok {
			next = map[string]any{}
			m[p] = next
		}
		m = next
	}
	m[path[len(path)-1]] = value
}

// mutators: a corpus entry names one by its index modulo the list's length,
// so adding one means re-pointing the committed entries in testdata/fuzz.
var mutators = []mutator{
	{"minimumDuration", func(d map[string]any, s string, n int64) { set(d, duration(s, n), "object", "spec", "minimumDuration") }},
	{"old minimumDuration", func(d map[string]any, s string, n int64) {
		set(d, duration(s, n), "oldObject", "spec", "minimumDuration")
	}},
	{"earliestReleaseAt", func(d map[string]any, _ string, n int64) {
		set(d, timestamp(n), "object", "status", "earliestReleaseAt")
	}},
	{"old earliestReleaseAt", func(d map[string]any, _ string, n int64) {
		set(d, timestamp(n), "oldObject", "status", "earliestReleaseAt")
	}},
	{"boundAt", func(d map[string]any, _ string, n int64) { set(d, timestamp(n), "object", "status", "boundAt") }},
	{"class disk", func(d map[string]any, s string, n int64) { set(d, quantity(s, n), "object", "spec", "disk") }},
	{"class networkGbps", func(d map[string]any, _ string, n int64) { set(d, 1+abs(n)%400, "object", "spec", "networkGbps") }},
	{"class vmCapacity", func(d map[string]any, _ string, n int64) { set(d, 1+abs(n)%2, "object", "spec", "vmCapacity") }},
	{"node capacity", func(d map[string]any, s string, n int64) {
		set(d, fmt.Sprint(quantity(s, n)), "object", "status", "capacity", "macrack.io/macos-vm")
	}},
	{"node allocatable", func(d map[string]any, s string, n int64) {
		set(d, fmt.Sprint(quantity(s, n)), "object", "status", "allocatable", "macrack.io/macos-vm")
	}},
	{"macnode phase", func(d map[string]any, _ string, n int64) { set(d, pick(phasesMacNode, n), "object", "status", "phase") }},
	{"old macnode phase", func(d map[string]any, _ string, n int64) {
		set(d, pick(phasesMacNode, n), "oldObject", "status", "phase")
	}},
	{"sip", func(d map[string]any, _ string, n int64) {
		set(d, n%2 == 0, "object", "status", "reported", "sipEnabled")
	}},
	{"boot-args", func(d map[string]any, s string, _ int64) { set(d, s, "object", "status", "reported", "bootArgs") }},
	{"user", func(d map[string]any, _ string, n int64) { set(d, pick(users, n), "request", "userInfo", "username") }},
	{"operation", func(d map[string]any, _ string, n int64) {
		set(d, pick([]string{"CREATE", "UPDATE", "DELETE"}, n), "request", "operation")
	}},
	{"subresource", func(d map[string]any, _ string, n int64) {
		set(d, pick([]string{"", "status"}, n), "request", "subResource")
	}},
	{"taints", func(d map[string]any, s string, n int64) { set(d, taints(s, n), "object", "spec", "taints") }},
	{"tenant label", func(d map[string]any, s string, _ int64) {
		set(d, s, "object", "metadata", "labels", "macrack.io/tenant")
	}},
	{"finalizers", func(d map[string]any, _ string, n int64) {
		all := []any{"macrack.io/disk-wipe", "example.com/keep", "macrack.io/lease"}
		set(d, all[:abs(n)%4], "object", "metadata", "finalizers")
	}},
	{"node name", func(d map[string]any, _ string, n int64) {
		set(d, pick([]string{"c02aaaaaaaa1", "c02bbbbbbbb2", ""}, n), "object", "status", "nodeName")
	}},
	{"old taints", func(d map[string]any, s string, n int64) { set(d, taints(s, n), "oldObject", "spec", "taints") }},
	{"old tenant label", func(d map[string]any, s string, _ int64) {
		set(d, s, "oldObject", "metadata", "labels", "macrack.io/tenant")
	}},
	{"object name", func(d map[string]any, _ string, n int64) {
		set(d, pick([]string{"c02aaaaaaaa1", "c02bbbbbbbb2", "c02xl0ghjgh5"}, n), "object", "metadata", "name")
	}},
	{"request namespace", func(d map[string]any, _ string, n int64) {
		set(d, pick([]string{"kube-node-lease", "macrack-agents", "default", ""}, n), "request", "namespace")
	}},
	{"request name", func(d map[string]any, _ string, n int64) {
		set(d, pick([]string{"agent-c02aaaaaaaa1", "agent-c02bbbbbbbb2", "builder", "c02aaaaaaaa1"}, n), "request", "name")
	}},
	{"lease phase", func(d map[string]any, _ string, n int64) { set(d, pick(phasesLease, n), "object", "status", "phase") }},
	{"inventory lease phase", func(d map[string]any, _ string, n int64) {
		set(d, pick(phasesLease, n), "inventory", "lease", "status", "phase")
	}},
	{"inventory lease namespace", func(d map[string]any, _ string, n int64) {
		set(d, pick([]string{"tenant-a", "tenant-b"}, n), "inventory", "lease", "metadata", "namespace")
	}},
	{"inventory lease deletion", func(d map[string]any, _ string, n int64) {
		set(d, timestamp(n), "inventory", "lease", "metadata", "deletionTimestamp")
	}},
	{"macnode quarantine", func(d map[string]any, s string, n int64) { set(d, quarantine(s, n), "object", "status", "quarantine") }},
	{"old macnode quarantine", func(d map[string]any, s string, n int64) {
		set(d, quarantine(s, n), "oldObject", "status", "quarantine")
	}},
}

// quarantine renders a MacNode's status.quarantine from s and n: active,
// recovered or needing attention.
func quarantine(s string, n int64) map[string]any {
	q := map[string]any{"bootID": "boot-" + fmt.Sprint(abs(n)%3), "evidence": s, "quarantinedAt": timestamp(n)}
	switch abs(n) % 3 {
	case 1:
		q["recoveredAt"] = timestamp(n + 600)
	case 2:
		q["needsAttention"] = true
	}
	return q
}

// FuzzEnginesAgree mutates schema-valid vector inputs and asserts that,
// wherever a rule has a CEL twin for the request, Rego and CEL answer alike;
// that the Rego query specialized for the request's shape answers what the
// rule's whole query answers, messages included; and that nothing panics.
// Seeds are the shared vectors.
func FuzzEnginesAgree(f *testing.F) {
	whole, e := wholeAndSpecialized(f)
	cases, err := Load(os.DirFS(vectorsDir()))
	if err != nil {
		f.Fatal(err)
	}
	for i := range cases {
		f.Add(uint16(i), uint8(i), "", int64(0))
		f.Add(uint16(i), uint8(i*7), "24h", int64(86400))
	}
	// lease.floor's bounds. Around the 87600h maximum, on every lease.floor
	// vector: a five-letter s whose second letter is odd makes duration()
	// render exactly n hours. At Go's duration limit, which duration() never
	// reaches: every mutator on the vectors that hold 2562047h or 2562048h.
	for i, c := range cases {
		if c.Rule != "lease.floor" {
			continue
		}
		for _, n := range []int64{87599, 87600, 87601, 100000, 199999} {
			f.Add(uint16(i), mutatorIndex(f, "minimumDuration"), "aaaaa", n)
			f.Add(uint16(i), mutatorIndex(f, "old minimumDuration"), "aaaaa", n)
		}
		object, _ := c.Raw["object"].(map[string]any)
		spec, _ := object["spec"].(map[string]any)
		if d := spec["minimumDuration"]; d == "2562047h" || d == "2562048h" {
			for m := range mutators {
				f.Add(uint16(i), uint8(m), "aaaaa", int64(87601))
			}
		}
	}
	f.Fuzz(func(t *testing.T, caseIndex uint16, mut uint8, s string, n int64) {
		c := cases[int(caseIndex)%len(cases)]
		doc := deepCopy(c.Raw)
		m := mutators[int(mut)%len(mutators)]
		m.apply(doc, s, n)
		in, err := ParseInput(doc)
		if err != nil {
			return
		}
		ra, ca, applies, err := e.Answers(context.Background(), c.Rule, in)
		if err != nil {
			return // a malformed input the engine refuses before evaluating
		}
		if wa, _, _, err := whole.Answers(context.Background(), c.Rule, in); err != nil || !sameRegoAnswer(wa, ra) {
			js, _ := json.Marshal(doc)
			t.Fatalf("%s mutated by %q (s=%q n=%d): the whole rule says %s %v (%v), specialized %s %v\ninput: %s", c.ID(), m.name, s, n, wa, wa.Detail, err, ra, ra.Detail, js)
		}
		if applies && !ra.Equal(ca) {
			js, _ := json.Marshal(doc)
			t.Fatalf("%s mutated by %q (s=%q n=%d): Rego %s, CEL %s\ninput: %s", c.ID(), m.name, s, n, ra, ca, js)
		}
	})
}

// mutatorIndex is the index of the mutator with this name, for seeds.
func mutatorIndex(f *testing.F, name string) uint8 {
	f.Helper()
	for i, m := range mutators {
		if m.name == name {
			return uint8(i)
		}
	}
	f.Fatalf("no mutator %q", name)
	return 0
}

func deepCopy(m map[string]any) map[string]any {
	var out map[string]any
	b, _ := json.Marshal(m)
	_ = json.Unmarshal(b, &out)
	return wholeNumbers(out).(map[string]any)
}
