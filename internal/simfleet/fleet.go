// Package simfleet runs a simulated fleet of Mac minis in one process:
// DESIGN's in-process mode, for fleets too large for one agent process and
// vm-helper process per mini. Each host keeps what a real one has towards
// the API server: its own ServiceAccount token (renewed by its agent), its
// own client, cache, watches and heartbeats. What it shares with the others
// is the process: its VMs are goroutines behind the helper protocol
// (helper.InProcessLauncher), its kernel's VM counter lives in memory, and
// its reboot restarts its agent in place.
package simfleet

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"

	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
	"github.com/boualleiguie/macrack-operator/internal/agent"
	"github.com/boualleiguie/macrack-operator/internal/agent/driver/sim"
	"github.com/boualleiguie/macrack-operator/internal/agent/helper"
	"github.com/boualleiguie/macrack-operator/internal/agent/host"
	"github.com/boualleiguie/macrack-operator/internal/agent/instances"
	"github.com/boualleiguie/macrack-operator/internal/agent/jobs"
	"github.com/boualleiguie/macrack-operator/internal/agent/simguest"
	"github.com/boualleiguie/macrack-operator/internal/enroll"
	"github.com/boualleiguie/macrack-operator/internal/guest"
	"github.com/boualleiguie/macrack-operator/internal/runner/jobloop"
)

// BootstrapKubeconfig is the file in a host's state directory that holds
// its enrolment's kubeconfig (`macrackctl node enroll`'s output).
const BootstrapKubeconfig = "bootstrap.kubeconfig"

// Host is one simulated Mac mini.
type Host struct {
	// Serial is the chassis' serial as Apple prints it.
	Serial string
	// StateDir holds its bootstrap kubeconfig, its token, its guest key,
	// golden cache, instance disks and helper sockets.
	StateDir string
}

// Options are the fleet's settings; the zero value of each is a sensible
// default.
type Options struct {
	Hosts           []Host
	AgentsNamespace string
	// HeartbeatInterval is each agent's heartbeat; 10s if zero.
	HeartbeatInterval time.Duration
	// FactsInterval is how often each agent reports its facts again; 5m if
	// zero.
	FactsInterval time.Duration
	// StartInterval spaces the agents' starts, as a rack's power-on does;
	// 5ms if zero. A thousand agents then start within five seconds.
	StartInterval time.Duration
	// RebootTime is how long a host is down when its agent reboots it; 5s
	// if zero.
	RebootTime time.Duration
	// TokenTTL is each agent's token lifetime; 1h if zero.
	TokenTTL     time.Duration
	RegistryAuth []byte
	// Clock is every agent's and VM's clock; the real one if nil.
	Clock clock.WithTicker
	Log   logr.Logger
}

