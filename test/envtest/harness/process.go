package harness

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/boualleiguie/macrack-operator/internal/policy"
)

// LeaderElectionID is the name of the operator's leader election Lease, in
// OperatorNamespace.
const LeaderElectionID = "operator.macrack.io"

// BuildOperator builds cmd/operator into dir, without symbols (as make
// test links its binaries: a shorter link).
func BuildOperator(dir string) (string, error) {
	out := filepath.Join(dir, "operator")
	cmd := exec.Command("go", "build", "-ldflags=-s -w", "-o", out, "./cmd/operator")
	cmd.Dir = RepoRoot()
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building the operator: %w: %s", err, b)
	}
	return out, nil
}

// OperatorProcessOptions tune StartOperatorProcess.
type OperatorProcessOptions struct {
	// Binary is cmd/operator, as BuildOperator built it.
	Binary string
	// Name tells the process apart in its directory's name.
	Name string
	// Dir is where its directory goes; the system's temporary directory if
	// empty.
	Dir string
	// LeaseDuration, RenewDeadline and RetryPeriod time the leader
	// election; zero leaves the operator's defaults (15s, 10s, 2s).
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
	// MaxConcurrentReconciles [the operator's 4] bounds parallel lease
	// reconciles.
	MaxConcurrentReconciles int
	// ExtraArgs are appended to the flags, and override them.
	ExtraArgs []string
}

// OperatorProcess is cmd/operator running as its own process against Env's
// API server, as one replica of the Deployment does: leader election on,
// the controllers and the admission policies' applier on the leader, and no
// webhooks (the suites that need them serve them in-process).
type OperatorProcess struct {
	// Dir holds its kubeconfig and its log.
	Dir string
	// LogPath is its standard output and error.
	LogPath string
	// Args are the flags it runs with.
	Args []string

	cmd     *exec.Cmd
	logFile *os.File
	done    chan struct{}
	err     error
	once    sync.Once
}

// OperatorProcessArgs are the flags of an operator replica with the
// kubeconfig at kubeconfig, the policies' params, and the options.
func OperatorProcessArgs(kubeconfig string, params policy.Params, o OperatorProcessOptions) []string {
	args := []string{
		"--kubeconfig=" + kubeconfig,
		"--leader-elect",
		"--leader-election-namespace=" + OperatorNamespace,
		"--leader-election-id=" + LeaderElectionID,
		"--metrics-bind-address=0",
		"--health-probe-bind-address=0",
		"--enable-webhooks=false",
		"--apply-admission-policies=true",
		"--policy-namespace=" + OperatorNamespace,
		"--agents-namespace=" + params.AgentsNamespace,
		"--operator-username=" + params.OperatorUsername,
		"--agent-token-audiences=" + params.AgentTokenAudiences,
		"--zap-devel",
	}
	for _, f := range []struct {
		flag string
		d    time.Duration
	}{
		{"--leader-elect-lease-duration", o.LeaseDuration},
		{"--leader-elect-renew-deadline", o.RenewDeadline},
		{"--leader-elect-retry-period", o.RetryPeriod},
	} {
		if f.d > 0 {
			args = append(args, f.flag+"="+f.d.String())
		}
	}
	if o.MaxConcurrentReconciles > 0 {
		args = append(args, "--max-concurrent-reconciles="+strconv.Itoa(o.MaxConcurrentReconciles))
	}
	return append(args, o.ExtraArgs...)
}

