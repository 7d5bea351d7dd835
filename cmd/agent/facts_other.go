//go:build !darwin

package main

import (
	"errors"

	"github.com/go-logr/logr"

	"github.com/boualleiguie/macrack-operator/internal/agent/host"
)

// macFacts: the vz driver's facts are macOS's, read on a Mac only.
func macFacts(string, logr.Logger) (host.FactsSource, error) {
	return nil, errors.New("--driver vz runs on macOS only: its facts are read from the Mac")
}
