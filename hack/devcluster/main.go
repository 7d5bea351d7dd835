// Command devcluster is `make run`: it starts a local kube-apiserver and etcd
// from bin/k8s with envtest's flags, and a kube-controller-manager, installs
// the CRDs and the webhook configurations (self-signed serving certificates,
// generated here), runs the operator against them, writes a kubeconfig under
// bin/ and prints the line that points kubectl at it. It also serves a fake
// GitLab and writes a GitLabRunner that takes its jobs (gitlab.go). Every
// port is picked free, so two clusters can run on one machine. Ctrl-C stops
// every process it started.
package main

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/boualleiguie/macrack-operator/test/kubeletca"

	"github.com/boualleiguie/macrack-operator/internal/enroll"
	"github.com/boualleiguie/macrack-operator/internal/logging"
)

func main() {
	root := flag.String("root", ".", "The repository root (holds bin/ and config/).")
	operatorArgs := flag.String("operator-args", "", "Extra flags for the operator, space separated.")
	fleetSize := flag.Int("fleet", defaultFleetSize, fmt.Sprintf("How many simulated Mac minis to enroll and run; past %d, their agents run in one simfleet process.", inProcessAbove))
	jetStreamServers := flag.Int("jetstream", 1, "How many nats-servers hold the audit stream: 1, or 3 for a JetStream cluster with the stream at three replicas.")
	flag.Parse()
	if *fleetSize < 1 || *fleetSize > 5000 {
		fmt.Fprintf(os.Stderr, "devcluster: --fleet %d is not between 1 and 5000\n", *fleetSize)
		os.Exit(2)
	}
	if *jetStreamServers != 1 && *jetStreamServers != 3 {
		fmt.Fprintf(os.Stderr, "devcluster: --jetstream %d is not 1 or 3\n", *jetStreamServers)
		os.Exit(2)
	}
	if err := run(*root, *operatorArgs, *fleetSize, *jetStreamServers); err != nil {
		fmt.Fprintf(os.Stderr, "devcluster: %v\n", err)
		os.Exit(1)
	}
}

