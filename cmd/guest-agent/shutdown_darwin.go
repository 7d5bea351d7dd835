//go:build darwin

package main

import (
	"context"
	"fmt"
	"os/exec"
)

// shutdownGuest shuts macOS down, as the host asked: the guest agent runs
// as a root launchd daemon, so it may. shutdown(8) returns once the
// shutdown is under way, so that the acknowledgement can still go out.
func shutdownGuest(ctx context.Context) error {
	if out, err := exec.CommandContext(ctx, "/sbin/shutdown", "-h", "now").CombinedOutput(); err != nil {
		return fmt.Errorf("shutdown -h now: %w: %s", err, out)
	}
	return nil
}
