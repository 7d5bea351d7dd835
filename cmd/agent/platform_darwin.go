//go:build darwin

package main

import "github.com/boualleiguie/macrack-operator/internal/agent/host"

// vzBootID is a Mac's boot session UUID.
func vzBootID() (host.BootIDSource, error) { return host.SysctlBootID{}, nil }