func run(root, extraArgs string, fleetSize, jetStreamServers int) error {
	root, err := filepath.Abs(root)
	if err != nil {
		return err
	}
	bin := filepath.Join(root, "bin")
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	defer stop()

	// Every process's log goes to a file of its own in bin/logs; devcluster's
	// own (controller-runtime's and client-go's) too, in MacRack's format.
	logs, err := newLogFiles(bin)
	if err != nil {
		return err
	}
	ownLog, err := logs.open("devcluster", "devcluster", true)
	if err != nil {
		return err
	}
	defer ownLog.Close()
	logOpts := logging.Options()
	logOpts.DestWriter = ownLog
	log := logging.New(logOpts)
	ctrl.SetLogger(log)
	klog.SetLogger(log)
	etcdLog, err := logs.open("etcd", "etcd", false)
	if err != nil {
		return err
	}
	defer etcdLog.Close()
	apiServerLog, err := logs.open("kube-apiserver", "kube-apiserver", false)
	if err != nil {
		return err
	}
	defer apiServerLog.Close()

	env := &envtest.Environment{
		CRDDirectoryPaths:     []string{filepath.Join(root, "config", "crd", "bases")},
		ErrorIfCRDPathMissing: true,
		BinaryAssetsDirectory: filepath.Join(bin, "k8s"),
		// envtest rewrites the webhook configurations to call
		// LocalServingHost:LocalServingPort with a CA it generates, and
		// writes the serving certificate into LocalServingCertDir.
		WebhookInstallOptions: envtest.WebhookInstallOptions{Paths: []string{filepath.Join(root, "config", "webhook")}},
	}
	// The API server's kubelet client, which the agents' kubelet API
	// trusts: kubectl exec and logs reach the sim VMs through it. The API
	// server verifies the agents' serving certificates against the
	// kubelet serving CA, with which the operator signs them.
	caDir, err := os.MkdirTemp("", "macrack-kubelet-ca-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(caDir)
	kubeletCA, err := kubeletca.New(caDir)
	if err != nil {
		return err
	}
	kubeletCA.Configure(env)
	env.ControlPlane.Etcd = &envtest.Etcd{Out: etcdLog, Err: etcdLog}
	apiServer := env.ControlPlane.GetAPIServer()
	apiServer.Out, apiServer.Err = apiServerLog, apiServerLog
	fmt.Println("devcluster: starting etcd and kube-apiserver from bin/k8s")
	if _, err := env.Start(); err != nil {
		_ = env.Stop()
		return fmt.Errorf("starting control plane (logs %s, %s): %w", apiServerLog.Name(), etcdLog.Name(), err)
	}
	defer func() {
		fmt.Println("devcluster: stopping kube-apiserver and etcd")
		if err := env.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "devcluster: stopping control plane: %v\n", err)
		}
	}()

	kubeconfigPath, err := writeKubeconfig(env, "macrack-admin", filepath.Join(bin, "kubeconfig"))
	if err != nil {
		return err
	}
	// The operator runs as its own user, so that the policies can tell its
	// writes from a person's.
	operatorKubeconfig, err := writeKubeconfig(env, operatorUser, filepath.Join(bin, "operator.kubeconfig"))
	if err != nil {
		return err
	}
	tenantKubeconfig, err := writeTenantKubeconfig(env, filepath.Join(bin, "tenant.kubeconfig"))
	if err != nil {
		return err
	}
	if err := createNamespaces(env, policyNamespace, agentsNamespace); err != nil {
		return err
	}
	ports, err := freePorts(3)
	if err != nil {
		return err
	}
	metricsPort, probePort, kcmPort := ports[0], ports[1], ports[2]

	kcm, err := startControllerManager(ctx, env, bin, logs, kcmPort)
	defer kcm.stop()
	if err != nil {
		return err
	}

	audiences, err := apiAudiences(env)
	if err != nil {
		return err
	}
	nats, err := startNATS(bin, logs, jetStreamServers)
	defer nats.stop()
	if err != nil {
		return err
	}
	gitLab, err := startGitLab(bin, logs)
	if err != nil {
		return err
	}
	defer gitLab.stop()
	gitLabHost, err := gitLab.allowedHost()
	if err != nil {
		return err
	}
	w := env.WebhookInstallOptions
	operatorLog, err := logs.open("operator", "operator", true)
	if err != nil {
		return err
	}
	defer operatorLog.Close()
	operator, err := startProcess("operator", filepath.Join(bin, "operator"), operatorLog, append(operatorArgs(operatorKubeconfig, metricsPort, probePort, audiences, extraArgs),
		fmt.Sprintf("--webhook-port=%d", w.LocalServingPort),
		"--webhook-cert-dir="+w.LocalServingCertDir,
		"--audit-sink="+nats.sink,
		"--cluster-name=devcluster",
		// The runners' tokens go to the fake GitLab only, as a production
		// operator's go to its allowed hosts only.
		"--gitlab-allowed-hosts="+gitLabHost,
		"--kubelet-serving-ca-cert-file="+kubeletCA.ServingCAFile,
		"--kubelet-serving-ca-key-file="+kubeletCA.ServingCAKeyFile,
	))
	if err != nil {
		return err
	}
	defer operator.stop()
	// The fleet's setup goes through the operator's webhooks.
	if err := waitReady(ctx, probePort, operator); err != nil {
		return err
	}

	fl, cleanup, err := startFleet(ctx, env, root, logs, fleetSize, kubeletCA)
	defer cleanup()
	if err != nil {
		return err
	}
	if err := setUpTenant(ctx, fl.client); err != nil {
		return err
	}

	today := time.Now().UTC().Truncate(24 * time.Hour)
	fmt.Printf(`
devcluster: ready. %d CRDs installed; the operator is running and serving its webhooks;
kube-controller-manager runs beside it; %d simulated Mac minis of class %s run their own
host agents.

    kube-apiserver           %s
    etcd                     %s
    operator webhooks        https://%s:%d
    operator metrics         http://127.0.0.1:%d/metrics
    operator probes          http://127.0.0.1:%d/healthz, /readyz
    kube-controller-manager  https://127.0.0.1:%d/healthz
    OCI registry (goldens)   http://%s/v2/
    sim golden               %s
    audit stream (JetStream) %s
    fake GitLab              %s, CA %s

    export PATH=%s:$PATH    # kubectl v1.37.2 and macrackctl
    export KUBECONFIG=%s          # the platform's admin
    kubectl get mn,mnc,mimg
    export KUBECONFIG=%s   # a tenant: macrack-tenant-edit in %s
    kubectl get mnl,mi

    # the stuck kernel VM quota, on a chassis with fewer than two VMs running:
    %s sim quota-stick <serial>
    kubectl get mn -w                      # Quarantined, Rebooting, Leased/Ready

    # the audit and billing stream, and what it bills:
    %s audit tail --nats %s --follow
    %s billing report --nats %s --from %s --to %s

%s
Each process logs to a file of its own (MacRack's in JSON lines, one format; jq reads them):
%s
    VM helpers               %s

Below: the fleet every %s, and any error a MacRack process logs. Press Ctrl-C to stop everything.
`, len(env.CRDs), fl.minis, fleetClass,
		env.Config.Host, env.ControlPlane.Etcd.URL, w.LocalServingHost, w.LocalServingPort, metricsPort, probePort,
		kcmPort, fl.registry.Host(), fl.golden, nats.describe(), gitLab.srv.URL(), gitLab.caPath, bin+string(filepath.ListSeparator)+filepath.Join(bin, "k8s"), kubeconfigPath, tenantKubeconfig, tenantNamespace, filepath.Join(bin, "macrackctl"),
		filepath.Join(bin, "macrackctl"), nats.url, filepath.Join(bin, "macrackctl"), nats.url,
		today.Format(time.RFC3339), today.Add(48*time.Hour).Format(time.RFC3339), gitLab.hint(),
		logs.describe("    "), fl.helperLogs, statusEvery)

	// The status line, and the errors above it, until the end.
	term := newTerminal(os.Stdout)
	watchCtx, stopWatching := context.WithCancel(ctx)
	statusClient, err := client.New(env.Config, client.Options{Scheme: fl.scheme})
	if err != nil {
		stopWatching()
		return err
	}
	watchers := make(chan struct{}, 2)
	go func() {
		runStatus(watchCtx, term, statusClient, fmt.Sprintf("http://127.0.0.1:%d/metrics", metricsPort))
		watchers <- struct{}{}
	}()
	go func() { tailErrors(watchCtx, term, logs.watched()); watchers <- struct{}{} }()
	defer func() {
		stopWatching()
		<-watchers
		<-watchers
		term.done()
	}()

	exited := make(chan *child, len(fl.agents)+2+len(nats.servers))
	for _, c := range append(append(fl.agents, operator, kcm.child), nats.servers...) {
		go func(c *child) { <-c.done; exited <- c }(c)
	}
	select {
	case <-ctx.Done():
		return nil
	case c := <-exited:
		return fmt.Errorf("%s exited: %w (its log: %s)", c.name, c.err, c.logPath)
	}
}

