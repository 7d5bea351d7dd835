//go:build darwin

package main

import (
	"github.com/go-logr/logr"

	"github.com/boualleiguie/macrack-operator/internal/agent"
	"github.com/boualleiguie/macrack-operator/internal/agent/host"
)

// A Mac reboots through the root LaunchDaemon's socket (host/reboot_darwin.go).
func init() {
	vzRebooter = func(log logr.Logger) (agent.Rebooter, error) {
		r := host.NewLaunchdRebooter()
		r.Log = log
		return r, nil
	}
}
