package instances

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	computev1alpha1 "github.com/boualleiguie/macrack-operator/api/compute/v1alpha1"
	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
	"github.com/boualleiguie/macrack-operator/internal/agent/driver"
	"github.com/boualleiguie/macrack-operator/internal/agent/helper"
	"github.com/boualleiguie/macrack-operator/internal/chassis"
	"github.com/boualleiguie/macrack-operator/internal/guest"
)

// fence keeps the instance's VM down while its chassis is quarantined: a
// VM that runs is stopped gracefully, how is recorded in
// status.runtime.lastStop, and the inventory is reported at once, since
// the operator asks for the reboot only when it lists no VM running.
func (r *Instances) fence(ctx context.Context, log logr.Logger, inst *computev1alpha1.MacOSInstance, mn *fleetv1alpha1.MacNode) (ctrl.Result, error) {
	key := client.ObjectKeyFromObject(inst)
	if helpers, err := r.Launcher.Running(); err == nil && helpers[string(inst.UID)] != "" {
		// Say so before the stop, which takes up to the grace period: the
		// tenant sees the VM go down, and why, while it does.
		if err := r.report(ctx, inst, computev1alpha1.VMStopping, quarantineMessage(mn), nil); err != nil {
			return ctrl.Result{}, err
		}
	}
	uid := string(inst.UID)
	method, err := r.stopGracefully(ctx, log, uid)
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("stopping %s on quarantined chassis %s: %w", key, r.NodeName, err)
	}
	var stop *computev1alpha1.VMStop
	if method != "" {
		stop = &computev1alpha1.VMStop{Method: method, Reason: computev1alpha1.StopReasonChassisQuarantined,
			At: metav1.NewTime(r.Clock.Now().UTC().Truncate(time.Second))}
		log.Info("Stopped the VM of a quarantined chassis", "MacOSInstance", key, "stop", method)
		r.Recorder.Eventf(mn, nil, corev1.EventTypeNormal, fleetv1alpha1.ReasonStoppingVMs, "Stop",
			"Stopped the VM of instance %s on chassis %s (%s): its kernel VM quota stuck", key, mn.Spec.Serial, method)
	}
	// The record first, then the helper goes, and only then does the
	// inventory say no VM is left: the reboot it allows ends this agent,
	// and the helper is what knows how the VM went down.
	if err := r.reportStopped(ctx, inst, quarantineMessage(mn), stop); err != nil {
		return ctrl.Result{}, err
	}
	if err := r.Launcher.Remove(ctx, uid); err != nil {
		return ctrl.Result{}, fmt.Errorf("removing the helper of %s: %w", uid, err)
	}
	if method != "" {
		if err := r.ReportInventory(ctx, log); err != nil {
			log.Error(err, "Reporting the inventory after a quarantine stop failed; the reaper reports it on its next pass")
		}
	}
	return ctrl.Result{RequeueAfter: r.Poll}, nil
}

// quarantineMessage tells the tenant, in status.runtime.message, why the VM
// is down and when it comes back.
func quarantineMessage(mn *fleetv1alpha1.MacNode) string {
	switch q := mn.Status.Quarantine; {
	case q != nil && q.NeedsAttention:
		return fmt.Sprintf("chassis %s is quarantined: its kernel VM quota stuck more than %d times in 24 hours; the VM stays stopped until a person has looked at the chassis",
			mn.Spec.Serial, fleetv1alpha1.MaxQuarantinesPerDay)
	case mn.Status.Phase == fleetv1alpha1.MacNodeRebooting:
		return fmt.Sprintf("chassis %s is quarantined because its kernel VM quota stuck, and its host is rebooting to clear it; the VM is stopped and restarts after the reboot", mn.Spec.Serial)
	}
	return fmt.Sprintf("chassis %s is quarantined because its kernel VM quota stuck; the VM is stopped and restarts after the host reboots", mn.Spec.Serial)
}

// reportStopped writes phase Stopped with msg, and stop as lastStop if the
// agent just stopped the VM (else the last stop recorded stays).
func (r *Instances) reportStopped(ctx context.Context, inst *computev1alpha1.MacOSInstance, msg string, stop *computev1alpha1.VMStop) error {
	return r.writeRuntime(ctx, inst, stoppedRuntime(inst, msg, stop))
}

