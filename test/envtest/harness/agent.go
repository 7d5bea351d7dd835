package harness

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"

	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
	"github.com/boualleiguie/macrack-operator/internal/agent"
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
// ServiceAccount, with real vm-helper processes and the sim driver.
type Agent struct {
	Serial, Node, StateDir string
	// Bootstrap is the enrolment's token; the agent replaces it with its own.
	Bootstrap string
	stop      context.CancelFunc
	done      chan error
	once      sync.Once
	err       error
}

// AgentOptions tune StartAgent.
type AgentOptions struct {
	Serial, Class string
	// StateDir is reused across restarts; empty makes a new short one.
	StateDir   string
	HelperPath string
	Heartbeat  time.Duration
	Log        logr.Logger
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
	kc, err := enroll.Enroll(ctx, e.Client, e.Config, enroll.Options{Serial: o.Serial, Class: o.Class,
		AgentsNamespace: AgentsNamespace, TokenTTL: time.Hour})
	if err != nil {
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
		KernelStateDir: filepath.Join(o.StateDir, "kernel"), KillAfter: 10 * time.Second, Log: o.Log,
	})
	if err != nil {
		return nil, err
	}
	a := &Agent{Serial: o.Serial, Node: enroll.NodeName(o.Serial), StateDir: o.StateDir, Bootstrap: bootstrap, done: make(chan error, 1)}
	runCtx, cancel := context.WithCancel(ctx)
	a.stop = cancel
	disk := resource.MustParse("1T")
	go func() {
		a.done <- agent.Run(runCtx, cfg, agent.Config{
			NodeName: a.Node, AgentsNamespace: AgentsNamespace, StateDir: o.StateDir, Launcher: launcher,
			Facts: host.StaticFacts{Reported: &fleetv1alpha1.ReportedFacts{
				Disk: &disk, NetworkGbps: ptr.To(int32(10)), Chip: "M4", MacOSVersion: "15.5",
				SIPEnabled: ptr.To(true), VirtualizationEntitlement: ptr.To(true),
				Quota: &fleetv1alpha1.QuotaReport{State: fleetv1alpha1.QuotaOK},
			}},
			HeartbeatInterval: o.Heartbeat, FactsInterval: time.Minute, ImagesInterval: 500 * time.Millisecond, PullRetry: time.Second,
			TokenFile: tokenFile, TokenTTL: time.Hour,
			Clock: clock.RealClock{}, Log: o.Log, NewMachineID: instances.RandomMachineID, Poll: time.Second,
		})
	}()
	return a, nil
}

// Stop stops the agent (not its helpers, which outlive it) and waits. It
// may be called more than once.
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
