// Command vm-helper runs one macOS VM in its own process, the process
// Virtualization.framework ties the VM to, and serves it to the host agent
// over a Unix socket (see internal/agent/helper). The agent can restart
// without stopping the VM. On SIGTERM or SIGINT the helper stops the VM
// gracefully and exits.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/utils/clock"

	"github.com/boualleiguie/macrack-operator/internal/agent/driver"
	"github.com/boualleiguie/macrack-operator/internal/agent/driver/sim"
	"github.com/boualleiguie/macrack-operator/internal/agent/helper"
	"github.com/boualleiguie/macrack-operator/internal/agent/simguest"
	"github.com/boualleiguie/macrack-operator/internal/agent/vmspec"
	"github.com/boualleiguie/macrack-operator/internal/logging"
)

// options are the helper's command-line settings.
type options struct {
	socket      string
	driver      string
	stateDir    string
	instanceUID string
	specPath    string
	pidFile     string
	stopGrace   time.Duration

	simBootTime       time.Duration
	simShutdownTime   time.Duration
	simIgnoreShutdown bool
	simXcode          string
}

func main() {
	var opts options
	fs := flag.CommandLine
	fs.StringVar(&opts.socket, "socket", "", "The Unix socket to serve the agent on.")
	fs.StringVar(&opts.driver, "driver", "sim", "The VM driver: sim, or vz (macOS on Apple silicon only).")
	fs.StringVar(&opts.stateDir, "state-dir", "", "The sim kernel's state directory, shared by all helpers of the host (sim driver).")
	fs.StringVar(&opts.instanceUID, "instance-uid", "", "The UID of the MacOSInstance this helper runs.")
	fs.StringVar(&opts.specPath, "spec", "", "The VM spec (JSON) written by the agent's launcher.")
	fs.StringVar(&opts.pidFile, "pid-file", "", "Where to write this process's pid, for the agent to find it after a restart.")
	fs.DurationVar(&opts.stopGrace, "stop-grace", 30*time.Second, "How long the guest gets to shut down on SIGTERM before the VM is forced off.")
	fs.DurationVar(&opts.simBootTime, "sim-boot-time", sim.DefaultBootTime, "How long a sim VM takes to boot.")
	fs.DurationVar(&opts.simShutdownTime, "sim-shutdown-time", sim.DefaultShutdownTime, "How long a sim guest takes to shut down.")
	fs.BoolVar(&opts.simIgnoreShutdown, "sim-guest-ignores-shutdown", false, "Make the sim guest ignore shutdown requests.")
	fs.StringVar(&opts.simXcode, "sim-xcode", "16.4", "The Xcode versions the sim guest agent reports, comma-separated; empty for none (never ready for work).")
	zapOpts := logging.BindFlags(fs)
	flag.Parse()

	log := logging.New(zapOpts).WithValues("instanceUID", opts.instanceUID)
	if err := run(log, opts); err != nil {
		log.Error(err, "Helper stopped")
		os.Exit(1)
	}
}

func run(log logr.Logger, opts options) error {
	if opts.socket == "" || opts.instanceUID == "" || opts.specPath == "" {
		return errors.New("--socket, --instance-uid and --spec are required")
	}
	spec, err := helper.ReadSpecFile(opts.specPath)
	if err != nil {
		return err
	}
	if spec.UID != opts.instanceUID {
		return fmt.Errorf("the spec is for instance %q, not %q", spec.UID, opts.instanceUID)
	}
	// The sim guest agent serves as long as the helper does.
	guestCtx, stopGuest := context.WithCancel(context.Background())
	defer stopGuest()
	drv, err := newDriver(guestCtx, log, opts, spec)
	if err != nil {
		return err
	}
	srv, err := helper.NewServer(drv, spec, helper.WithServerLogger(log))
	if err != nil {
		return err
	}
	// Listening first: it fails if a live helper serves the socket, whose
	// pid file must then stay. The launcher waits for the pid file too.
	ln, err := helper.Listen(opts.socket)
	if err != nil {
		return err
	}
	if opts.pidFile != "" {
		// Written whole, then renamed into place: the agent's inventory reads
		// pid files at any moment, and an empty one read mid-write looked
		// like a dead helper, whose files it removed while the helper started.
		tmp := opts.pidFile + ".tmp"
		if err := os.WriteFile(tmp, []byte(strconv.Itoa(os.Getpid())+"\n"), 0o600); err != nil {
			ln.Close()
			return fmt.Errorf("writing pid file: %w", err)
		}
		if err := os.Rename(tmp, opts.pidFile); err != nil {
			ln.Close()
			return fmt.Errorf("writing pid file: %w", err)
		}
		defer os.Remove(opts.pidFile)
	}

	// The helper runs in its own session; a hangup is not a reason to stop.
	signal.Ignore(syscall.SIGHUP)
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer cancel()
	serveErr := srv.Serve(ctx, ln)

	log.Info("Stopping VM before exit", "graceful", opts.stopGrace.String())
	stopCtx, stopCancel := context.WithTimeout(context.Background(), opts.stopGrace+10*time.Second)
	defer stopCancel()
	return errors.Join(serveErr, srv.VM().Stop(stopCtx, opts.stopGrace))
}

// newDriver builds the driver --driver names.
func newDriver(ctx context.Context, log logr.Logger, opts options, spec vmspec.VMSpec) (driver.Driver, error) {
	switch opts.driver {
	case "sim":
		if opts.stateDir == "" {
			return nil, errors.New("the sim driver needs --state-dir, the host's kernel state")
		}
		k, err := sim.NewFileKernel(opts.stateDir)
		if err != nil {
			return nil, err
		}
		simOpts := []sim.Option{
			sim.WithLogger(log), sim.WithBootTime(opts.simBootTime), sim.WithShutdownTime(opts.simShutdownTime),
		}
		if opts.simIgnoreShutdown {
			simOpts = append(simOpts, sim.WithGuestIgnoringShutdown())
		}
		var xcodes []string
		if opts.simXcode != "" {
			xcodes = strings.Split(opts.simXcode, ",")
		}
		// A CI job's loop runs on the host (package jobs); its scripts come
		// to this guest through the exec channel.
		simOpts = append(simOpts, sim.WithGuestHandler(simguest.Handler(ctx, simguest.Reporter{
			XcodeVersions: xcodes, HeadroomBytes: int64(spec.DiskBytes / 2), Clock: clock.RealClock{},
		}, log.WithName("guest"))))
		return sim.New(k, simOpts...), nil
	case "vz":
		return vzDriver(log)
	default:
		return nil, fmt.Errorf("unknown --driver %q: want sim or vz", opts.driver)
	}
}