// Run starts every host's agent and runs them until ctx ends. An agent
// that fails is logged and started again after a pause, as launchd would
// start it; Run returns when ctx ends, once every agent and VM stopped.
func Run(ctx context.Context, o Options) error {
	if len(o.Hosts) == 0 {
		return errors.New("simfleet: no hosts")
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	var wg sync.WaitGroup
	start := o.Clock.NewTicker(cmp.Or(o.StartInterval, 5*time.Millisecond))
	defer start.Stop()
	for i, h := range o.Hosts {
		if i > 0 {
			select {
			case <-ctx.Done():
			case <-start.C():
			}
		}
		if ctx.Err() != nil {
			break
		}
		m, err := newMini(h, o)
		if err != nil {
			return fmt.Errorf("simfleet: host %s: %w", h.Serial, err)
		}
		wg.Go(func() { m.supervise(ctx) })
	}
	wg.Wait()
	return nil
}

// mini is one simulated host: its agent's settings, and the parts that
// outlive an agent restart (its kernel, its boot id and its VMs, which a
// reboot ends).
type mini struct {
	host     Host
	config   agent.Config
	kubeconf string
	launcher *helper.InProcessLauncher
	opts     Options
	log      logr.Logger
}

func newMini(h Host, o Options) (*mini, error) {
	node := enroll.NodeName(h.Serial)
	log := o.Log.WithValues("node", node)
	kernelDir := filepath.Join(h.StateDir, "kernel")
	if err := os.MkdirAll(kernelDir, 0o700); err != nil {
		return nil, err
	}
	kernel := sim.NewMemKernel()
	drv := sim.New(kernel, sim.WithClock(o.Clock), sim.WithLogger(log.WithName("vm")),
		sim.WithGuestHandler(simguest.Handler(context.Background(), simguest.Reporter{
			XcodeVersions: []string{"16.4"}, HeadroomBytes: 50 << 30, Clock: o.Clock,
		}, log.WithName("guest"))))
	launcher, err := helper.NewInProcessLauncher(filepath.Join(h.StateDir, "run"), drv,
		helper.WithLauncherLogger(log.WithName("helpers")), helper.WithStopGrace(30*time.Second))
	if err != nil {
		return nil, err
	}
	boot := host.SimBootID{Dir: kernelDir}
	disk := resource.MustParse("1T")
	m := &mini{host: h, kubeconf: filepath.Join(h.StateDir, BootstrapKubeconfig), launcher: launcher, opts: o, log: log}
	m.config = agent.Config{
		NodeName: node, AgentsNamespace: cmp.Or(o.AgentsNamespace, "macrack-agents"), StateDir: h.StateDir,
		// Each host its own key, as each Mac has: a config sealed to one
		// host opens on no other.
		GuestKeyFile: host.DefaultGuestKeyPath(h.StateDir),
		Launcher:     launcher,
		Facts: host.StaticFacts{Reported: &fleetv1alpha1.ReportedFacts{
			Disk: &disk, NetworkGbps: ptr.To(int32(10)), Chip: "M4", MacOSVersion: "15.5",
			SIPEnabled: ptr.To(true), VirtualizationEntitlement: ptr.To(true),
			Quota: &fleetv1alpha1.QuotaReport{State: fleetv1alpha1.QuotaOK}, AgentVersion: "sim",
		}},
		HeartbeatInterval: cmp.Or(o.HeartbeatInterval, 10*time.Second),
		FactsInterval:     cmp.Or(o.FactsInterval, 5*time.Minute),
		TokenFile:         filepath.Join(h.StateDir, "token"), TokenTTL: cmp.Or(o.TokenTTL, time.Hour),
		RegistryAuth: o.RegistryAuth, Clock: o.Clock, Log: log, NewMachineID: instances.RandomMachineID,
		BootID: boot, SimKernel: kernel,
		// A thousand hosts' jobs on the fleet's clock: the loop runs on
		// the host, as everywhere, and the simulator plays the scripts
		// there rather than in the VMs.
		NewJob: func(parent context.Context, _ jobs.VM, log logr.Logger) guest.Workload {
			return jobloop.NewSimWorkload(parent, o.Clock, 0, log)
		},
		Rebooter: rebooter{launcher: launcher, kernel: kernel, boot: boot, log: log.WithName("reboot")},
	}
	return m, nil
}

// supervise runs the host's agent, as launchd runs it on a Mac: again after
// the host rebooted (RebootTime later), or after it failed.
func (m *mini) supervise(ctx context.Context) {
	defer func() { _ = m.launcher.Close(context.Background()) }()
	for ctx.Err() == nil {
		err := m.run(ctx)
		pause := 5 * time.Second
		switch {
		case ctx.Err() != nil:
			return
		case errors.Is(err, agent.ErrHostRebooted):
			pause = cmp.Or(m.opts.RebootTime, 5*time.Second)
			m.log.Info("The sim host rebooted; the agent starts again", "after", pause.String())
		default:
			m.log.Error(err, "Agent stopped; starting it again", "after", pause.String())
		}
		select {
		case <-ctx.Done():
		case <-m.opts.Clock.After(pause):
		}
	}
}

// run runs the agent once, as cmd/agent does: the bootstrap kubeconfig
// seeds the token file, which the agent's renewer rewrites.
func (m *mini) run(ctx context.Context) error {
	cfg, err := clientcmd.BuildConfigFromFlags("", m.kubeconf)
	if err != nil {
		return fmt.Errorf("loading %s: %w", m.kubeconf, err)
	}
	cfg, err = agent.WithTokenFile(cfg, m.config.TokenFile)
	if err != nil {
		return err
	}
	return agent.Run(ctx, cfg, m.config)
}

// rebooter reboots an in-process sim host: its VMs end at once (their
// kernel slots with them), the kernel's counter starts from zero, stuck
// slots included, and the host gets a new boot id.
type rebooter struct {
	launcher *helper.InProcessLauncher
	kernel   *sim.MemKernel
	boot     host.SimBootID
	log      logr.Logger
}

// Reboot implements host.Rebooter.
func (r rebooter) Reboot(ctx context.Context) error {
	if err := r.launcher.Kill(ctx); err != nil {
		return fmt.Errorf("sim reboot: %w", err)
	}
	if err := r.kernel.Reboot(); err != nil {
		return fmt.Errorf("sim reboot: %w", err)
	}
	id, err := r.boot.NewBoot()
	if err != nil {
		return fmt.Errorf("sim reboot: %w", err)
	}
	r.log.Info("Sim host rebooted", "bootID", id)
	return nil
}
