// Package simguest plays the guest agent inside sim VMs: the real
// internal/guest server, fed by a reporter that describes a booted macOS
// with the configured Xcode versions. The host side cannot tell it from a
// guest inside a real VM, which is the point.
package simguest

import (
	"context"
	"net"
	"sync"
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

// Option configures a Handler.
type Option func(*options)

type options struct {
	newWorkload func(vmCtx context.Context) guest.Workload
}

// WithWorkload gives every sim guest a workload (a CI job loop) that a
// host can configure: newWorkload makes one per boot of each VM, as a
// macOS guest agent starts afresh with its VM, and so asks to be
// configured again after a restart. vmCtx ends when that boot of the VM
// does (the workload's goroutines should end with it), and
// sim.GuestSpec(vmCtx) names the VM. newWorkload may return nil: that
// guest runs no workload.
func WithWorkload(newWorkload func(vmCtx context.Context) guest.Workload) Option {
	return func(o *options) { o.newWorkload = newWorkload }
}

// Handler returns the sim driver's guest handler: each vsock connection on
// the guest agent's port is served by the real guest.Server. A
// ShutdownRequest powers the connection's own sim VM off cleanly
// (sim.ShutdownGuest), as `shutdown -h now` powers off a macOS guest; a
// sim guest that ignores shutdown requests acknowledges and stays up.
// Without WithWorkload, a guest answers a Configure that it runs no
// workloads.
func Handler(ctx context.Context, r guest.Reporter, log logr.Logger, opts ...Option) sim.GuestHandler {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	base := guest.ServerOptions{AgentVersion: "sim", IdleTimeout: time.Minute, Shutdown: sim.ShutdownGuest}
	guests := &servers{base: base, reporter: r, log: log, newWorkload: o.newWorkload, byBoot: map[<-chan struct{}]*guest.Server{}}
	return func(vmCtx context.Context, port uint32, conn net.Conn) {
		if port != guest.DefaultPort {
			conn.Close()
			return
		}
		srv := guests.of(vmCtx)
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

// servers are the guest agents of a sim host's VMs: one for all without
// workloads, else one per boot of each VM, which holds that boot's
// workload. One handler serves every VM of a driver, so a boot is told
// by its context: the driver makes a new one at each start.
type servers struct {
	base        guest.ServerOptions
	reporter    guest.Reporter
	log         logr.Logger
	newWorkload func(vmCtx context.Context) guest.Workload

	once   sync.Once
	shared *guest.Server

	mu     sync.Mutex
	byBoot map[<-chan struct{}]*guest.Server
}

// of is the guest agent of the boot vmCtx belongs to.
func (s *servers) of(vmCtx context.Context) *guest.Server {
	if s.newWorkload == nil {
		s.once.Do(func() { s.shared = guest.NewServer(s.reporter, s.log, s.base) })
		return s.shared
	}
	boot := vmCtx.Done()
	s.mu.Lock()
	defer s.mu.Unlock()
	if srv, ok := s.byBoot[boot]; ok {
		return srv
	}
	opts := s.base
	if w := s.newWorkload(vmCtx); w != nil {
		opts.Workload = w
	}
	srv := guest.NewServer(s.reporter, s.log, opts)
	s.byBoot[boot] = srv
	if boot != nil {
		// The boot's guest goes with it; the next boot gets a new one.
		context.AfterFunc(vmCtx, func() {
			s.mu.Lock()
			defer s.mu.Unlock()
			delete(s.byBoot, boot)
		})
	}
	return srv
}
