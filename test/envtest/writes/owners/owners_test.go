package owners

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
)

const macnodes = "macnodes.fleet.macrack.io"

var (
	lease     = Writer{"macrack-operator", "macrack-lease"}
	node      = Writer{"macrack-operator", "macrack-node"}
	placement = Writer{"macrack-operator", "macrack-placement"}
	agent     = Writer{"system:serviceaccount:macrack-agents:agent-c02", "agent"}
)

func written(t *testing.T, w Writer, uid string, status map[string]any) Write {
	t.Helper()
	raw, err := json.Marshal(map[string]any{"metadata": map[string]any{"name": "c02", "uid": uid}, "status": status})
	if err != nil {
		t.Fatal(err)
	}
	return Write{Writer: w, Resource: macnodes, Object: raw}
}

func cond(typ, status string) map[string]any {
	return map[string]any{"type": typ, "status": status, "reason": "R", "message": "m"}
}

func TestChangedNamesEachFieldEachConditionAndEachJournalField(t *testing.T) {
	for _, tc := range []struct {
		name          string
		before, after map[string]any
		want          []string
	}{
		{"nothing before: every field is new", nil, map[string]any{"phase": "Pending", "conditions": []any{cond("Ready", "False")}},
			[]string{"status.conditions[type=Ready]", "status.phase"}},
		{"the same status changes nothing", map[string]any{"phase": "Ready"}, map[string]any{"phase": "Ready"}, nil},
		{"a field removed is a change", map[string]any{"binding": map[string]any{"leaseName": "l"}}, map[string]any{}, []string{"status.binding"}},
		{"only the condition that changed, wherever it stands in the list",
			map[string]any{"conditions": []any{cond("Ready", "True"), cond("Leased", "False")}},
			map[string]any{"conditions": []any{cond("Leased", "True"), cond("Ready", "True")}},
			[]string{"status.conditions[type=Leased]"}},
		{"the journal's cursor apart from its records",
			map[string]any{"audit": map[string]any{"nextSequence": 3.0, "exportedSequence": 1.0}},
			map[string]any{"audit": map[string]any{"nextSequence": 3.0, "exportedSequence": 2.0}},
			[]string{"status.audit.exportedSequence"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Changed(tc.before, tc.after); !slices.Equal(got, tc.want) {
				t.Fatalf("Changed = %v, want %v", got, tc.want)
			}
		})
	}
}

// The positive control of the writes suite's one-writer test: two writers
// of one field are flagged, by identity or by field manager alone.
func TestTwoWritersOfOneFieldAreFlagged(t *testing.T) {
	l := NewLedger()
	if err := l.Seed(written(t, node, "u1", map[string]any{"phase": "Ready"})); err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		w      Writer
		status map[string]any
	}{
		// The lease controller claims, and writes the phase too.
		{lease, map[string]any{"phase": "Leased", "binding": map[string]any{"leaseName": "l"}}},
		{placement, map[string]any{"phase": "Leased", "binding": map[string]any{"leaseName": "l"}, "slots": []any{"i1"}}},
		// The node controller writes the phase back and forth.
		{node, map[string]any{"phase": "Ready", "binding": map[string]any{"leaseName": "l"}, "slots": []any{"i1"}}},
		{node, map[string]any{"phase": "Leased", "binding": map[string]any{"leaseName": "l"}, "slots": []any{"i1"}}},
		// The agent writes a field only it may, and one that is not its own.
		{agent, map[string]any{"phase": "Leased", "binding": map[string]any{"leaseName": "l"}, "slots": []any{}, "reported": map[string]any{"bootID": "b"}}},
	}
	for _, s := range steps {
		if _, err := l.Record(written(t, s.w, "u1", s.status)); err != nil {
			t.Fatal(err)
		}
	}
	got := l.Conflicts(nil)
	var paths []string
	for _, c := range got {
		paths = append(paths, c.Path)
	}
	if want := []string{"status.phase", "status.slots"}; !slices.Equal(paths, want) {
		t.Fatalf("conflicts %v, want %v", got, want)
	}
	if s := got[0].String(); !strings.Contains(s, "macrack-operator/macrack-lease (1)") || !strings.Contains(s, "macrack-operator/macrack-node (2)") {
		t.Errorf("the phase's conflict names %q, want the lease controller once and the node controller twice", s)
	}

	// An exception names the field and its writers, and covers those
	// alone: a third writer is still a conflict.
	except := []Exception{{Resource: macnodes, Path: "status.phase", Writers: []Writer{lease, node}, Reason: "test"}}
	if got := l.Conflicts(except); len(got) != 1 || got[0].Path != "status.slots" {
		t.Fatalf("with the phase excepted: %v, want the slots alone", got)
	}
	if got := l.Conflicts([]Exception{{Resource: macnodes, Path: "status.slots", Writers: []Writer{placement}}}); len(got) != 2 {
		t.Fatalf("an exception that leaves out a writer hid a conflict: %v", got)
	}
}

func TestOneWriterPerFieldIsNoConflict(t *testing.T) {
	l := NewLedger()
	for _, s := range []struct {
		w      Writer
		status map[string]any
	}{
		{node, map[string]any{"phase": "Ready", "conditions": []any{cond("Ready", "True")}}},
		{lease, map[string]any{"phase": "Ready", "conditions": []any{cond("Ready", "True")}, "binding": map[string]any{"leaseName": "l"}}},
		{node, map[string]any{"phase": "Leased", "conditions": []any{cond("Ready", "True"), cond("Leased", "True")}, "binding": map[string]any{"leaseName": "l"}}},
	} {
		if _, err := l.Record(written(t, s.w, "u2", s.status)); err != nil {
			t.Fatal(err)
		}
	}
	// Another object's writers are its own.
	if _, err := l.Record(written(t, lease, "u3", map[string]any{"phase": "Ready"})); err != nil {
		t.Fatal(err)
	}
	if got := l.Conflicts(nil); len(got) != 0 {
		t.Fatalf("conflicts %v, want none", got)
	}
	if l.Writes() != 4 {
		t.Errorf("%d writes recorded, want 4", l.Writes())
	}
}
