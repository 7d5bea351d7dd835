//go:build darwin

package host

import (
	"context"

	"github.com/go-logr/logr"
)

// LaunchdRebooter reboots the Mac through the root LaunchDaemon
// deploy/macos/io.macrack.reboot.plist: the agent, unprivileged, connects
// to the daemon's socket and launchd runs /sbin/shutdown -r now as root.
// Only a reboot: it changes no setting of the host.
type LaunchdRebooter struct {
	// SocketPath is the daemon's socket; RebootSocketPath by default.
	SocketPath string
	// Log receives the daemon's output, if the connection ever closes
	// before the host goes down.
	Log logr.Logger
}

// NewLaunchdRebooter is a LaunchdRebooter on RebootSocketPath.
func NewLaunchdRebooter() *LaunchdRebooter {
	return &LaunchdRebooter{SocketPath: RebootSocketPath, Log: logr.Discard()}
}

// Reboot asks launchd to run the reboot job and returns once it has the
// request; the host goes down shortly after. A nil error does not prove the
// reboot: the changed boot session UUID (ReportedFacts.BootID) does.
func (r *LaunchdRebooter) Reboot(ctx context.Context) error {
	path := r.SocketPath
	if path == "" {
		path = RebootSocketPath
	}
	log := r.Log
	if log.GetSink() == nil {
		log = logr.Discard()
	}
	return requestReboot(ctx, path, log)
}
