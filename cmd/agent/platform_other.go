//go:build !darwin

package main

import (
	"fmt"
	"runtime"

	"github.com/boualleiguie/macrack-operator/internal/agent/host"
)

// vzBootID fails: the vz driver runs on a Mac only.
func vzBootID() (host.BootIDSource, error) {
	return nil, fmt.Errorf("--driver vz needs macOS; this agent is built for %s: use --driver sim", runtime.GOOS)
}
