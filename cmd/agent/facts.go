package main

import (
	"github.com/go-logr/logr"

	"github.com/boualleiguie/macrack-operator/internal/agent/host"
)

// factsSource is where the chassis' facts come from: with the vz driver,
// macOS itself (SIP, boot-args, the entitlement of the agent and of
// vm-helper, which runs the VMs, and the hardware); with the sim, the
// --sim-* flags' sim.
func factsSource(driverName string, sim host.StaticFacts, helperPath string, log logr.Logger) (host.FactsSource, error) {
	if driverName != "vz" {
		return sim, nil
	}
	return macFacts(helperPath, log)
}
