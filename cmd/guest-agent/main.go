// Command guest-agent runs inside each macOS VM as a launchd daemon and
// answers the host agent's reports over vsock: boot stage, Xcode versions,
// disk headroom and readiness for work. Asked to, it shuts macOS down: the
// gentlest way the host stops a VM. It serves the host's exec and logs
// sessions: commands run as the login user the host names, and its logs
// are its own journal; port forwards reach TCP ports on the guest's
// loopback (sshd, Screen Sharing); and the host's authorized keys go in
// the login user's ~/.ssh/authorized_keys, between MacRack's markers.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/utils/clock"

	"github.com/boualleiguie/macrack-operator/internal/guest"
	"github.com/boualleiguie/macrack-operator/internal/logging"
)

// version is the agent's version, set at build time with
// -ldflags "-X main.version=...".
var version = "dev"

// selfCheckInterval spaces the start-up self-check's retries.
const selfCheckInterval = 5 * time.Second

// options are the agent's command-line settings.
type options struct {
	port        uint
	xcodeRoot   string
	diskPath    string
	minHeadroom int64
	idleTimeout time.Duration
	// loginUser is the user whose MacRack-managed keys the reports tell
	// until the host sets keys for one.
	loginUser string
}

func main() {
	var opts options
	fs := flag.CommandLine
	fs.UintVar(&opts.port, "port", uint(guest.DefaultPort), "The vsock port to listen on.")
	fs.StringVar(&opts.xcodeRoot, "xcode-root", "/", "The volume root holding Applications/Xcode*.app.")
	fs.StringVar(&opts.diskPath, "disk-path", "/", "A path on the volume whose free space is reported.")
	fs.Int64Var(&opts.minHeadroom, "min-headroom", 20<<30, "The least free space, in bytes, of a guest ready for work.")
	fs.DurationVar(&opts.idleTimeout, "idle-timeout", guest.DefaultIdleTimeout, "How long a connection may wait for the next request.")
	fs.StringVar(&opts.loginUser, "login-user", guest.DefaultLoginUser,
		"The guest login user whose MacRack-managed SSH keys the reports tell, until the host sets keys for a user.")
	zapOpts := logging.BindFlags(fs)
	flag.Parse()

	log := logging.New(zapOpts)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, log, opts); err != nil {
		log.Error(err, "Guest agent stopped")
		os.Exit(1)
	}
}

func run(ctx context.Context, log logr.Logger, opts options) error {
	if opts.port > uint(^uint32(0)) {
		return fmt.Errorf("--port %d is not a vsock port", opts.port)
	}
	clk := clock.RealClock{}
	boot := guest.NewBootState()
	reporter := guest.NewSystemReporter(guest.SystemReporterOptions{
		XcodeRoot:        opts.xcodeRoot,
		DiskPath:         opts.diskPath,
		MinHeadroomBytes: opts.minHeadroom,
	}, boot, clk, log.WithName("reporter"))

	// The agent's journal, which the host reads through a session's Logs.
	journal := guest.NewJournal(guest.JournalOptions{Clock: clk})
	server := guest.NewServer(reporter, log.WithName("server"), guest.ServerOptions{
		AgentVersion: version,
		IdleTimeout:  opts.idleTimeout,
		Clock:        clk,
		Shutdown:     shutdownGuest,
		// Running as root, it runs commands as the user the host names,
		// and installs keys in that user's home, the user's own files.
		Exec:      &guest.UnixExecutor{},
		Journal:   journal,
		Keys:      &guest.UnixKeyInstaller{},
		LoginUser: opts.loginUser,
		// Dial is the default: TCP to the guest's own loopback.
	})
	server.NoteBootStage(boot.Stage())

	l, err := guest.Listen(uint32(opts.port))
	if err != nil {
		return err
	}
	if err := boot.Advance(guest.BootStageAgentStarted); err != nil {
		l.Close()
		return err
	}
	server.NoteBootStage(guest.BootStageAgentStarted)
	log.Info("Guest agent listening", "addr", l.Addr().String(), "version", version)
	go becomeReady(ctx, log, clk, boot, reporter, server.NoteBootStage)

	if err := server.Serve(ctx, l); err != nil {
		return fmt.Errorf("serving: %w", err)
	}
	log.Info("Guest agent stopped on signal")
	return nil
}

// becomeReady retries the reporter's self-check until it passes, then moves
// the boot stage to ready: early in boot the data volume may not be mounted.
func becomeReady(ctx context.Context, log logr.Logger, clk clock.Clock, boot *guest.BootState, reporter *guest.SystemReporter, note func(guest.BootStage)) {
	for {
		err := reporter.SelfCheck()
		if err == nil {
			if err := boot.Advance(guest.BootStageReady); err != nil {
				log.Error(err, "Advancing the boot stage failed")
				return
			}
			note(guest.BootStageReady)
			log.Info("Guest ready")
			return
		}
		log.Info("Self-check failed; retrying", "reason", err.Error(), "retryIn", selfCheckInterval)
		select {
		case <-ctx.Done():
			return
		case <-clk.After(selfCheckInterval):
		}
	}
}
