package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sync/errgroup"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/boualleiguie/macrack-operator/internal/enroll"
	macrackscheme "github.com/boualleiguie/macrack-operator/internal/scheme"
	"github.com/boualleiguie/macrack-operator/internal/simfleet"
	"github.com/boualleiguie/macrack-operator/test/kubeletca"
	"github.com/boualleiguie/macrack-operator/test/registry"
)

// The simulated fleet of `make run`: four minis, each its agent's own
// process with a vm-helper process per VM, as on real hosts. Past
// inProcessAbove minis (`make run FLEET=N`), the agents and their VMs run
// in one simfleet process, each agent still with its own identity,
// watches and heartbeats.
const (
	defaultFleetSize = 4
	inProcessAbove   = 8
	fleetClass       = "m4-16g-1t"
	// enrollWorkers enroll a large fleet side by side.
	enrollWorkers = 16
)

// fleet is what startFleet started.
type fleet struct {
	agents []*child
	// minis is how many minis the agents run.
	minis int
	// registry is the golden store; golden the sim golden's pinned reference.
	registry *registry.Server
	golden   string
	// client is the admin's client, with the project's scheme.
	client client.Client
	// scheme is MacRack's, for the status line's client; helperLogs where
	// the VM helpers log, each in its mini's state directory.
	scheme     *runtime.Scheme
	helperLogs string
}

// startFleet applies the agents' and tenants' roles, the sample class and
// image, enrolls n simulated minis exactly as an administrator would
// (macrackctl node enroll), each with its own bootstrap kubeconfig,
// identity and state directory, and starts their agents: one process per
// mini, or one simfleet process for them all past inProcessAbove.
//
// Each agent process serves its instances' kubelet API on its own
// loopback address, 127.0.0.(10+i), enrolled as its chassis' address, on a
// free port:
// kubectl exec and logs reach the sim VMs through the API server, which
// presents ca's client certificate. The in-process fleet serves none.
func startFleet(ctx context.Context, env *envtest.Environment, root string, logs *logFiles, n int, ca *kubeletca.CA) (*fleet, func(), error) {
	var agents []*child
	f := &fleet{}
	stateRoot, err := os.MkdirTemp("", "macrack-fleet-")
	if err != nil {
		return nil, func() {}, err
	}
	f.helperLogs = filepath.Join(stateRoot, "<mini>", "run", "<instance UID>.log")
	registryLog, err := logs.open("OCI registry", "registry", false)
	if err != nil {
		return nil, func() {}, err
	}
	cleanup := func() {
		defer registryLog.Close()
		for _, a := range agents {
			a.stop()
		}
		killHelpers(stateRoot)
		if f.registry != nil {
			f.registry.Stop()
		}
		_ = os.RemoveAll(stateRoot)
	}
	scheme, err := macrackscheme.New()
	if err != nil {
		return f, cleanup, err
	}
	f.scheme = scheme
	c, err := client.New(env.Config, client.Options{Scheme: scheme})
	if err != nil {
		return f, cleanup, err
	}
	f.client = c
	if err := c.Create(ctx, kubeletca.KubeletAPIAdminBinding()); client.IgnoreAlreadyExists(err) != nil {
		return f, cleanup, fmt.Errorf("binding the API server's kubelet client: %w", err)
	}
	for _, file := range []string{
		"config/rbac/agent_role.yaml", "config/rbac/tenant_roles.yaml", "config/rbac/catalog_reader.yaml",
		"config/samples/fleet_v1alpha1_macnodeclass.yaml",
	} {
		if err := applyFile(ctx, c, filepath.Join(root, file)); err != nil {
			return f, cleanup, err
		}
	}
	if f.registry, f.golden, err = startStore(ctx, c, filepath.Join(stateRoot, "registry"), registryLog); err != nil {
		return f, cleanup, err
	}
	bin := filepath.Join(root, "bin")
	serials := make([]string, n)
	for i := range serials {
		serials[i] = fmt.Sprintf("C02SIM%06d", i+1)
	}
	addresses, kubeletAddresses := map[string]string{}, map[string]string{}
	if n <= inProcessAbove {
		for i, serial := range serials {
			addresses[serial] = fmt.Sprintf("127.0.0.%d", 10+i)
		}
		if kubeletAddresses, err = freeKubeletAddresses(addresses); err != nil {
			return f, cleanup, err
		}
	}
	if err := enrollAll(ctx, c, env, stateRoot, serials, addresses); err != nil {
		return f, cleanup, err
	}
	// An agent refused at start exits, and devcluster would stop: wait
	// until the operator has granted the agents' roles (once agent.scope
	// is in force), as launchd would start the agent again until then.
	if err := enroll.WaitForRoles(ctx, c, agentsNamespace, enroll.NodeName(serials[0]), time.Minute); err != nil {
		return f, cleanup, err
	}
	if n > inProcessAbove {
		log, err := logs.open("simfleet", "simfleet", true)
		if err != nil {
			return f, cleanup, err
		}
		defer log.Close() // the child holds its own descriptor
		a, err := startProcess(fmt.Sprintf("simfleet (%d minis)", n), filepath.Join(bin, "simfleet"), log, []string{
			"--state-root=" + stateRoot, "--agents-namespace=" + agentsNamespace,
			"--heartbeat-interval=10s", "--zap-log-level=info",
		})
		if err != nil {
			return f, cleanup, err
		}
		agents = append(agents, a)
		f.agents, f.minis = agents, n
		return f, cleanup, nil
	}
	for _, serial := range serials {
		dir := filepath.Join(stateRoot, enroll.NodeName(serial))
		log, err := logs.open("agent "+serial, "agent-"+serial, true)
		if err != nil {
			return f, cleanup, err
		}
		a, err := startProcess("agent "+serial, filepath.Join(bin, "agent"), log, []string{
			"--serial=" + serial, "--kubeconfig=" + filepath.Join(dir, simfleet.BootstrapKubeconfig), "--state-dir=" + dir,
			"--agents-namespace=" + agentsNamespace, "--vm-helper=" + filepath.Join(bin, "vm-helper"),
			"--heartbeat-interval=5s", "--zap-log-level=info",
			"--kubelet-address=" + kubeletAddresses[serial], "--kubelet-client-ca-file=" + ca.CAFile,
		})
		log.Close() // the child holds its own descriptor
		if err != nil {
			return f, cleanup, err
		}
		agents = append(agents, a)
		f.agents, f.minis = agents, n
	}
	return f, cleanup, nil
}

