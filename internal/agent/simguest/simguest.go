// Package simguest plays the guest agent inside sim VMs: the real
// internal/guest server, fed by a reporter that describes a booted macOS
// with the configured Xcode versions. The host side cannot tell it from a
// guest inside a real VM, which is the point.
package simguest

import (
	"context"
	"net"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/utils/clock"

	"github.com/boualleiguie/macrack-operator/internal/agent/driver/sim"
	"github.com/boualleiguie/macrack-operator/internal/guest"
)

// Reporter describes a sim guest: booted, with these Xcodes and this much
// free disk.
type Reporter struct {
	XcodeVersions []string
	HeadroomBytes int64
	Clock         clock.PassiveClock
}

// Report implements guest.Reporter.
func (r Reporter) Report(context.Context) (guest.Report, error) {
	return guest.Report{
		BootStage:         string(guest.BootStageReady),
		XcodeVersions:     r.XcodeVersions,
		DiskHeadroomBytes: r.HeadroomBytes,
		ReadyForWork:      len(r.XcodeVersions) > 0 && r.HeadroomBytes > 0,
		Time:              r.Clock.Now(),
	}, nil
}

// Handler returns the sim driver's guest handler: each vsock connection on
// the guest agent's port is served by the real guest.Server. A
// ShutdownRequest powers the connection's own sim VM off cleanly
// (sim.ShutdownGuest), as `shutdown -h now` powers off a macOS guest; a
// sim guest that ignores shutdown requests acknowledges and stays up.
func Handler(ctx context.Context, r guest.Reporter, log logr.Logger) sim.GuestHandler {
	srv := guest.NewServer(r, log, guest.ServerOptions{AgentVersion: "sim", IdleTimeout: time.Minute, Shutdown: sim.ShutdownGuest})
	return func(vmCtx context.Context, port uint32, conn net.Conn) {
		if port != guest.DefaultPort {
			conn.Close()
			return
		}
		// The connection lives until the host hangs up, the VM stops
		// (vmCtx, which also names the VM a shutdown is for) or the
		// helper ends (ctx).
		connCtx, cancel := context.WithCancel(vmCtx)
		defer cancel()
		stop := context.AfterFunc(ctx, cancel)
		defer stop()
		srv.ServeConn(connCtx, conn)
	}
}
