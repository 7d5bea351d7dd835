package host

import (
	"context"
	"fmt"
	"path/filepath"

	"github.com/go-logr/logr"

	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
	"github.com/boualleiguie/macrack-operator/internal/sealing"
)

// GuestKeyFile is the guest key's file in the agent's state directory.
const GuestKeyFile = "guest-key"

// DefaultGuestKeyPath is where an agent with state directory stateDir
// keeps its guest key.
func DefaultGuestKeyPath(stateDir string) string { return filepath.Join(stateDir, GuestKeyFile) }

// LoadGuestKey loads the chassis' guest key from path, creating it on the
// agent's first start. The key stays for the chassis' life: a new one
// would leave every sealed config already written for the chassis
// unreadable. A key file the agent cannot trust (see
// sealing.LoadOrCreate) stops the agent: a person must look at it. Only
// the key's id is logged.
func LoadGuestKey(path string, log logr.Logger) (*sealing.Key, error) {
	k, err := sealing.LoadOrCreate(path)
	if err != nil {
		return nil, fmt.Errorf("loading the chassis' guest key: %w", err)
	}
	log.Info("Guest key loaded", "keyID", k.ID(), "path", path)
	return k, nil
}

// GuestKeyFacts adds the guest key's public half to what a FactsSource
// reports, so that it is published in status.reported.guestKey with the
// other facts, in the same write, on every facts report.
type GuestKeyFacts struct {
	FactsSource
	Key fleetv1alpha1.GuestKey
}

// Facts implements FactsSource: the source's facts with the guest key. A
// source that read no facts at all reports none, the key included.
func (g GuestKeyFacts) Facts(ctx context.Context) (*fleetv1alpha1.ReportedFacts, error) {
	facts, err := g.FactsSource.Facts(ctx)
	if facts != nil {
		key := g.Key
		facts.GuestKey = &key
	}
	return facts, err
}
