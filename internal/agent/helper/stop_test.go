package helper

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/boualleiguie/macrack-operator/internal/agent/driver"
	"github.com/boualleiguie/macrack-operator/internal/agent/driver/sim"
	"github.com/boualleiguie/macrack-operator/internal/agent/vmspec"
)

// The stop's answer says how the VM went down, so that the agent can
// record it on the instance: RequestStop when the guest honoured the
// request within the grace period, Forced after it, nothing for a VM that
// never ran.
func TestTheStopAnswerSaysHowTheVMWentDown(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name     string
		opts     []sim.Option
		graceful time.Duration
		start    bool
		want     driver.StopMethod
	}{
		{"an honoured request", nil, 5 * time.Second, true, driver.StopRequestStop},
		{"a guest ignoring it", []sim.Option{sim.WithGuestIgnoringShutdown()}, 20 * time.Millisecond, true, driver.StopForced},
		{"no grace at all", nil, 0, true, driver.StopForced},
		{"a VM that never ran", nil, time.Second, false, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec := testSpec("u1")
			_, sock := serve(t, shortDir(t), fastSim(sim.NewMemKernel(), tc.opts...), spec)
			c := dial(t, sock)
			if tc.start {
				if err := c.Start(ctx, spec); err != nil {
					t.Fatal(err)
				}
			}
			got, err := c.StopVM(ctx, tc.graceful)
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Fatalf("stopped by %q, want %q", got, tc.want)
			}
			mustState(t, c, driver.StateStopped)
		})
	}
}

// plainVM hides the sim VM's own stop record, as a driver that keeps none.
type plainVM struct{ driver.VM }

type plainDriver struct{ d driver.Driver }

func (p plainDriver) NewVM(s vmspec.VMSpec) (driver.VM, error) {
	vm, err := p.d.NewVM(s)
	return plainVM{vm}, err
}

// A VM that keeps no record of its stops is judged by the clock: back
// within the grace period is an honoured request; after it, forced.
func TestAVMWithoutAStopRecordIsJudgedByTheClock(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		opts []sim.Option
		want driver.StopMethod
	}{
		{"honoured", nil, driver.StopRequestStop},
		{"ignored", []sim.Option{sim.WithGuestIgnoringShutdown()}, driver.StopForced},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec := testSpec("u1")
			srv, sock := serve(t, shortDir(t), plainDriver{fastSim(sim.NewMemKernel(), tc.opts...)}, spec)
			if _, ok := srv.VM().(driver.StopReporter); ok {
				t.Fatal("the test's VM keeps a stop record")
			}
			c := dial(t, sock)
			if err := c.Start(ctx, spec); err != nil {
				t.Fatal(err)
			}
			got, err := c.StopVM(ctx, 200*time.Millisecond)
			if err != nil || got != tc.want {
				t.Fatalf("stopped by %q (%v), want %q", got, err, tc.want)
			}
		})
	}
}

// KillAll ends every helper at once, without a graceful stop, as a host
// restart does; their files go, and the kernel lets go of their VMs with
// their processes.
func TestKillAllEndsEveryHelperAtOnce(t *testing.T) {
	dir, kernelDir := shortDir(t), shortDir(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// A long stop grace: a helper that stopped its VM gracefully would
	// take it; a killed one does not.
	l := execLauncher(t, dir, kernelDir, "--sim-guest-ignores-shutdown", "--stop-grace=1m")
	var pids []int
	for _, uid := range []string{"u1", "u2"} {
		spec := testSpec(uid)
		sock, err := l.Launch(ctx, uid, spec)
		if err != nil {
			t.Fatal(err)
		}
		c, err := Dial(ctx, sock)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Start(ctx, spec); err != nil {
			t.Fatal(err)
		}
		pids = append(pids, c.Hello().PID)
		c.Close()
	}
	began := time.Now()
	if err := KillAll(ctx, dir); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(began); took > 20*time.Second {
		t.Errorf("KillAll took %s: the helpers stopped their VMs rather than died", took)
	}
	for _, pid := range pids {
		if processAlive(pid) {
			t.Errorf("helper %d survived KillAll", pid)
		}
	}
	if running, err := l.Running(); err != nil || len(running) != 0 {
		t.Fatalf("running %v (%v) after KillAll, want none", running, err)
	}
	left, _ := filepath.Glob(filepath.Join(dir, "*"+pidSuffix))
	if len(left) != 0 {
		t.Errorf("pid files left: %v", left)
	}
	k, err := sim.NewFileKernel(kernelDir)
	if err != nil {
		t.Fatal(err)
	}
	if n, _ := k.Active(); n != 0 {
		t.Errorf("the kernel counts %d VMs after their helpers died", n)
	}
	// Nothing to kill is no error.
	if err := KillAll(ctx, filepath.Join(dir, "absent")); err != nil {
		t.Errorf("KillAll of a missing directory: %v", err)
	}
	_ = os.RemoveAll(dir)
}
