package sink

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2/event"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
	"github.com/boualleiguie/macrack-operator/internal/audit/event"
)

func TestLinesWritesOneCloudEventPerLine(t *testing.T) {
	var buf bytes.Buffer
	sink, err := Open(context.Background(), "stdout", &buf)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := sink.(*Lines); !ok {
		t.Fatalf("stdout opened a %T, want *Lines", sink)
	}
	o := event.Origin{Cluster: "eu-1"}
	l := newLease()
	var sent []cloudevents.Event
	for i, typ := range []string{"created", "bound", "released"} {
		ev, err := o.Event("lease", "macrack-lease", l, fleetv1alpha1.AuditRecord{Sequence: int64(i + 1), Type: typ, Time: metav1.NewTime(at(time.Duration(i) * time.Hour)),
			// A message with a newline stays on its line.
			Message: "line one\nline two"})
		if err != nil {
			t.Fatal(err)
		}
		if err := sink.Publish(context.Background(), ev); err != nil {
			t.Fatal(err)
		}
		sent = append(sent, ev)
	}
	if err := sink.Close(); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	if !strings.HasSuffix(out, "\n") {
		t.Fatalf("output does not end its last line: %q", out)
	}
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(lines) != len(sent) {
		t.Fatalf("%d lines for %d records:\n%s", len(lines), len(sent), out)
	}
	for i, line := range lines {
		var obj map[string]any
		if err := json.Unmarshal([]byte(line), &obj); err != nil {
			t.Fatalf("line %d is not one JSON object: %v\n%s", i+1, err, line)
		}
		if obj["specversion"] != "1.0" || obj["id"] != sent[i].ID() {
			t.Errorf("line %d: specversion %v id %v", i+1, obj["specversion"], obj["id"])
		}
		if _, ok := obj["data"].(map[string]any); !ok {
			t.Errorf("line %d: data is %T, want a JSON object (structured mode, not base64)", i+1, obj["data"])
		}
		var ev cloudevents.Event
		if err := json.Unmarshal([]byte(line), &ev); err != nil {
			t.Fatalf("line %d is not a CloudEvent: %v", i+1, err)
		}
		if ev.ID() != sent[i].ID() || ev.Type() != sent[i].Type() || ev.Source() != sent[i].Source() || !ev.Time().Equal(sent[i].Time()) {
			t.Errorf("line %d: %s, want %s", i+1, ev, sent[i])
		}
		if err := ev.Validate(); err != nil {
			t.Errorf("line %d does not validate: %v", i+1, err)
		}
		var d event.Data
		if err := ev.DataAs(&d); err != nil || d.Message != "line one\nline two" || d.UID != "lease-uid-1" {
			t.Errorf("line %d: data %+v (%v)", i+1, d, err)
		}
	}
}

func TestOpenRefusesAnUnknownSink(t *testing.T) {
	if _, err := Open(context.Background(), "kafka://broker:9092", nil); err == nil || !strings.Contains(err.Error(), "want nats://") {
		t.Errorf("kafka:// opened (%v)", err)
	}
	// Positive control: "-" is stdout too.
	if s, err := Open(context.Background(), "-", &bytes.Buffer{}); err != nil {
		t.Errorf("-: %v", err)
	} else if _, ok := s.(*Lines); !ok {
		t.Errorf("- opened a %T", s)
	}
}
