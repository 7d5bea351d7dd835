// Package owners checks DESIGN's one-writer rule on the API server's own
// record of the writes: each field of a status has one writer, named by
// its identity and its field manager. A write's fields are those it
// changed: its object's status as the API server answered it, against the
// status the write before it left.
package owners

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"sort"
	"strings"
)

// Writer is who wrote: the identity the API server authenticated, and the
// field manager the write named (or the API server derived from its user
// agent).
type Writer struct {
	Identity, Manager string
}

func (w Writer) String() string { return w.Identity + "/" + w.Manager }

// Write is one status write the API server took.
type Write struct {
	Writer
	// Resource is where it went, such as macnodes.fleet.macrack.io.
	Resource string
	// Object is the object the API server answered with, after the write.
	Object []byte
}

// Field is one field of one object's status.
type Field struct {
	// Resource, and Object as namespace/name (uid).
	Resource, Object string
	// Path is the status field: status.phase; status.conditions[type=X]
	// for each condition; status.audit.<field> for the audit journal, whose
	// records and cursor have a writer each.
	Path string
}

// Exception is a field with more than one writer, by design, and why.
type Exception struct {
	Resource, Path string
	// Writers are the writers allowed; any other is still a conflict.
	Writers []Writer
	Reason  string
}

// Conflict is a field that more than one writer wrote.
type Conflict struct {
	Field
	// Writers, with how many of their writes changed the field.
	Writers map[Writer]int
}

func (c Conflict) String() string {
	ws := make([]string, 0, len(c.Writers))
	for w, n := range c.Writers {
		ws = append(ws, fmt.Sprintf("%s (%d)", w, n))
	}
	sort.Strings(ws)
	return fmt.Sprintf("%s %s %s: written by %s", c.Resource, c.Object, c.Path, strings.Join(ws, ", "))
}

// Ledger follows each object's status through its writes, and who changed
// which of its fields.
type Ledger struct {
	status  map[string]map[string]any // by object uid
	writers map[Field]map[Writer]int
	writes  int
}

// NewLedger returns an empty ledger.
func NewLedger() *Ledger {
	return &Ledger{status: map[string]map[string]any{}, writers: map[Field]map[Writer]int{}}
}

type object struct {
	Metadata struct {
		Namespace, Name, UID string
	} `json:"metadata"`
	Status map[string]any `json:"status"`
}

// Seed takes a write from before the checked span: it sets the object's
// status, and charges no one.
func (l *Ledger) Seed(w Write) error {
	o, err := decode(w.Object)
	if err != nil {
		return err
	}
	l.status[o.Metadata.UID] = o.Status
	return nil
}

// Record takes a write in the checked span, charges its writer with each
// field it changed, and returns those fields' paths. An object first seen
// here had no status before: the API server drops a status sent with a
// create, where the status is a subresource.
func (l *Ledger) Record(w Write) ([]string, error) {
	o, err := decode(w.Object)
	if err != nil {
		return nil, err
	}
	paths := Changed(l.status[o.Metadata.UID], o.Status)
	l.status[o.Metadata.UID] = o.Status
	l.writes++
	name := o.Metadata.Name
	if o.Metadata.Namespace != "" {
		name = o.Metadata.Namespace + "/" + name
	}
	for _, p := range paths {
		f := Field{Resource: w.Resource, Object: name + " (" + o.Metadata.UID + ")", Path: p}
		if l.writers[f] == nil {
			l.writers[f] = map[Writer]int{}
		}
		l.writers[f][w.Writer]++
	}
	return paths, nil
}

// Writes is how many writes Record took.
func (l *Ledger) Writes() int { return l.writes }

// Owners lists each field a write changed, with its writers, one a line.
func (l *Ledger) Owners() []string {
	var out []string
	for f, ws := range l.writers {
		names := make([]string, 0, len(ws))
		for w := range ws {
			names = append(names, w.String())
		}
		sort.Strings(names)
		out = append(out, fmt.Sprintf("%s %s %s: %s", f.Resource, f.Object, f.Path, strings.Join(names, ", ")))
	}
	sort.Strings(out)
	return out
}

// Conflicts are the fields more than one writer changed, but for the
// exceptions.
func (l *Ledger) Conflicts(exceptions []Exception) []Conflict {
	var out []Conflict
	for f, ws := range l.writers {
		if len(ws) < 2 || excepted(f, ws, exceptions) {
			continue
		}
		out = append(out, Conflict{Field: f, Writers: ws})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].String() < out[j].String() })
	return out
}

func excepted(f Field, ws map[Writer]int, exceptions []Exception) bool {
	for _, e := range exceptions {
		if e.Resource != f.Resource || e.Path != f.Path {
			continue
		}
		all := true
		for w := range ws {
			all = all && slices.Contains(e.Writers, w)
		}
		if all {
			return true
		}
	}
	return false
}

func decode(raw []byte) (object, error) {
	var o object
	if err := json.Unmarshal(raw, &o); err != nil {
		return o, fmt.Errorf("decoding a written object: %w", err)
	}
	if o.Metadata.UID == "" {
		return o, fmt.Errorf("a written object without a uid: %.200s", raw)
	}
	return o, nil
}

// Changed lists the status fields that differ between before and after:
// top-level fields, each condition by its type, and the audit journal's
// fields.
func Changed(before, after map[string]any) []string {
	var out []string
	for _, k := range keys(before, after) {
		b, a := before[k], after[k]
		switch k {
		case "conditions":
			out = append(out, changedConditions(b, a)...)
		case "audit":
			bm, _ := b.(map[string]any)
			am, _ := a.(map[string]any)
			for _, sub := range keys(bm, am) {
				if !reflect.DeepEqual(bm[sub], am[sub]) {
					out = append(out, "status.audit."+sub)
				}
			}
		default:
			if !reflect.DeepEqual(b, a) {
				out = append(out, "status."+k)
			}
		}
	}
	return out
}

func changedConditions(before, after any) []string {
	byType := func(v any) map[string]any {
		out := map[string]any{}
		list, _ := v.([]any)
		for _, c := range list {
			if m, ok := c.(map[string]any); ok {
				t, _ := m["type"].(string)
				out[t] = m
			}
		}
		return out
	}
	b, a := byType(before), byType(after)
	var out []string
	for _, t := range keys(b, a) {
		if !reflect.DeepEqual(b[t], a[t]) {
			out = append(out, "status.conditions[type="+t+"]")
		}
	}
	return out
}

// keys are both maps' keys, sorted.
func keys[V any](a, b map[string]V) []string {
	seen := map[string]bool{}
	var out []string
	for _, m := range []map[string]V{a, b} {
		for k := range m {
			if !seen[k] {
				seen[k] = true
				out = append(out, k)
			}
		}
	}
	sort.Strings(out)
	return out
}
