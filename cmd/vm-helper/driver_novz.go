//go:build !(darwin && arm64)

package main

import (
	"fmt"
	"runtime"

	"github.com/go-logr/logr"

	"github.com/boualleiguie/macrack-operator/internal/agent/driver"
)

// vzDriver fails: Virtualization.framework boots macOS guests only on
// macOS on Apple silicon.
func vzDriver(logr.Logger) (driver.Driver, error) {
	return nil, fmt.Errorf("the vz driver needs macOS on Apple silicon; this vm-helper is built for %s/%s: use --driver sim", runtime.GOOS, runtime.GOARCH)
}
