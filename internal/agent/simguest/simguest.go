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

// Handler returns the sim driver's guest handler: each vsock connection on
// the guest agent's port is served by one guest.Server.
func Handler(ctx context.Context, r guest.Reporter, log logr.Logger) sim.GuestHandler {
	l := &connListener{conns: make(chan net.Conn), done: ctx.Done()}
	srv := guest.NewServer(r, log, guest.ServerOptions{AgentVersion: "sim", IdleTimeout: time.Minute})
	var once sync.Once
	return func(vmCtx context.Context, port uint32, conn net.Conn) {
		if port != guest.DefaultPort {
			conn.Close()
			return
		}
		once.Do(func() { go func() { _ = srv.Serve(ctx, l) }() })
		// The driver ends the stream when the handler returns: hold it until
		// the server is done with the connection.
		tracked := &closeNotifier{Conn: conn, closed: make(chan struct{})}
		select {
		case l.conns <- tracked:
		case <-ctx.Done():
			conn.Close()
			return
		}
		select {
		case <-tracked.closed:
		case <-ctx.Done():
		case <-vmCtx.Done(): // the VM stopped
		}
	}
}

// closeNotifier tells the handler when the server closes the connection.
type closeNotifier struct {
	net.Conn
	once   sync.Once
	closed chan struct{}
}

func (c *closeNotifier) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { close(c.closed) })
	return err
}

// connListener hands the handler's connections to the guest server.
type connListener struct {
	conns chan net.Conn
	done  <-chan struct{}
}

func (l *connListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *connListener) Close() error   { return nil }
func (l *connListener) Addr() net.Addr { return simAddr{} }

type simAddr struct{}

func (simAddr) Network() string { return "vsock" }
func (simAddr) String() string  { return "sim-guest" }
