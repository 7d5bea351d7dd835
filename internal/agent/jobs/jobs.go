// Package jobs is the host side of a CI runner VM's one job. The agent
// opens the instance's sealed config and keeps the runner token in its own
// process: the job loop (package jobloop in the sim, gitlab-runner with
// the custom executor on a Mac) asks GitLab for the job here, and the VM
// gets only what that job needs, its scripts and their variables, with the
// short-lived job token among them, through the guest's exec channel. No
// job can read the runner's token, so none can take another project's
// jobs with it.
package jobs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/types"

	"github.com/boualleiguie/macrack-operator/internal/guest"
)

// ScriptRunner runs a shell script in one VM as its login user, the
// script on the guest shell's standard input, and writes what it prints
// to out. exitCode is the script's; an error means the VM could not run
// it: a system failure, not the job's.
type ScriptRunner interface {
	RunScript(ctx context.Context, script io.Reader, out io.Writer) (exitCode int, err error)
}

// VM is a runner VM as its job loop reaches it.
type VM struct {
	// Namespace and Name are its instance's.
	Namespace, Name string
	UID             types.UID
	// LoginUser is its image's login user, whom the scripts run as.
	LoginUser string
	// Scripts runs the job's scripts in it.
	Scripts ScriptRunner
}

// NewWorkload makes the workload of one VM's job. parent is the agent's
// life: the job ends with it.
type NewWorkload func(parent context.Context, vm VM, log logr.Logger) guest.Workload

// ErrNoRunner is an agent that runs no CI jobs: it was given no way to.
var ErrNoRunner = errors.New("this chassis' agent runs no CI jobs")

// Runners holds the job of each runner VM on the chassis: one workload
// per instance, configured once. It is safe for concurrent use.
type Runners struct {
	// Parent is the agent's context: every job ends with it.
	Parent context.Context
	// New makes a VM's workload; nil: the agent runs no jobs.
	New NewWorkload
	Log logr.Logger

	mu  sync.Mutex
	vms map[types.UID]guest.Workload
}

// Configure hands the VM's job loop its config: plain, the opened sealed
// config, which names the runner. The first call for a VM starts its
// loop; the same config again changes nothing, and another is refused
// (guest.ErrAlreadyConfigured): one VM, one job. The config is never
// logged or returned: it holds the token.
func (r *Runners) Configure(ctx context.Context, vm VM, plain []byte) error {
	if r == nil || r.New == nil {
		return ErrNoRunner
	}
	c, err := guest.ParseConfig(plain)
	if err != nil {
		return err
	}
	if c.Runner == nil {
		return errors.New("the guest config names no runner")
	}
	r.mu.Lock()
	w, ok := r.vms[vm.UID]
	if !ok {
		if r.vms == nil {
			r.vms = map[types.UID]guest.Workload{}
		}
		w = r.New(r.Parent, vm, r.Log.WithValues("instance", vm.Namespace+"/"+vm.Name))
		r.vms[vm.UID] = w
	}
	r.mu.Unlock()
	if err := w.Configure(ctx, c); err != nil {
		return fmt.Errorf("the job loop refused its config: %w", err)
	}
	return nil
}

// Status is whether the VM's loop took a config, and its job; false when
// this agent holds no loop for the VM.
func (r *Runners) Status(uid types.UID) (configured bool, job *guest.JobReport) {
	w := r.get(uid)
	if w == nil {
		return false, nil
	}
	return w.Status()
}

// Holds is whether this agent runs the VM's job loop: an agent restarted
// under a job holds none, and the job is lost with the process.
func (r *Runners) Holds(uid types.UID) bool { return r.get(uid) != nil }

// Stop ends the VM's job before its VM goes down, within ctx: a job that
// runs is reported to GitLab as the system's failure (a quarantine, a
// failed VM), or, interrupted, as runner_interrupted (the VM deleted, as
// a runner scaling down deletes it) where the loop can say so. Its last
// status stays until Forget.
func (r *Runners) Stop(ctx context.Context, uid types.UID, interrupted bool) error {
	w := r.get(uid)
	if w == nil {
		return nil
	}
	if i, ok := w.(interface{ Interrupt(context.Context) error }); ok && interrupted {
		return i.Interrupt(ctx)
	}
	return w.Stop(ctx)
}

// Forget drops the VM's loop once the VM is gone.
func (r *Runners) Forget(uid types.UID) {
	if r == nil {
		return
	}
	r.mu.Lock()
	delete(r.vms, uid)
	r.mu.Unlock()
}

func (r *Runners) get(uid types.UID) guest.Workload {
	if r == nil {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.vms[uid]
}
