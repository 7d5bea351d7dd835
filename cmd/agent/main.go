// Command agent is the MacRack host agent: one per Mac mini. It registers the
// chassis' Node, heartbeats, reports the hardware facts, and runs the
// instances placed on the chassis, each in its own vm-helper process. It
// talks to the operator only through the Kubernetes API.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/go-logr/logr"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"

	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
	"github.com/boualleiguie/macrack-operator/internal/agent"
	"github.com/boualleiguie/macrack-operator/internal/agent/driver/sim"
	"github.com/boualleiguie/macrack-operator/internal/agent/helper"
	"github.com/boualleiguie/macrack-operator/internal/agent/host"
	"github.com/boualleiguie/macrack-operator/internal/agent/instances"
	"github.com/boualleiguie/macrack-operator/internal/logging"
	"github.com/boualleiguie/macrack-operator/internal/runner/custom"
)

func main() {
	var (
		kubeconfig, serial, agentsNS, stateDir, driverName, helperPath, tokenFile string
		guestKeyFile, managedPrefs                                                string
		kubeletAddress, kubeletClientCA, kubeletCert, kubeletKey                  string
		gitlabRunner, runnerStage                                                 string
		heartbeat, facts, tokenTTL, simRebootTime                                 time.Duration
		simDisk, simBootArgs, simChip, cacheBudget, registryAuth                  string
		pullConcurrency                                                           int
		simNIC                                                                    int
		simSIP, simEntitlement                                                    bool
	)
	fs := flag.CommandLine
	fs.StringVar(&serial, "serial", "", "This chassis' serial, as Apple prints it (required).")
	fs.StringVar(&agentsNS, "agents-namespace", "macrack-agents", "The namespace of the agents' ServiceAccounts.")
	fs.StringVar(&stateDir, "state-dir", "/var/lib/macrack", "Images, instance disks and helper sockets.")
	fs.StringVar(&driverName, "driver", "sim", "The VM driver: sim, or vz on a Mac.")
	fs.StringVar(&helperPath, "vm-helper", "", "The vm-helper binary; defaults to vm-helper beside this one.")
	fs.StringVar(&tokenFile, "token-file", "", "Where the agent keeps its renewed token; defaults to <state-dir>/token.")
	fs.StringVar(&managedPrefs, "managed-preferences", "", "On a Mac, the chassis' managed preferences (its MDM profile): the serial, the agents' namespace and the bootstrap kubeconfig, for the flags not given.")
	fs.StringVar(&guestKeyFile, "guest-key-file", "", "Where the agent keeps the chassis' guest key, which opens its instances' sealed guest configs; defaults to <state-dir>/guest-key.")
	fs.StringVar(&kubeletAddress, "kubelet-address", "", "Serve the kubelet API of this chassis' instances (kubectl exec, logs and port-forward) on IP:port; the IP is the one enrolled with --address. Empty serves none.")
	fs.StringVar(&kubeletClientCA, "kubelet-client-ca-file", "", "The CA of the client certificates the kubelet API accepts: the cluster's, which signs the API server's --kubelet-client-certificate.")
	fs.StringVar(&kubeletCert, "kubelet-tls-cert-file", "", "The kubelet API's serving certificate; with --kubelet-tls-key-file. Empty: one the cluster signs (a CertificateSigningRequest of macrack.io/kubelet-serving for this Node and the --kubelet-address IP, its key in --state-dir), self-signed until it is issued.")
	fs.StringVar(&kubeletKey, "kubelet-tls-key-file", "", "The kubelet API's serving key.")
	fs.StringVar(&gitlabRunner, "gitlab-runner", "", "gitlab-runner (18.1 or later) on this host: a runner VM's job runs with it and the custom executor, the runner token kept here. Empty: the project's own job loop (the sim's).")
	fs.StringVar(&runnerStage, "runner-stage", "", "macrack-runner-stage, the custom executor's stages; defaults to "+custom.DefaultStageBinary+".")
	fs.DurationVar(&heartbeat, "heartbeat-interval", 10*time.Second, "How often the heartbeat Lease is renewed.")
	fs.DurationVar(&facts, "facts-interval", 5*time.Minute, "How often the hardware facts are reported again.")
	fs.DurationVar(&tokenTTL, "token-ttl", time.Hour, "The lifetime of each token the agent requests for itself.")
	fs.StringVar(&cacheBudget, "image-cache-budget", "", "Overrides the class's imageCacheBudget: what the golden cache may allocate, e.g. 300Gi.")
	fs.IntVar(&pullConcurrency, "pull-concurrency", 4, "How many chunks of a golden are fetched at once.")
	fs.StringVar(&registryAuth, "registry-auth", "", "A Docker config JSON file with the golden registries' credentials; anonymous if unset.")
	fs.StringVar(&simDisk, "sim-disk", "1T", "sim: the reported SSD size.")
	fs.IntVar(&simNIC, "sim-nic-gbps", 10, "sim: the reported NIC speed.")
	fs.StringVar(&simChip, "sim-chip", "M4", "sim: the reported chip.")
	fs.BoolVar(&simSIP, "sim-sip", true, "sim: whether SIP is reported on.")
	fs.BoolVar(&simEntitlement, "sim-entitlement", true, "sim: whether the virtualization entitlement is reported.")
	fs.StringVar(&simBootArgs, "sim-boot-args", "", "sim: the reported boot-args.")
	fs.DurationVar(&simRebootTime, "sim-reboot-time", 5*time.Second, "sim: how long the simulated host takes to reboot, before the agent starts again.")
	zapOpts := logging.BindFlags(fs)
	flag.Parse()
	// --kubeconfig is controller-runtime's flag: the bootstrap kubeconfig
	// from `macrackctl node enroll`.
	if f := flag.Lookup("kubeconfig"); f != nil {
		kubeconfig = f.Value.String()
	}
	log := logging.New(zapOpts)
	ctrl.SetLogger(log)

	if err := func() error {
		var kubeconfigData []byte
		if managedPrefs != "" {
			var err error
			if kubeconfigData, err = managedSettings(fs, managedPrefs); err != nil {
				return err
			}
		}
		if serial == "" {
			return fmt.Errorf("--serial is required")
		}
		node := strings.ToLower(serial)
		if helperPath == "" {
			self, err := os.Executable()
			if err != nil {
				return err
			}
			helperPath = filepath.Join(filepath.Dir(self), "vm-helper")
		}
		if tokenFile == "" {
			tokenFile = filepath.Join(stateDir, "token")
		}
		if guestKeyFile == "" {
			guestKeyFile = host.DefaultGuestKeyPath(stateDir)
		}
		cfg, err := restConfig(kubeconfig, kubeconfigData)
		if err != nil {
			return err
		}
		if cfg, err = agent.WithTokenFile(cfg, tokenFile); err != nil {
			return err
		}
		launcher, err := helper.NewExecLauncher(helper.ExecConfig{
			Dir: filepath.Join(stateDir, "run"), HelperPath: helperPath, Driver: driverName,
			KernelStateDir: filepath.Join(stateDir, "kernel"), KillAfter: time.Minute, Log: log.WithName("helpers"),
		})
		if err != nil {
			return err
		}
		disk, err := resource.ParseQuantity(simDisk)
		if err != nil {
			return fmt.Errorf("--sim-disk: %w", err)
		}
		var budget int64
		if cacheBudget != "" {
			q, err := resource.ParseQuantity(cacheBudget)
			if err != nil || q.Sign() <= 0 {
				return fmt.Errorf("--image-cache-budget %q is not a positive quantity", cacheBudget)
			}
			budget = q.Value()
		}
		if pullConcurrency < 1 || pullConcurrency > 64 {
			return fmt.Errorf("--pull-concurrency %d is not between 1 and 64", pullConcurrency)
		}
		var auth []byte
		if registryAuth != "" {
			if auth, err = os.ReadFile(registryAuth); err != nil {
				return fmt.Errorf("--registry-auth: %w", err)
			}
		}
		source, err := factsSource(driverName, host.StaticFacts{Reported: &fleetv1alpha1.ReportedFacts{
			Disk: &disk, NetworkGbps: ptr.To(int32(simNIC)), Chip: simChip, MacOSVersion: "15.5",
			SIPEnabled: ptr.To(simSIP), BootArgs: simBootArgs, VirtualizationEntitlement: ptr.To(simEntitlement),
			Quota: &fleetv1alpha1.QuotaReport{State: fleetv1alpha1.QuotaOK}, AgentVersion: "sim",
		}}, helperPath, log.WithName("facts"))
		if err != nil {
			return err
		}
		plat, err := platformFor(driverName, stateDir, log)
		if err != nil {
			return err
		}
		ctx := ctrl.SetupSignalHandler()
		err = agent.Run(ctx, cfg, agent.Config{
			NodeName: node, AgentsNamespace: agentsNS, StateDir: stateDir, GuestKeyFile: guestKeyFile, Launcher: launcher,
			BootID: plat.bootID, Rebooter: plat.rebooter, SimKernel: plat.simKernel,
			Facts:             source,
			HeartbeatInterval: heartbeat, FactsInterval: facts, TokenFile: tokenFile, TokenTTL: tokenTTL,
			ImageCacheBudget: budget, PullConcurrency: pullConcurrency, RegistryAuth: auth,
			Clock: clock.RealClock{}, Log: log, NewMachineID: instances.RandomMachineID,
			KubeletAddress: kubeletAddress, KubeletClientCAFile: kubeletClientCA, KubeletCertFile: kubeletCert, KubeletKeyFile: kubeletKey,
			GitLabRunner: gitlabRunner, RunnerStage: runnerStage,
		})
		if errors.Is(err, agent.ErrHostRebooted) {
			return afterReboot(ctx, log, driverName, simRebootTime)
		}
		return err
	}(); err != nil {
		log.Error(err, "Agent stopped")
		os.Exit(1)
	}
}

