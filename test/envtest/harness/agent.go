package harness

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
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
	"github.com/boualleiguie/macrack-operator/internal/enroll"
)

// AgentsNamespace is the agents' namespace in the suites.
const AgentsNamespace = "macrack-agents"

// BuildVMHelper builds cmd/vm-helper into dir.
func BuildVMHelper(dir string) (string, error) {
	out := filepath.Join(dir, "vm-helper")
	cmd := exec.Command("go", "build", "-o", out, "./cmd/vm-helper")
	cmd.Dir = RepoRoot()
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building vm-helper: %w: %s", err, b)
	}
	return out, nil
}

// Agent is a host agent running in-process against Env, as its own
// ServiceAccount, with real vm-helper processes and the sim driver. Like a
// real host's, it survives its own reboot: when the quarantine loop
// reboots the sim host, the agent stops, and starts again after
// AgentOptions.RebootTime, with the same state directory, in a new boot.
type Agent struct {
	Serial, Node, StateDir string
	// Bootstrap is the enrolment's token; the agent replaces it with its own.
	Bootstrap string
	stop      context.CancelFunc
	done      chan error
	once      sync.Once
	err       error
	reboots   atomic.Int32
}

// AgentOptions tune StartAgent.
type AgentOptions struct {
	Serial, Class string
	// StateDir is reused across restarts; empty makes a new short one.
	StateDir   string
	HelperPath string
	Heartbeat  time.Duration
	Log        logr.Logger
	// RebootTime is how long the sim host takes to reboot, from the agent's
	// stop to its start in the new boot; 1s if zero.
	RebootTime time.Duration
	// StopGrace bounds a graceful stop of a VM before it is forced off;
	// the agent's 30s if zero.
	StopGrace time.Duration
	// HelperArgs are added to each vm-helper's command line, for example
	// --sim-shutdown-time.
	HelperArgs []string
	// Address, if set, is the chassis' enrolled address, where the agent
	// serves its instances' kubelet API on KubeletPort, trusting the
	// client certificates of KubeletClientCAFile (kubeletca).
	Address             string
	KubeletPort         int
	KubeletClientCAFile string
	// JobPoll is how often a runner VM's job loop, on the agent, asks
	// GitLab for its job; jobloop's 3s if zero.
	JobPoll time.Duration
}

// StartAgent enrolls the chassis (as macrackctl node enroll does) if need
// be, and runs its agent with the bootstrap kubeconfig.
func (e *Env) StartAgent(o AgentOptions) (*Agent, error) {
	ctx := context.Background()
	if o.StateDir == "" {
		// Short: helper sockets live here, and sockaddr_un holds 103 bytes.
		d, err := os.MkdirTemp("", "mr")
		if err != nil {
			return nil, err
		}
		o.StateDir = d
	}
	kc, err := enroll.Enroll(ctx, e.Client, e.Config, enroll.Options{Serial: o.Serial, Class: o.Class, Address: o.Address,
		AgentsNamespace: AgentsNamespace, TokenTTL: time.Hour})
	if err != nil {
		return nil, err
	}
	// As launchd would start it again until then: the operator grants the
	// agents' roles once agent.scope is in force.
	if err := enroll.WaitForRoles(ctx, e.Client, AgentsNamespace, enroll.NodeName(o.Serial), time.Minute); err != nil {
		return nil, err
	}
	cfg, err := clientcmd.RESTConfigFromKubeConfig(kc)
	if err != nil {
		return nil, err
	}
	// As cmd/agent does: the bootstrap token seeds a token file, which the
	// agent's renewer rewrites with tokens it requests for itself.
	tokenFile := filepath.Join(o.StateDir, "token")
	bootstrap := cfg.BearerToken
	if _, err := os.Stat(tokenFile); os.IsNotExist(err) {
		if err := os.WriteFile(tokenFile, []byte(cfg.BearerToken), 0o600); err != nil {
			return nil, err
		}
	}
	cfg.BearerToken, cfg.BearerTokenFile = "", tokenFile
	launcher, err := helper.NewExecLauncher(helper.ExecConfig{
		Dir: filepath.Join(o.StateDir, "run"), HelperPath: o.HelperPath, Driver: "sim",
		KernelStateDir: filepath.Join(o.StateDir, "kernel"), KillAfter: 10 * time.Second, Log: o.Log, ExtraArgs: o.HelperArgs,
	})
	if err != nil {
		return nil, err
	}
	a := &Agent{Serial: o.Serial, Node: enroll.NodeName(o.Serial), StateDir: o.StateDir, Bootstrap: bootstrap, done: make(chan error, 1)}
	kernel, err := a.kernel()
	if err != nil {
		return nil, err
	}
	boot := host.SimBootID{Dir: kernel.Dir()}
	runCtx, cancel := context.WithCancel(ctx)
	a.stop = cancel
	disk := resource.MustParse("1T")
	config := agent.Config{
		NodeName: a.Node, AgentsNamespace: AgentsNamespace, StateDir: o.StateDir, Launcher: launcher,
		Facts: host.StaticFacts{Reported: &fleetv1alpha1.ReportedFacts{
			Disk: &disk, NetworkGbps: ptr.To(int32(10)), Chip: "M4", MacOSVersion: "15.5",
			SIPEnabled: ptr.To(true), VirtualizationEntitlement: ptr.To(true),
			Quota: &fleetv1alpha1.QuotaReport{State: fleetv1alpha1.QuotaOK},
		}},
		HeartbeatInterval: o.Heartbeat, FactsInterval: time.Minute, ImagesInterval: 500 * time.Millisecond, PullRetry: time.Second,
		TokenFile: tokenFile, TokenTTL: time.Hour,
		Clock: clock.RealClock{}, Log: o.Log, NewMachineID: instances.RandomMachineID, Poll: time.Second,
		BootID: boot, SimKernel: kernel, StopGrace: o.StopGrace, JobPoll: o.JobPoll,
		Rebooter: host.SimRebooter{HelperDir: filepath.Join(o.StateDir, "run"), Kernel: kernel, Boot: boot, Log: o.Log.WithName("reboot")},
	}
	if o.Address != "" {
		config.KubeletAddress = net.JoinHostPort(o.Address, strconv.Itoa(o.KubeletPort))
		config.KubeletClientCAFile = o.KubeletClientCAFile
	}
	rebootTime := o.RebootTime
	if rebootTime <= 0 {
		rebootTime = time.Second
	}
	go func() {
		// The agent's supervisor, as launchd on a Mac, or cmd/agent's
		// re-exec in the sim: after the agent rebooted its host, the host
		// is down for rebootTime, then the agent starts again.
		for {
			err := agent.Run(runCtx, cfg, config)
			if !errors.Is(err, agent.ErrHostRebooted) {
				a.done <- err
				return
			}
			a.reboots.Add(1)
			select {
			case <-runCtx.Done():
				a.done <- nil
				return
			case <-time.After(rebootTime):
			}
		}
	}()
	return a, nil
}