// StartOperatorProcess runs o.Binary as the operator's user (a member of
// system:masters, named as Env.Params names it), in OperatorNamespace,
// which it creates. It returns once the process has started; whether it
// leads is up to the leader election. Env.Stop stops it if the suite has
// not.
func (e *Env) StartOperatorProcess(ctx context.Context, o OperatorProcessOptions) (*OperatorProcess, error) {
	if o.Binary == "" {
		return nil, errors.New("OperatorProcessOptions.Binary is required: see BuildOperator")
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: OperatorNamespace}}
	if err := e.Client.Create(ctx, ns); client.IgnoreAlreadyExists(err) != nil {
		return nil, err
	}
	params, err := e.Params(ctx)
	if err != nil {
		return nil, err
	}
	user, err := e.Environment.ControlPlane.AddUser(envtest.User{Name: params.OperatorUsername, Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return nil, fmt.Errorf("adding the operator's user: %w", err)
	}
	kubeconfig, err := user.KubeConfig()
	if err != nil {
		return nil, fmt.Errorf("rendering the operator's kubeconfig: %w", err)
	}
	name := o.Name
	if name == "" {
		name = "operator"
	}
	dir, err := os.MkdirTemp(o.Dir, name+"-")
	if err != nil {
		return nil, err
	}
	p := &OperatorProcess{Dir: dir, LogPath: filepath.Join(dir, "operator.log"), done: make(chan struct{})}
	kubeconfigPath := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(kubeconfigPath, kubeconfig, 0o600); err != nil {
		return nil, err
	}
	if p.logFile, err = os.Create(p.LogPath); err != nil {
		return nil, err
	}
	p.Args = OperatorProcessArgs(kubeconfigPath, params, o)
	cmd := exec.Command(o.Binary, p.Args...)
	// POD_NAMESPACE is what a Deployment's downward API would set.
	cmd.Env = append(os.Environ(), "POD_NAMESPACE="+OperatorNamespace)
	cmd.Stdout, cmd.Stderr = p.logFile, p.logFile
	// Pdeathsig: it dies with the test binary, even one killed by a timeout.
	cmd.SysProcAttr = childProcAttr(syscall.SIGKILL)
	if err := cmd.Start(); err != nil {
		_ = p.logFile.Close()
		return nil, fmt.Errorf("starting %s: %w", o.Binary, err)
	}
	p.cmd = cmd
	go func() {
		p.err = cmd.Wait()
		_ = p.logFile.Close()
		close(p.done)
	}()
	e.operatorProcesses = append(e.operatorProcesses, p)
	return p, nil
}

// Pid is the process' id.
func (p *OperatorProcess) Pid() int { return p.cmd.Process.Pid }

// Done is closed when the process has exited.
func (p *OperatorProcess) Done() <-chan struct{} { return p.done }

// Log is everything the process has written so far.
func (p *OperatorProcess) Log() string {
	b, _ := os.ReadFile(p.LogPath)
	return string(b)
}

// LogTail is the end of the log, for a failure's report.
func (p *OperatorProcess) LogTail() string {
	b, err := os.ReadFile(p.LogPath)
	if err != nil {
		return ""
	}
	if len(b) > 8192 {
		b = b[len(b)-8192:]
	}
	return "\n--- " + p.LogPath + " (tail) ---\n" + string(b)
}

// WaitForLog polls the log until it holds substr, the process exits, or
// timeout.
func (p *OperatorProcess) WaitForLog(substr string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	err := wait.PollUntilContextCancel(ctx, 50*time.Millisecond, true, func(context.Context) (bool, error) {
		b, _ := os.ReadFile(p.LogPath)
		if bytes.Contains(b, []byte(substr)) {
			return true, nil
		}
		select {
		case <-p.done:
			return false, fmt.Errorf("the operator exited: %v", p.err)
		default:
			return false, nil
		}
	})
	if err != nil {
		return fmt.Errorf("waiting for %q in the operator's log: %w%s", substr, err, p.LogTail())
	}
	return nil
}

// Kill sends SIGKILL, as the kernel's OOM killer or a lost host would, and
// waits for the process to die: it releases nothing.
func (p *OperatorProcess) Kill() error {
	var err error
	p.once.Do(func() {
		err = p.cmd.Process.Signal(syscall.SIGKILL)
		<-p.done
	})
	return err
}

// Stop terminates the process as the kubelet does (SIGTERM, then SIGKILL
// after ten seconds) and waits for it. It may be called more than once, and
// after Kill. An exit before Stop is an error, as is one in error after
// SIGTERM.
func (p *OperatorProcess) Stop() error {
	if p == nil {
		return nil
	}
	var err error
	p.once.Do(func() {
		select {
		case <-p.done:
			err = fmt.Errorf("the operator had exited: %v%s", p.err, p.LogTail())
			return
		default:
		}
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
			if p.err != nil {
				err = fmt.Errorf("the operator stopped in error: %w%s", p.err, p.LogTail())
			}
		case <-time.After(10 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.done
			err = fmt.Errorf("the operator did not stop within 10 s of SIGTERM%s", p.LogTail())
		}
	})
	return err
}
