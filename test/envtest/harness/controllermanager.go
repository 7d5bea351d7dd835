package harness

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// ErrNoControllerManager means bin/k8s holds no kube-controller-manager.
var ErrNoControllerManager = errors.New("kube-controller-manager missing: run 'make controlplane'")

// ControllerManagerUser is the identity kube-controller-manager runs as: a
// member of system:masters, every controller under it
// (--use-service-account-credentials=false).
const ControllerManagerUser = "kube-controller-manager"

// DefaultControllers are the controllers StartControllerManager runs unless
// told otherwise: the default ServiceAccount of each namespace, garbage
// collection, namespace finalisation, and the node lifecycle (silent Nodes
// become unreachable:NoExecute) with the taint-based eviction behind it.
// serviceaccount-token-controller is left out: it needs the API server's
// signing key, and nothing here reads legacy token Secrets.
var DefaultControllers = []string{
	"serviceaccount-controller",
	"garbage-collector-controller",
	"namespace-controller",
	"node-lifecycle-controller",
	"taint-eviction-controller",
}

// ControllerManagerOptions tune StartControllerManager. Zero values take the
// defaults in brackets, which are short so that tests see a silent Node
// tainted within seconds.
type ControllerManagerOptions struct {
	// Controllers [DefaultControllers], by their v1.37 names.
	Controllers []string
	// NodeMonitorPeriod [1s] is how often the node lifecycle controller
	// looks at every Node's heartbeat.
	NodeMonitorPeriod time.Duration
	// NodeMonitorGracePeriod [8s]: a Node whose heartbeat Lease (in
	// kube-node-lease) is not renewed for this long becomes Ready=Unknown,
	// and is tainted node.kubernetes.io/unreachable:NoExecute.
	NodeMonitorGracePeriod time.Duration
	// NodeStartupGracePeriod [1m] is the same for a Node that never
	// posted a Ready condition.
	NodeStartupGracePeriod time.Duration
	// NodeEvictionRate [10] is how many Nodes per second may be tainted
	// NoExecute (upstream: 0.1).
	NodeEvictionRate float64
	// Verbosity [2] is klog's -v; 2 logs each taint and eviction.
	Verbosity int
	// Log receives kube-controller-manager's output; nil writes it to a
	// file in the process' directory (ControllerManager.LogPath), which
	// Stop keeps.
	Log io.Writer
	// ExtraArgs are appended to the flags, and override them.
	ExtraArgs []string
}

// ControllerManager is a kube-controller-manager process started from
// bin/k8s against Env's API server.
type ControllerManager struct {
	// Dir holds its kubeconfig and, without Options.Log, its log.
	Dir string
	// Kubeconfig is its admin kubeconfig.
	Kubeconfig string
	// LogPath is where its log goes when Options.Log is nil.
	LogPath string
	// Args are the flags it runs with.
	Args []string

	cmd     *exec.Cmd
	logFile *os.File
	done    chan struct{}
	err     error
	once    sync.Once
}

// ControllerManagerArgs are the flags of a kube-controller-manager for
// the options, with the admin kubeconfig at kubeconfig.
func ControllerManagerArgs(kubeconfig string, o ControllerManagerOptions) []string {
	controllers := o.Controllers
	if len(controllers) == 0 {
		controllers = DefaultControllers
	}
	period := durationOr(o.NodeMonitorPeriod, time.Second)
	grace := durationOr(o.NodeMonitorGracePeriod, 8*time.Second)
	startup := durationOr(o.NodeStartupGracePeriod, time.Minute)
	rate := o.NodeEvictionRate
	if rate == 0 {
		rate = 10
	}
	v := o.Verbosity
	if v == 0 {
		v = 2
	}
	return append([]string{
		"--kubeconfig=" + kubeconfig,
		"--controllers=" + strings.Join(controllers, ","),
		"--leader-elect=false",
		"--secure-port=0",
		"--use-service-account-credentials=false",
		"--node-monitor-period=" + period.String(),
		"--node-monitor-grace-period=" + grace.String(),
		"--node-startup-grace-period=" + startup.String(),
		"--node-eviction-rate=" + strconv.FormatFloat(rate, 'f', -1, 64),
		// A cluster of a few Nodes is never "large", so when more than
		// half of three or more Nodes fall silent (a partially disrupted
		// zone) upstream stops tainting (a secondary rate of 0 below this
		// size). Here every cluster taints at the one rate.
		"--large-cluster-size-threshold=0",
		"--secondary-node-eviction-rate=" + strconv.FormatFloat(rate, 'f', -1, 64),
		"--v=" + strconv.Itoa(v),
	}, o.ExtraArgs...)
}

func durationOr(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}

// WithDefaultTolerationSeconds makes Start's API server give every Pod that
// does not tolerate node.kubernetes.io/not-ready and unreachable NoExecute
// itself a toleration of seconds (the DefaultTolerationSeconds admission
// plugin; upstream 300), so that the taint-based eviction of such a Pod
// happens within a test.
func WithDefaultTolerationSeconds(seconds int) func(*envtest.Environment) {
	return func(env *envtest.Environment) {
		args := env.ControlPlane.GetAPIServer().Configure()
		args.Set("default-not-ready-toleration-seconds", strconv.Itoa(seconds))
		args.Set("default-unreachable-toleration-seconds", strconv.Itoa(seconds))
	}
}