// stoppedRuntime is inst's status.runtime once its VM stopped: phase
// Stopped with msg, and stop as lastStop if there is one (else the last
// stop recorded stays).
func stoppedRuntime(inst *computev1alpha1.MacOSInstance, msg string, stop *computev1alpha1.VMStop) computev1alpha1.RuntimeStatus {
	rt := computev1alpha1.RuntimeStatus{Phase: computev1alpha1.VMStopped, Message: truncate(msg, maxMessage)}
	if old := inst.Status.Runtime; old != nil {
		rt.WipedAt, rt.Wipe, rt.LastStop = old.WipedAt, old.Wipe, old.LastStop
		rt.GuestConfig, rt.Job = old.GuestConfig, old.Job
		// The guest's last word stays; a stopped VM takes no work.
		rt.BootStage, rt.XcodeVersions, rt.DiskHeadroom, rt.LastReportAt = old.BootStage, old.XcodeVersions, old.DiskHeadroom, old.LastReportAt
	}
	if stop != nil {
		rt.LastStop = stop
	}
	return rt
}

// What a deleted instance's status.runtime.message says once its VM is down.
const (
	msgStoppedWiping  = "stopped; wiping the disk"
	msgStoppedWiped   = "stopped; the disk is wiped"
	msgStoppedUnwiped = "stopped; the disk's wipe is not on record yet, and is tried again: "
)

// stoppedUnwiped puts a deleted instance's stop on record when its disk's
// wipe could not be done or recorded after it (cause): the stop is not held
// back for a wipe that may take a while to succeed. It returns cause, for a
// retry.
func (r *Instances) stoppedUnwiped(ctx context.Context, inst *computev1alpha1.MacOSInstance, stop *computev1alpha1.VMStop, cause error) error {
	if chassis.Wiped(inst) {
		return cause
	}
	if err := r.reportStopped(ctx, inst, msgStoppedUnwiped+cause.Error(), stop); err != nil {
		return errors.Join(cause, err)
	}
	r.forgetStop(ctrl.LoggerFrom(ctx), inst.UID)
	return cause
}

// stopFile is where a deleted instance's stop is kept from its helper's
// removal to the status write that records it with the wipe: the helper,
// which could say how the VM went down, is gone by then, and an agent may
// be killed in between.
func stopFile(uid types.UID) string { return "stop-" + string(uid) + ".json" }

// keepStop keeps the stop of instance uid until it is on record.
func (r *Instances) keepStop(uid types.UID, stop *computev1alpha1.VMStop) error {
	return r.writeState(stopFile(uid), stop)
}

// keptStop is the stop of instance uid that keepStop kept; nil if none.
func (r *Instances) keptStop(uid types.UID) (*computev1alpha1.VMStop, error) {
	var stop computev1alpha1.VMStop
	ok, err := r.readState(stopFile(uid), &stop)
	if err != nil || !ok {
		return nil, err
	}
	return &stop, nil
}

// forgetStop drops the kept stop of instance uid, now on record.
func (r *Instances) forgetStop(log logr.Logger, uid types.UID) {
	if err := r.removeState(stopFile(uid)); err != nil {
		log.Error(err, "Removing a recorded stop from the state directory failed", "instanceUID", string(uid))
	}
}

// stopGracefully stops the VM of instance uid, gentlest first, and
// returns how it went down, or "" when no VM ran. Its helper stays, to be
// asked again, until the caller has recorded the stop.
func (r *Instances) stopGracefully(ctx context.Context, log logr.Logger, uid string) (computev1alpha1.StopMethod, error) {
	helpers, err := r.Launcher.Running()
	if err != nil {
		return "", fmt.Errorf("listing the VM helpers: %w", err)
	}
	sock, ok := helpers[uid]
	if !ok {
		return "", nil
	}
	return r.stopVM(ctx, log, uid, sock)
}

