// Command simfleet runs a simulated fleet of Mac minis in one process, for
// `make run FLEET=N` past a few minis: one host agent per mini, each with
// its own identity, client, watches and heartbeats, and its VMs in-process
// (internal/simfleet). Each mini's state directory under --state-root
// holds its enrolment's bootstrap kubeconfig, as `macrackctl node enroll`
// printed it; the directory's name is the chassis' node name.
package main

import (
	"errors"
	"flag"
	"fmt"
	"net/http"
	"net/http/pprof"
	"os"
	"path/filepath"
	"slices"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/boualleiguie/macrack-operator/internal/logging"
	"github.com/boualleiguie/macrack-operator/internal/simfleet"
)

func main() {
	var (
		stateRoot, agentsNS, registryAuth, pprofAddr string
		heartbeat, facts, startInterval, rebootTime  time.Duration
	)
	fs := flag.CommandLine
	fs.StringVar(&stateRoot, "state-root", "", "The fleet's directory: one state directory per mini, each with its "+simfleet.BootstrapKubeconfig+" (required).")
	fs.StringVar(&agentsNS, "agents-namespace", "macrack-agents", "The namespace of the agents' ServiceAccounts.")
	fs.StringVar(&registryAuth, "registry-auth", "", "A Docker config JSON file with the golden registries' credentials; anonymous if unset.")
	fs.StringVar(&pprofAddr, "pprof-address", "", "Serve net/http/pprof here, e.g. 127.0.0.1:6060; off if empty.")
	fs.DurationVar(&heartbeat, "heartbeat-interval", 10*time.Second, "How often each agent renews its heartbeat Lease.")
	fs.DurationVar(&facts, "facts-interval", 5*time.Minute, "How often each agent reports its facts again.")
	fs.DurationVar(&startInterval, "start-interval", 5*time.Millisecond, "The pause between two agents' starts.")
	fs.DurationVar(&rebootTime, "sim-reboot-time", 5*time.Second, "How long a simulated host takes to reboot.")
	zapOpts := logging.BindFlags(fs)
	flag.Parse()
	log := logging.New(zapOpts)
	ctrl.SetLogger(log)

	if err := func() error {
		if stateRoot == "" {
			return errors.New("--state-root is required")
		}
		hosts, err := hostsIn(stateRoot)
		if err != nil {
			return err
		}
		var auth []byte
		if registryAuth != "" {
			if auth, err = os.ReadFile(registryAuth); err != nil {
				return fmt.Errorf("--registry-auth: %w", err)
			}
		}
		if pprofAddr != "" {
			mux := http.NewServeMux()
			mux.HandleFunc("/debug/pprof/", pprof.Index)
			mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
			go func() { log.Error(http.ListenAndServe(pprofAddr, mux), "pprof stopped") }()
		}
		log.Info("Starting the simulated fleet", "minis", len(hosts), "stateRoot", stateRoot)
		return simfleet.Run(ctrl.SetupSignalHandler(), simfleet.Options{
			Hosts: hosts, AgentsNamespace: agentsNS, HeartbeatInterval: heartbeat, FactsInterval: facts,
			StartInterval: startInterval, RebootTime: rebootTime, RegistryAuth: auth, Log: log,
		})
	}(); err != nil {
		log.Error(err, "Fleet stopped")
		os.Exit(1)
	}
}

// hostsIn lists the minis under root: every directory with a bootstrap
// kubeconfig, in name order.
func hostsIn(root string) ([]simfleet.Host, error) {
	matches, err := filepath.Glob(filepath.Join(root, "*", simfleet.BootstrapKubeconfig))
	if err != nil {
		return nil, err
	}
	if len(matches) == 0 {
		return nil, fmt.Errorf("no %s under %s: enroll the minis first", simfleet.BootstrapKubeconfig, root)
	}
	slices.Sort(matches)
	hosts := make([]simfleet.Host, 0, len(matches))
	for _, m := range matches {
		dir := filepath.Dir(m)
		hosts = append(hosts, simfleet.Host{Serial: filepath.Base(dir), StateDir: dir})
	}
	return hosts, nil
}
