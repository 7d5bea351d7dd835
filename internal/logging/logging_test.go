package logging_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"strings"
	"testing"
	"time"

	"github.com/boualleiguie/macrack-operator/internal/logging"
)

func TestOneJSONLineALogNoStackNoDebugByDefault(t *testing.T) {
	var out bytes.Buffer
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	o := logging.BindFlags(fs)
	if err := fs.Parse(nil); err != nil {
		t.Fatal(err)
	}
	o.DestWriter = &out
	log := logging.New(o)
	log.Info("Lease bound", "MacNode", "c02sim000001")
	log.V(1).Info("Lost an optimistic-concurrency race; retrying")
	log.Error(errors.New("disk busy"), "Reaping failed")

	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("want the info and the error line, and no V(1) line; got %d:\n%s", len(lines), out.String())
	}
	for i, want := range []string{"info", "error"} {
		var l map[string]any
		if err := json.Unmarshal([]byte(lines[i]), &l); err != nil {
			t.Fatalf("line %d is not JSON: %v\n%s", i, err, lines[i])
		}
		if l["level"] != want {
			t.Errorf("line %d at level %v, want %s", i, l["level"], want)
		}
		if _, err := time.Parse("2006-01-02T15:04:05.000Z0700", l["ts"].(string)); err != nil {
			t.Errorf("line %d's time %v is not ISO 8601: %v", i, l["ts"], err)
		}
		if _, ok := l["stacktrace"]; ok {
			t.Errorf("line %d has a stack trace:\n%s", i, lines[i])
		}
	}
}

// The positive control for the stack: the flag still brings it back.
func TestTheStacktraceFlagStillWorks(t *testing.T) {
	var out bytes.Buffer
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	o := logging.BindFlags(fs)
	if err := fs.Parse([]string{"--zap-stacktrace-level=error"}); err != nil {
		t.Fatal(err)
	}
	o.DestWriter = &out
	logging.New(o).Error(errors.New("disk busy"), "Reaping failed")
	if !strings.Contains(out.String(), `"stacktrace"`) {
		t.Errorf("--zap-stacktrace-level=error gave no stack:\n%s", out.String())
	}
}