// freeKubeletAddresses picks each agent's kubelet API port free on its
// address, as every other port of make run is, so that a second cluster (a
// developer's make run beside the doc test) finds its own.
func freeKubeletAddresses(addresses map[string]string) (map[string]string, error) {
	out := map[string]string{}
	for serial, addr := range addresses {
		l, err := net.Listen("tcp", net.JoinHostPort(addr, "0"))
		if err != nil {
			return nil, fmt.Errorf("picking the kubelet API port of %s on %s: %w", serial, addr, err)
		}
		defer l.Close() // held until all are picked
		out[serial] = net.JoinHostPort(addr, strconv.Itoa(l.Addr().(*net.TCPAddr).Port))
	}
	return out, nil
}

// enrollAll enrolls each serial, as `macrackctl node enroll` does, and
// writes its bootstrap kubeconfig into the mini's state directory.
func enrollAll(ctx context.Context, c client.Client, env *envtest.Environment, stateRoot string, serials []string, addresses map[string]string) error {
	g, ctx := errgroup.WithContext(ctx)
	g.SetLimit(enrollWorkers)
	for _, serial := range serials {
		g.Go(func() error {
			kc, err := enroll.Enroll(ctx, c, env.Config, enroll.Options{Serial: serial, Class: fleetClass, Address: addresses[serial],
				AgentsNamespace: agentsNamespace, TokenTTL: 24 * time.Hour})
			if err != nil {
				return fmt.Errorf("enrolling %s: %w", serial, err)
			}
			dir := filepath.Join(stateRoot, enroll.NodeName(serial))
			if err := os.MkdirAll(dir, 0o700); err != nil {
				return err
			}
			return os.WriteFile(filepath.Join(dir, simfleet.BootstrapKubeconfig), kc, 0o600)
		})
	}
	if err := g.Wait(); err != nil {
		return err
	}
	fmt.Printf("devcluster: enrolled %d minis\n", len(serials))
	return nil
}

// applyFile creates every object of a YAML file, keeping existing ones.
func applyFile(ctx context.Context, c client.Client, path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	dec := utilyaml.NewYAMLOrJSONDecoder(f, 4096)
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); errors.Is(err, io.EOF) {
			return nil
		} else if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		if len(u.Object) == 0 {
			continue
		}
		// As kubectl apply would leave it, so that a later kubectl apply of
		// the same sample does not warn.
		applied, err := json.Marshal(u.Object)
		if err != nil {
			return err
		}
		u.SetAnnotations(map[string]string{"kubectl.kubernetes.io/last-applied-configuration": string(applied)})
		if err := c.Create(ctx, u); client.IgnoreAlreadyExists(err) != nil {
			return fmt.Errorf("%s: creating %s %s: %w", path, u.GetKind(), u.GetName(), err)
		}
	}
}

// killHelpers ends the VM helpers of the fleet: they outlive their agents
// by design, so make run stops them itself, gracefully first.
func killHelpers(stateRoot string) {
	pidFiles, _ := filepath.Glob(filepath.Join(stateRoot, "*", "run", "*.pid"))
	var pids []int
	for _, f := range pidFiles {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && pid > 0 {
			pids = append(pids, pid)
			_ = syscall.Kill(pid, syscall.SIGTERM)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for _, pid := range pids {
		for syscall.Kill(pid, 0) == nil && time.Now().Before(deadline) {
			time.Sleep(100 * time.Millisecond)
		}
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	if len(pids) > 0 {
		fmt.Printf("devcluster: stopped %d VM helper(s)\n", len(pids))
	}
}
