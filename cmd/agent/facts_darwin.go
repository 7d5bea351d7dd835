//go:build darwin

package main

import (
	"fmt"
	"os"

	"github.com/go-logr/logr"

	"github.com/boualleiguie/macrack-operator/internal/agent/host"
)

// agentVersion is reported in the facts of a Mac; set it at link time with
// -ldflags "-X main.agentVersion=...".
var agentVersion = "dev"

// macFacts reads the facts from macOS. The entitlement is reported only
// when both the agent's and vm-helper's signatures carry it.
func macFacts(helperPath string, log logr.Logger) (host.FactsSource, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("the agent's own executable: %w", err)
	}
	return host.NewDarwinFacts(host.DarwinFactsConfig{
		EntitledExecutables: []string{self, helperPath}, AgentVersion: agentVersion, Log: log,
	})
}
