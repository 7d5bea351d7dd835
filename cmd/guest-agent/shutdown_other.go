//go:build !darwin

package main

import (
	"context"
	"fmt"
	"runtime"
)

// shutdownGuest refuses: the guest agent shuts down only a macOS guest.
// The host then falls back to the framework's requestStop.
func shutdownGuest(context.Context) error {
	return fmt.Errorf("the guest agent shuts down macOS guests only; this one runs on %s", runtime.GOOS)
}