// StartControllerManager runs bin/k8s/kube-controller-manager against the
// API server as a system:masters user, and waits until it works: when the
// ServiceAccount controller runs, until the default namespace has its
// default ServiceAccount. Env.Stop stops it if the suite has not.
func (e *Env) StartControllerManager(o ControllerManagerOptions) (*ControllerManager, error) {
	assets := e.Environment.BinaryAssetsDirectory
	if assets == "" {
		assets = os.Getenv("KUBEBUILDER_ASSETS")
	}
	bin := filepath.Join(assets, "kube-controller-manager")
	if _, err := os.Stat(bin); err != nil {
		return nil, fmt.Errorf("%w (looked in %s)", ErrNoControllerManager, assets)
	}
	user, err := e.Environment.ControlPlane.AddUser(envtest.User{Name: ControllerManagerUser, Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return nil, fmt.Errorf("adding the controller manager's user: %w", err)
	}
	kubeconfig, err := user.KubeConfig()
	if err != nil {
		return nil, fmt.Errorf("rendering the controller manager's kubeconfig: %w", err)
	}
	dir, err := os.MkdirTemp("", "kcm-")
	if err != nil {
		return nil, err
	}
	cm := &ControllerManager{Dir: dir, Kubeconfig: filepath.Join(dir, "kubeconfig"), done: make(chan struct{})}
	if err := os.WriteFile(cm.Kubeconfig, kubeconfig, 0o600); err != nil {
		return nil, err
	}
	cm.Args = ControllerManagerArgs(cm.Kubeconfig, o)
	cmd := exec.Command(bin, cm.Args...)
	out := o.Log
	if out == nil {
		cm.LogPath = filepath.Join(dir, "kube-controller-manager.log")
		if cm.logFile, err = os.Create(cm.LogPath); err != nil {
			return nil, err
		}
		out = cm.logFile
	}
	cmd.Stdout, cmd.Stderr = out, out
	// Pdeathsig: it dies with the test binary, even one killed by a timeout.
	cmd.SysProcAttr = childProcAttr(syscall.SIGKILL)
	if err := cmd.Start(); err != nil {
		cm.closeLog()
		return nil, fmt.Errorf("starting %s: %w", bin, err)
	}
	cm.cmd = cmd
	go func() {
		cm.err = cmd.Wait()
		cm.closeLog()
		close(cm.done)
	}()
	e.controllerManagers = append(e.controllerManagers, cm)

	controllers := o.Controllers
	if len(controllers) == 0 {
		controllers = DefaultControllers
	}
	if slices.Contains(controllers, "serviceaccount-controller") || slices.Contains(controllers, "serviceaccount") {
		if err := cm.waitFor(e.Client, 2*time.Minute, func(ctx context.Context, c client.Client) (bool, error) {
			err := c.Get(ctx, client.ObjectKey{Namespace: corev1.NamespaceDefault, Name: "default"}, &corev1.ServiceAccount{})
			if apierrors.IsNotFound(err) {
				return false, nil
			}
			return err == nil, err
		}); err != nil {
			_ = cm.Stop()
			return nil, fmt.Errorf("kube-controller-manager did not create default/default: %w%s", err, cm.logTail())
		}
	}
	return cm, nil
}

// waitFor polls cond until it holds, the process exits, or timeout.
func (cm *ControllerManager) waitFor(c client.Client, timeout time.Duration, cond func(context.Context, client.Client) (bool, error)) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		select {
		case <-cm.done:
			return false, fmt.Errorf("kube-controller-manager exited: %v", cm.err)
		default:
		}
		ok, err := cond(ctx, c)
		if err != nil {
			return false, nil // the API server may be busy; keep polling until the deadline
		}
		return ok, nil
	})
}

func (cm *ControllerManager) closeLog() {
	if cm.logFile != nil {
		_ = cm.logFile.Close()
	}
}

// logTail is the end of the log file, for an error message.
func (cm *ControllerManager) logTail() string {
	if cm.LogPath == "" {
		return ""
	}
	b, err := os.ReadFile(cm.LogPath)
	if err != nil {
		return ""
	}
	if len(b) > 4096 {
		b = b[len(b)-4096:]
	}
	return "\n--- " + cm.LogPath + " (tail) ---\n" + string(b)
}

// Done is closed when the process has exited.
func (cm *ControllerManager) Done() <-chan struct{} { return cm.done }

// Stop terminates the process (SIGTERM, then SIGKILL after ten seconds) and
// waits for it. It may be called more than once. The directory stays when
// it holds the log.
func (cm *ControllerManager) Stop() error {
	if cm == nil {
		return nil
	}
	var err error
	cm.once.Do(func() {
		select {
		case <-cm.done:
			// It exited on its own: that is an error, unless it was stopped.
			if cm.err != nil {
				err = fmt.Errorf("kube-controller-manager had exited: %w%s", cm.err, cm.logTail())
			}
		default:
			_ = cm.cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-cm.done:
			case <-time.After(10 * time.Second):
				_ = cm.cmd.Process.Kill()
				<-cm.done
			}
		}
		if cm.LogPath == "" {
			_ = os.RemoveAll(cm.Dir)
		} else {
			_ = os.Remove(cm.Kubeconfig)
		}
	})
	return err
}