// platform is what the driver's host gives the agent's quarantine loop.
type platform struct {
	bootID    agent.BootIDSource
	rebooter  agent.Rebooter
	simKernel sim.Kernel
}

// platformFor is the boot id, rebooter and (sim) kernel of the host the
// driver runs on.
func platformFor(driverName, stateDir string, log logr.Logger) (platform, error) {
	switch driverName {
	case "sim":
		// The helpers share the sim kernel's state directory; the boot id
		// lives there too, since a sim reboot is the kernel's.
		dir := filepath.Join(stateDir, "kernel")
		k, err := sim.NewFileKernel(dir)
		if err != nil {
			return platform{}, err
		}
		boot := host.SimBootID{Dir: dir}
		return platform{bootID: boot, simKernel: k, rebooter: host.SimRebooter{
			HelperDir: filepath.Join(stateDir, "run"), Kernel: k, Boot: boot, Log: log.WithName("reboot")}}, nil
	case "vz":
		boot, err := vzBootID()
		if err != nil {
			return platform{}, err
		}
		p := platform{bootID: boot}
		if vzRebooter == nil {
			log.Error(errNoRebooter, "A quarantined chassis stays quarantined until a person reboots it")
			return p, nil
		}
		if p.rebooter, err = vzRebooter(log.WithName("reboot")); err != nil {
			return platform{}, fmt.Errorf("%w: %w", errNoRebooter, err)
		}
		return p, nil
	}
	return platform{}, fmt.Errorf("unknown --driver %q: want sim or vz", driverName)
}