const (
	operatorUser    = "macrack-operator"
	policyNamespace = "macrack-system"
	agentsNamespace = "macrack-agents"
)

func operatorArgs(kubeconfig string, metricsPort, probePort int, audiences []string, extra string) []string {
	return append([]string{
		"--kubeconfig=" + kubeconfig,
		"--agent-token-audiences=" + strings.Join(audiences, ","),
		fmt.Sprintf("--metrics-bind-address=127.0.0.1:%d", metricsPort),
		fmt.Sprintf("--health-probe-bind-address=127.0.0.1:%d", probePort),
		"--operator-username=" + operatorUser,
		"--policy-namespace=" + policyNamespace,
		"--agents-namespace=" + agentsNamespace,
	}, strings.Fields(extra)...)
}

// apiAudiences reads the API server's token audiences, which the operator
// writes into agent.scope: agents may request tokens for these only.
func apiAudiences(env *envtest.Environment) ([]string, error) {
	c, err := client.New(env.Config, client.Options{})
	if err != nil {
		return nil, err
	}
	return enroll.APIAudiences(context.Background(), c, metav1.NamespaceDefault)
}

// writeKubeconfig adds a system:masters user and writes its kubeconfig.
func writeKubeconfig(env *envtest.Environment, user, path string) (string, error) {
	u, err := env.ControlPlane.AddUser(envtest.User{Name: user, Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return "", fmt.Errorf("adding user %s: %w", user, err)
	}
	data, err := u.KubeConfig()
	if err != nil {
		return "", fmt.Errorf("rendering the kubeconfig of %s: %w", user, err)
	}
	if err := os.WriteFile(path, data, 0o600); err != nil {
		return "", fmt.Errorf("writing %s: %w", path, err)
	}
	return path, nil
}

func createNamespaces(env *envtest.Environment, names ...string) error {
	c, err := client.New(env.Config, client.Options{})
	if err != nil {
		return err
	}
	for _, n := range names {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: n}}
		if err := c.Create(context.Background(), ns); client.IgnoreAlreadyExists(err) != nil {
			return fmt.Errorf("creating namespace %s: %w", n, err)
		}
	}
	return nil
}

// waitReady waits until the operator's readiness probe answers 200: its
// webhook server serves.
func waitReady(ctx context.Context, probePort int, operator *child) error {
	url := fmt.Sprintf("http://127.0.0.1:%d/readyz", probePort)
	deadline := time.Now().Add(2 * time.Minute)
	for {
		if resp, err := http.Get(url); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-operator.done:
			return fmt.Errorf("the operator exited before it was ready: %w (its log: %s)", operator.err, operator.logPath)
		case <-time.After(200 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the operator was not ready within 2 minutes (%s; its log: %s)", url, operator.logPath)
		}
	}
}

// child is a process devcluster started and must stop.
type child struct {
	name string
	// logPath is where its output goes.
	logPath string
	cmd     *exec.Cmd
	done    chan struct{}
	err     error
}

// startProcess starts path with its output in log, a file the child gets
// its own descriptor of.
func startProcess(name, path string, log *os.File, args []string) (*child, error) {
	cmd := exec.Command(path, args...)
	cmd.Stdout, cmd.Stderr = log, log
	// Its own process group, so Ctrl-C reaches it only through us, in order;
	// Pdeathsig, so it dies with us even if we are killed.
	cmd.SysProcAttr = childProcAttr(syscall.SIGTERM)
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s %s: %w", name, path, err)
	}
	c := &child{name: name, logPath: log.Name(), cmd: cmd, done: make(chan struct{})}
	go func() { c.err = cmd.Wait(); close(c.done) }()
	fmt.Printf("devcluster: %s started (pid %d)\n", name, cmd.Process.Pid)
	return c, nil
}

// stop asks the process to terminate, and kills it after ten seconds.
func (c *child) stop() {
	select {
	case <-c.done:
		return
	default:
	}
	fmt.Printf("devcluster: stopping %s\n", c.name)
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.done:
	case <-time.After(10 * time.Second):
		_ = c.cmd.Process.Kill()
		<-c.done
	}
}
