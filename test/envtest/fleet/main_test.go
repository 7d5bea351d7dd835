// Package fleet holds the fleet's scale benchmark (BenchmarkFleet, `make
// bench-fleet N=…`) and the in-process fleet's suite. The benchmark runs
// the simulated fleet in a child process, this test binary again in the
// fleet's role, so that the operator's and the agents' memory and CPU are
// measured apart.
package fleet

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap/zapcore"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/boualleiguie/macrack-operator/internal/simfleet"
	"github.com/boualleiguie/macrack-operator/test/envtest/harness"
)

// Environment of the fleet's child process.
const (
	// envFleetRoot names the fleet's state root: set, the binary is the
	// fleet, not the tests.
	envFleetRoot = "MACRACK_BENCH_FLEET_ROOT"
	// envHeartbeat is the agents' heartbeat interval.
	envHeartbeat = "MACRACK_BENCH_FLEET_HEARTBEAT"
)

func TestMain(m *testing.M) {
	if root := os.Getenv(envFleetRoot); root != "" {
		if err := runFleetChild(root); err != nil {
			fmt.Fprintf(os.Stderr, "fleet child: %v\n", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	// The operator's logs, errors only: a thousand minis' worth of Info
	// would be the benchmark's cost.
	ctrl.SetLogger(zap.New(zap.Level(zapcore.ErrorLevel)))
	os.Exit(m.Run())
}

// runFleetChild is the fleet's process: every mini under root, on one
// OffsetClock that the benchmark steps with the operator's, by a line
// "step <duration>" on stdin, answered "stepped" on stdout once done. It
// ends when stdin closes or on SIGTERM.
func runFleetChild(root string) error {
	matches, err := filepath.Glob(filepath.Join(root, "*", simfleet.BootstrapKubeconfig))
	if err != nil || len(matches) == 0 {
		return fmt.Errorf("no minis under %s: %v", root, err)
	}
	slices.Sort(matches)
	hosts := make([]simfleet.Host, 0, len(matches))
	for _, m := range matches {
		hosts = append(hosts, simfleet.Host{Serial: filepath.Base(filepath.Dir(m)), StateDir: filepath.Dir(m)})
	}
	heartbeat, err := time.ParseDuration(os.Getenv(envHeartbeat))
	if err != nil {
		return fmt.Errorf("%s: %w", envHeartbeat, err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	ctx, cancel := context.WithCancel(ctx)
	clk := &harness.OffsetClock{}
	go func() {
		defer cancel()
		in := bufio.NewScanner(os.Stdin)
		for in.Scan() {
			if d, ok := strings.CutPrefix(in.Text(), "step "); ok {
				step, err := time.ParseDuration(d)
				if err != nil {
					fmt.Fprintf(os.Stderr, "fleet child: %v\n", err)
					continue
				}
				clk.Step(step)
				fmt.Println("stepped")
			}
		}
	}()
	if os.Getenv(envProfile) != "" {
		// The benchmark takes the agents' CPU profile of each wave here.
		go func() { _ = http.ListenAndServe(fleetPprofAddress, nil) }()
	}
	log := zap.New(zap.Level(zapcore.ErrorLevel))
	return simfleet.Run(ctx, simfleet.Options{Hosts: hosts, AgentsNamespace: harness.AgentsNamespace,
		HeartbeatInterval: heartbeat, Clock: clk, Log: log, RebootTime: time.Second})
}
