// Package simguest plays the guest agent inside sim VMs: the real
// internal/guest server, fed by a reporter that describes a booted macOS
// with the configured Xcode versions, with a journal, exec sessions that
// run commands on the sim's host, and a loopback of its own for the
// host's port forwards: an SSH server that takes the keys the host sets,
// a Screen Sharing stand-in, echo and discard. The host side cannot tell
// it from a guest inside a real VM, which is the point.
package simguest

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/user"
	"path/filepath"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/utils/clock"

	"github.com/boualleiguie/macrack-operator/internal/agent/driver/sim"
	"github.com/boualleiguie/macrack-operator/internal/agent/vmspec"
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
// the guest agent's port is served by the real guest.Server, one per boot
// of each VM, with a journal of its own. A ShutdownRequest powers the
// connection's own sim VM off cleanly (sim.ShutdownGuest), as `shutdown -h
// now` powers off a macOS guest; a sim guest that ignores shutdown
// requests acknowledges and stays up. Without WithWorkload, a guest
// answers a Configure that it runs no workloads.
//
// Every sim guest serves exec and logs sessions. Its commands run on the
// sim's host, as the host's current user whatever user the session names,
// in the VM's own directory (Dir), with a PATH that finds a sw_vers that
// answers as macOS 15.5 does.
//
// Its sessions' forwards reach a loopback of its own, in this process:
// PortSSH, an SSH server with the VM's own host key (HostKeyFile, made
// once and kept in Dir), which lets in the user the host last set keys
// for (admin until then) by one of them, and runs its commands as the
// session's execs run; PortScreenSharing, which says RFBBanner; PortEcho
// and PortDiscard. Any other port is closed. The keys the host sets are
// kept in memory, one boot long: a rebooted sim guest reports none, and
// the host sets them again.
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

// servers are the guest agents of a sim host's VMs: one per boot of each
// VM, which holds that boot's journal and workload, as a macOS guest agent
// starts afresh with its VM. One handler serves every VM of a driver, so a
// boot is told by its context: the driver makes a new one at each start.
type servers struct {
	base        guest.ServerOptions
	reporter    guest.Reporter
	log         logr.Logger
	newWorkload func(vmCtx context.Context) guest.Workload

	mu     sync.Mutex
	byBoot map[<-chan struct{}]*guest.Server
}

// of is the guest agent of the boot vmCtx belongs to.
func (s *servers) of(vmCtx context.Context) *guest.Server {
	boot := vmCtx.Done()
	s.mu.Lock()
	defer s.mu.Unlock()
	if srv, ok := s.byBoot[boot]; ok {
		return srv
	}
	opts := s.base
	opts.Journal = guest.NewJournal(guest.JournalOptions{})
	dir := &guestDir{vmCtx: vmCtx}
	ex, ks := &executor{dir: dir, log: s.log}, &keys{}
	loopback := &network{vmCtx: vmCtx, dir: dir, exec: ex, keys: ks, log: s.log.WithName("network")}
	opts.Exec, opts.Keys, opts.Dial = ex, ks, loopback.dial
	if s.newWorkload != nil {
		if w := s.newWorkload(vmCtx); w != nil {
			opts.Workload = w
		}
	}
	srv := guest.NewServer(s.reporter, s.log, opts)
	// The sim guest is up at once: its agent went through every stage.
	for _, stage := range []guest.BootStage{guest.BootStageBooting, guest.BootStageAgentStarted, guest.BootStageReady} {
		srv.NoteBootStage(stage)
	}
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

// DirSuffix names a sim guest's own directory beside its VM's disk.
const DirSuffix = ".sim-guest"

// Dir is a sim VM's guest directory: <disk>.sim-guest, beside its disk,
// the disk's for as long as it lives, as a Mac's home outlives its
// reboots. Its home/ is the HOME and working directory of the guest's
// commands, and bin/ comes first in their PATH, with sw_vers; it holds the
// SSH host key (HostKeyFile).
func Dir(spec vmspec.VMSpec) string { return spec.DiskPath + DirSuffix }

// The macOS a sim guest says it runs, as sw_vers does.
const (
	ProductName    = "macOS"
	ProductVersion = "15.5"
	BuildVersion   = "24F74"
)

// swVers answers as macOS's sw_vers does: all three fields, tab-aligned,
// or the one an option names.
var swVers = `#!/bin/sh
# sw_vers, as a macOS ` + ProductVersion + ` guest answers it: the sim guest's stand-in.
case "$*" in
"") printf 'ProductName:		%s
ProductVersion:		%s
BuildVersion:		%s
' '` + ProductName + `' '` + ProductVersion + `' '` + BuildVersion + `' ;;
-productName) echo '` + ProductName + `' ;;
-productVersion) echo '` + ProductVersion + `' ;;
-productVersionExtra) ;;
-buildVersion) echo '` + BuildVersion + `' ;;
*) echo "usage: sw_vers [-productName|-productVersion|-productVersionExtra|-buildVersion]" >&2; exit 1 ;;
esac
`

// executor runs a sim guest's commands on the sim's host: a
// guest.UnixExecutor in the guest's directory, made at the first exec.
type executor struct {
	dir *guestDir
	log logr.Logger

	once sync.Once
	unix *guest.UnixExecutor
	err  error
}

// Start implements guest.Executor.
func (e *executor) Start(ctx context.Context, spec guest.ProcessSpec) (guest.Process, error) {
	e.once.Do(func() { e.unix, e.err = e.prepare() })
	if e.err != nil {
		return nil, e.err
	}
	return e.unix.Start(ctx, spec)
}

func (e *executor) prepare() (*guest.UnixExecutor, error) {
	dir, err := e.dir.get()
	if err != nil {
		return nil, err
	}
	home, bin := filepath.Join(dir, "home"), filepath.Join(dir, "bin")
	for _, d := range []string{home, bin} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, fmt.Errorf("making the sim guest's directory: %w", err)
		}
	}
	if err := os.WriteFile(filepath.Join(bin, "sw_vers"), []byte(swVers), 0o755); err != nil {
		return nil, fmt.Errorf("writing the sim guest's sw_vers: %w", err)
	}
	e.log.V(1).Info("Sim guest runs its commands", "home", home)
	return &guest.UnixExecutor{
		Home:       home,
		PathPrefix: []string{bin},
		// The sim's host has no such user as a Mac's "admin": its commands
		// run as the host's own.
		LookupUser: func(string) (*user.User, error) { return user.Current() },
	}, nil
}
