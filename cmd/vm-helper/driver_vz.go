//go:build darwin && arm64

package main

import (
	"github.com/go-logr/logr"

	"github.com/boualleiguie/macrack-operator/internal/agent/driver"
	"github.com/boualleiguie/macrack-operator/internal/agent/driver/vz"
)

func vzDriver(log logr.Logger) (driver.Driver, error) {
	return vz.New(vz.WithLogger(log)), nil
}