// errNoRebooter: the vz agent runs without a way to reboot its Mac.
var errNoRebooter = errors.New("--driver vz: no rebooter configured")

// vzRebooter builds a Mac's rebooter, host.NewLaunchdRebooter(): set by
// rebooter_darwin.go. Nil, the agent says "no rebooter configured", and
// the quarantine loop waits for a person to reboot the host.
var vzRebooter func(log logr.Logger) (agent.Rebooter, error)

// afterReboot is the agent's supervisor after it rebooted its host. In the
// sim, the host comes back after simRebootTime and the agent starts again,
// as launchd would start it on a Mac: it executes itself anew, with the
// same arguments. On a Mac, the host is going down: the agent waits for
// the end.
func afterReboot(ctx context.Context, log logr.Logger, driverName string, simRebootTime time.Duration) error {
	if driverName != "sim" {
		log.Info("The host is rebooting; the agent waits for the end")
		<-ctx.Done()
		return nil
	}
	log.Info("The sim host rebooted; the agent starts again", "after", simRebootTime.String())
	select {
	case <-ctx.Done():
		return nil
	case <-time.After(simRebootTime):
	}
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("starting again after the sim reboot: %w", err)
	}
	return fmt.Errorf("starting again after the sim reboot: %w", syscall.Exec(self, os.Args, os.Environ()))
}
