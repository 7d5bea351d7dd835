package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// The controllers `make run` runs, as the envtest harness does
// (test/envtest/harness.DefaultControllers): default ServiceAccounts,
// garbage collection, namespace finalisation, and the node lifecycle with
// taint-based eviction. serviceaccount-token-controller needs a signing key
// and is left out.
var kcmControllers = []string{
	"serviceaccount-controller",
	"garbage-collector-controller",
	"namespace-controller",
	"node-lifecycle-controller",
	"taint-eviction-controller",
}

// Node monitoring at upstream's periods: a mini whose agent (heartbeat every
// 5s) is silent for 50s becomes Ready=Unknown and unreachable:NoExecute.
const (
	kcmNodeMonitorPeriod      = 5 * time.Second
	kcmNodeMonitorGracePeriod = 50 * time.Second
)

// controllerManager is the kube-controller-manager process of `make run`.
type controllerManager struct {
	*child
	port    int
	dir     string
	logPath string
}

// startControllerManager runs bin/k8s/kube-controller-manager as a
// system:masters user, serving its health checks on a free port, with its
// kubeconfig and certificates in a directory of its own and its log in
// bin/logs; it waits until /healthz answers ok.
func startControllerManager(ctx context.Context, env *envtest.Environment, bin string, logs *logFiles, port int) (*controllerManager, error) {
	dir, err := os.MkdirTemp("", "macrack-kcm-")
	if err != nil {
		return nil, err
	}
	cm := &controllerManager{port: port, dir: dir}
	kubeconfig, err := writeKubeconfig(env, "kube-controller-manager", filepath.Join(dir, "kubeconfig"))
	if err != nil {
		return cm, err
	}
	logFile, err := logs.open("kube-controller-manager", "kube-controller-manager", false)
	if err != nil {
		return cm, err
	}
	cm.logPath = logFile.Name()
	defer logFile.Close() // the child holds its own descriptor
	args := []string{
		"--kubeconfig=" + kubeconfig,
		"--controllers=" + strings.Join(kcmControllers, ","),
		"--leader-elect=false",
		"--use-service-account-credentials=false",
		"--bind-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(cm.port),
		"--cert-dir=" + filepath.Join(dir, "certs"),
		"--node-monitor-period=" + kcmNodeMonitorPeriod.String(),
		"--node-monitor-grace-period=" + kcmNodeMonitorGracePeriod.String(),
		"--v=2",
	}
	cmd := exec.Command(filepath.Join(bin, "k8s", "kube-controller-manager"), args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = childProcAttr(syscall.SIGTERM)
	if err := cmd.Start(); err != nil {
		return cm, fmt.Errorf("starting kube-controller-manager: %w", err)
	}
	cm.child = &child{name: "kube-controller-manager", logPath: cm.logPath, cmd: cmd, done: make(chan struct{})}
	go func() { cm.err = cmd.Wait(); close(cm.done) }()
	fmt.Printf("devcluster: kube-controller-manager started (pid %d)\n", cmd.Process.Pid)
	if err := cm.waitHealthy(ctx, time.Minute); err != nil {
		return cm, err
	}
	return cm, nil
}

// waitHealthy polls https://127.0.0.1:port/healthz (always allowed, served
// with a self-signed certificate) until it answers ok.
func (cm *controllerManager) waitHealthy(ctx context.Context, timeout time.Duration) error {
	hc := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // a local health check of a self-signed server
	}}
	url := fmt.Sprintf("https://127.0.0.1:%d/healthz", cm.port)
	deadline := time.Now().Add(timeout)
	for {
		select {
		case <-cm.done:
			return fmt.Errorf("kube-controller-manager exited: %v (log %s)%s", cm.err, cm.logPath, cm.logTail())
		case <-ctx.Done():
			return ctx.Err()
		default:
		}
		if resp, err := hc.Get(url); err == nil {
			ok := resp.StatusCode == http.StatusOK
			_ = resp.Body.Close()
			if ok {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("kube-controller-manager not healthy at %s after %s (log %s)%s", url, timeout, cm.logPath, cm.logTail())
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// logTail is the end of the log, for an error message.
func (cm *controllerManager) logTail() string {
	b, err := os.ReadFile(cm.logPath)
	if err != nil || len(b) == 0 {
		return ""
	}
	if len(b) > 2048 {
		b = b[len(b)-2048:]
	}
	return "\n" + string(b)
}

// stop stops the process and removes its directory; the log stays in
// bin/logs until the next make run.
func (cm *controllerManager) stop() {
	if cm == nil {
		return
	}
	if cm.child != nil {
		select {
		case <-cm.done:
			fmt.Fprintf(os.Stderr, "devcluster: kube-controller-manager had exited (%v); its log is %s\n", cm.err, cm.logPath)
		default:
		}
		cm.child.stop()
	}
	_ = os.RemoveAll(cm.dir)
}

// freePorts asks the kernel for n distinct free ports on 127.0.0.1, and
// releases them for the processes that will listen there, so that two
// `make run` clusters on one machine never collide.
func freePorts(n int) ([]int, error) {
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("picking a free port: %w", err)
		}
		defer l.Close() // held until all are picked, so that none repeats
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}