// kernel is the sim kernel of the agent's host, whose state its helpers
// share.
func (a *Agent) kernel() (*sim.FileKernel, error) {
	return sim.NewFileKernel(filepath.Join(a.StateDir, "kernel"))
}

// BootID is the sim host's current boot id.
func (a *Agent) BootID() (string, error) {
	return host.SimBootID{Dir: filepath.Join(a.StateDir, "kernel")}.BootID(context.Background())
}

// Reboots is how many times the agent rebooted its host since StartAgent:
// counted when the agent stops for the reboot, a moment after the host's
// new boot id (BootID) is there.
func (a *Agent) Reboots() int { return int(a.reboots.Load()) }

// MaxActiveVMs is the most VMs the host's kernel ever counted at once,
// across reboots (stuck slots aside): a suite asserts with it that no
// third VM ever existed.
func (a *Agent) MaxActiveVMs() (int, error) {
	k, err := a.kernel()
	if err != nil {
		return 0, err
	}
	return k.MaxActive()
}

// ActiveVMs is how many VMs the host's kernel counts now, stuck slots
// included.
func (a *Agent) ActiveVMs() (int, error) {
	k, err := a.kernel()
	if err != nil {
		return 0, err
	}
	return k.Active()
}

// StickQuota reproduces the stuck-quota bug on the host at once, as the
// sim.macrack.io/quota-stick annotation does without the agent's start
// that follows: the kernel's counter fills with stuck slots up to the
// limit, so the next start is refused with code 6 while fewer VMs run.
// A reboot clears them. It returns how many slots stuck.
func (a *Agent) StickQuota() (int, error) {
	k, err := a.kernel()
	if err != nil {
		return 0, err
	}
	return k.StickSlots(sim.QuotaLimit)
}

// DiskState is the sim's record of how the VM of instance uid last left
// its disk: open (running, or its helper died), clean or dirty.
func (a *Agent) DiskState(uid string) (sim.DiskState, error) {
	return sim.ReadDiskState(filepath.Join(a.DiskDir(uid), "disk.img"))
}

// DiskClosedCleanly reports whether the VM of instance uid last closed
// its disk cleanly (a guest shutdown or a requestStop, not a forced stop).
func (a *Agent) DiskClosedCleanly(uid string) (bool, error) {
	return sim.DiskClosedCleanly(filepath.Join(a.DiskDir(uid), "disk.img"))
}

// Stop stops the agent (not its helpers, which outlive it) and waits, also
// while its sim host reboots. It may be called more than once.
func (a *Agent) Stop() error {
	a.once.Do(func() {
		a.stop()
		a.err = <-a.done
	})
	return a.err
}

// HelperPID reads the pid file of an instance's helper; 0 if none.
func (a *Agent) HelperPID(uid string) int {
	b, err := os.ReadFile(filepath.Join(a.StateDir, "run", uid+".pid"))
	if err != nil {
		return 0
	}
	var pid int
	fmt.Sscanf(string(b), "%d", &pid)
	return pid
}

// DiskDir is where an instance's disk lives on this agent's host.
func (a *Agent) DiskDir(uid string) string { return instances.Disks{Root: a.StateDir}.InstanceDir(uid) }

// KillHelpers ends the agent's VM helpers at once: they outlive their agent
// by design, so a suite ends them itself, whatever failed before.
func (a *Agent) KillHelpers() {
	files, _ := filepath.Glob(filepath.Join(a.StateDir, "run", "*.pid"))
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && pid > 0 {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}