// stopVM stops the VM behind sock in the order the quarantine loop owes
// the tenant's disk: the guest agent is asked to shut macOS down, and gets
// half of StopGrace; then the framework's requestStop gets the rest; only
// then is the VM forced off. The whole takes at most about StopGrace.
func (r *Instances) stopVM(ctx context.Context, log logr.Logger, uid, sock string) (computev1alpha1.StopMethod, error) {
	log = log.WithValues("instanceUID", uid)
	r.stopJob(ctx, log, uid, false)
	dctx, cancel := context.WithTimeout(ctx, helperAnswerTimeout)
	c, err := helper.Dial(dctx, sock)
	cancel()
	if err != nil {
		// A helper that does not answer cannot be asked: removing it kills
		// it, and its VM with it.
		log.Info("The helper does not answer; its VM goes down with it", "error", err.Error())
		return computev1alpha1.StopForced, nil
	}
	defer c.Close()
	state, err := c.State(ctx)
	if err != nil {
		log.Info("The helper does not say its VM's state; its VM goes down with it", "error", err.Error())
		return computev1alpha1.StopForced, nil
	}
	if state == driver.StateStopped || state == driver.StateError {
		// Down already: stopped by an agent killed before it recorded how.
		// The helper still knows; a VM that never ran says "".
		m, err := c.StopVM(ctx, 0)
		if err != nil {
			return "", nil
		}
		return computev1alpha1.StopMethod(m), nil
	}
	began := r.Clock.Now()
	asked := false
	if state == driver.StateRunning {
		if asked = r.askGuestToShutDown(ctx, log, c); asked && r.waitStopped(ctx, c, r.StopGrace/2) {
			return computev1alpha1.StopGuestShutdown, nil
		}
	}
	grace := max(r.StopGrace-r.Clock.Since(began), r.StopGrace/2)
	log.Info("Stopping the VM with the framework's requestStop", "guestAsked", asked, "grace", grace.String())
	m, err := c.StopVM(ctx, grace)
	if err != nil {
		return "", fmt.Errorf("stopping the VM of %s: %w", uid, err)
	}
	switch {
	case m != "":
		return computev1alpha1.StopMethod(m), nil
	case asked:
		// Down by itself, once its guest was asked: the guest's shutdown.
		return computev1alpha1.StopGuestShutdown, nil
	}
	// A helper too old to say: the disk may not be consistent.
	return computev1alpha1.StopForced, nil
}

// guestShutdownTimeout bounds reaching the guest agent and its answer.
const guestShutdownTimeout = 5 * time.Second

// askGuestToShutDown asks the guest agent, through the helper's vsock
// proxy, to shut macOS down. It reports whether the request may have
// reached a guest that honours it: true on its acknowledgement, and when
// the connection broke after the handshake (a guest that powers off can
// take its answer with it); false when the guest cannot be reached, or
// says it cannot.
func (r *Instances) askGuestToShutDown(ctx context.Context, log logr.Logger, c *helper.Client) bool {
	ctx, cancel := context.WithTimeout(ctx, guestShutdownTimeout)
	defer cancel()
	conn, err := c.DialGuest(ctx, r.GuestPort)
	if err != nil {
		log.Info("The guest agent is not reachable; going on to requestStop", "error", err.Error())
		return false
	}
	gc := guest.NewClient(conn)
	defer gc.Close()
	if _, err := gc.Handshake(ctx); err != nil {
		log.Info("The guest agent does not answer; going on to requestStop", "error", err.Error())
		return false
	}
	switch err := gc.Shutdown(ctx); {
	case err == nil:
		log.Info("The guest agent is shutting the guest down")
		return true
	case errors.Is(err, guest.ErrShutdownUnsupported), errors.Is(err, guest.ErrRemote):
		log.Info("The guest agent cannot shut the guest down; going on to requestStop", "error", err.Error())
		return false
	default:
		log.Info("The guest agent took the shutdown request but did not acknowledge it; waiting for the guest", "error", err.Error())
		return true
	}
}

// stopPoll is how often a VM whose guest shuts down is looked at.
const stopPoll = 50 * time.Millisecond

// waitStopped waits up to d for the helper's VM to stop.
func (r *Instances) waitStopped(ctx context.Context, c *helper.Client, d time.Duration) bool {
	deadline := r.Clock.NewTimer(d)
	defer deadline.Stop()
	tick := r.Clock.NewTicker(stopPoll)
	defer tick.Stop()
	for {
		if st, err := c.State(ctx); err == nil && (st == driver.StateStopped || st == driver.StateError) {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-deadline.C():
			st, err := c.State(ctx)
			return err == nil && (st == driver.StateStopped || st == driver.StateError)
		case <-tick.C():
		}
	}
}

// stopJob ends the VM's job, if one runs, before the VM goes: GitLab hears
// of it from the host, rather than never, as the system's failure or,
// interrupted, as runner_interrupted. It gets half of StopGrace.
func (r *Instances) stopJob(ctx context.Context, log logr.Logger, uid string, interrupted bool) {
	if !r.Jobs.Holds(types.UID(uid)) {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, r.StopGrace/2)
	defer cancel()
	if err := r.Jobs.Stop(ctx, types.UID(uid), interrupted); err != nil {
		log.Info("The VM's job did not report in time; the VM goes down all the same", "error", err.Error())
	}
}
