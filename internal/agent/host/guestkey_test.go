package host

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/go-logr/logr/funcr"

	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
	"github.com/boualleiguie/macrack-operator/internal/sealing"
)

// The agent's guest key is made once and kept: a second start loads the
// same key. Its log names the key's id, never the key; a key file others
// may read stops the agent.
func TestTheGuestKeyIsKeptAcrossStartsAndNeverLogged(t *testing.T) {
	var logs strings.Builder
	log := funcr.New(func(prefix, args string) { logs.WriteString(prefix + " " + args + "\n") }, funcr.Options{})
	path := DefaultGuestKeyPath(t.TempDir())
	first, err := LoadGuestKey(path, log)
	if err != nil {
		t.Fatal(err)
	}
	again, err := LoadGuestKey(path, log)
	if err != nil {
		t.Fatal(err)
	}
	if first.Public() != again.Public() {
		t.Fatalf("the key changed across starts: %s then %s", first.ID(), again.ID())
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	l := logs.String()
	if !strings.Contains(l, first.ID()) {
		t.Fatalf("the log does not name the key id; logs:\n%s", l)
	}
	for _, enc := range []string{string(raw), base64.StdEncoding.EncodeToString(raw), fmt.Sprintf("%x", raw)} {
		if strings.Contains(l, enc) {
			t.Fatalf("the log shows the private key; logs:\n%s", l)
		}
	}
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadGuestKey(path, log); !errors.Is(err, sealing.ErrKeyFile) {
		t.Fatalf("a key file others may read: got %v, want ErrKeyFile", err)
	}
}

type noFacts struct{}

func (noFacts) Facts(context.Context) (*fleetv1alpha1.ReportedFacts, error) {
	return nil, errors.New("no facts")
}

func TestGuestKeyFactsAddsTheKeyToWhatTheSourceRead(t *testing.T) {
	k, err := sealing.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	src := StaticFacts{Reported: &fleetv1alpha1.ReportedFacts{Chip: "M4"}}
	facts, err := GuestKeyFacts{FactsSource: src, Key: k.Public()}.Facts(context.Background())
	if err != nil || facts.GuestKey == nil || *facts.GuestKey != k.Public() || facts.Chip != "M4" {
		t.Fatalf("got %+v, %v; want the chip and the key", facts, err)
	}
	if src.Reported.GuestKey != nil {
		t.Fatal("the source's own facts were changed")
	}
	// A source that read nothing reports nothing, the key included.
	if facts, err := (GuestKeyFacts{FactsSource: noFacts{}, Key: k.Public()}).Facts(context.Background()); facts != nil || err == nil {
		t.Fatalf("got %+v, %v; want no facts and the source's error", facts, err)
	}
}
