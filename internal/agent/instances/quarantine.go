package instances

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
	"github.com/boualleiguie/macrack-operator/internal/agent/driver"
	"github.com/boualleiguie/macrack-operator/internal/conflict"
)

// The agent's half of the quota-stuck quarantine loop. The operator drives
// it through the MacNode's status; the agent does the mechanics, each step
// from what the API and the state directory say, so that an agent killed
// at any step picks up where it was:
//
//  1. A code-6 refusal below capacity is reported Stuck, for this boot
//     (reportQuota). The operator quarantines the chassis.
//  2. While the phase is Quarantined or Rebooting, the instance loop starts
//     no VM and stops those that run, gently (fence); the inventory says
//     so. The operator then asks for the reboot.
//  3. Asked, with every VM down, the agent reboots the host (reboot).
//  4. In the new boot, one probe VM starts and stops (probe), and its
//     result is reported. The operator returns the chassis to its lease,
//     and the instance loop starts the VMs of its slots again.

// quarantineState is what the loop remembers within one agent process.
type quarantineState struct {
	mu sync.Mutex
	// rebootedBoot is the boot the agent rebooted: it asks once, and does
	// nothing more until it stops.
	rebootedBoot string
	// probeFailedAt is when a probe last failed for another reason than
	// code 6, so that it is not retried at once.
	probeFailedAt time.Time
	// probeCleaned: the leftovers of a probe an earlier run did not finish
	// are gone.
	probeCleaned bool
}

// SetupQuarantineWithManager runs the quarantine loop on the node's own
// MacNode (the manager's cache holds only that one): once at start, and
// whenever it changes.
func (r *Instances) SetupQuarantineWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(&fleetv1alpha1.MacNode{}).
		Named("quarantine").
		Complete(conflict.Quiet(reconcile.Func(r.ReconcileQuarantine)))
}

// ReconcileQuarantine does the step of the quarantine loop that the own
// MacNode asks for, if any, and the sim's quota-stick fault.
func (r *Instances) ReconcileQuarantine(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	if req.Name != r.NodeName {
		return ctrl.Result{}, nil
	}
	log := r.Log.WithName("quarantine")
	mn := &fleetv1alpha1.MacNode{}
	if err := r.Client.Get(ctx, client.ObjectKey{Name: r.NodeName}, mn); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(fmt.Errorf("getting own MacNode: %w", err))
	}
	r.quarantine.mu.Lock()
	rebooting := r.quarantine.rebootedBoot != ""
	r.quarantine.mu.Unlock()
	if rebooting {
		return ctrl.Result{}, nil // the host is going down, and the agent with it
	}
	boot, err := r.bootID(ctx)
	if err != nil {
		return ctrl.Result{}, err
	}
	r.cleanUpProbeOnce(ctx, log)

	var res ctrl.Result
	if wait, err := r.simQuotaStick(ctx, log, mn); err != nil {
		log.Error(err, "Reproducing the stuck quota (sim) failed")
		res.RequeueAfter = r.Poll
	} else if wait {
		res.RequeueAfter = r.Poll
	}

	q := mn.Status.Quarantine
	switch {
	case !q.Active():
		return res, nil
	case q.BootID == boot:
		// The quota stuck in this boot: the VMs stop (the instance loop
		// fences them), then the host reboots.
		if q.RebootRequestedAt == nil || q.NeedsAttention || mn.Status.Phase != fleetv1alpha1.MacNodeRebooting {
			// Say what the chassis holds now, even unchanged: the operator
			// trusts an inventory only if observed since the quarantine.
			if err := r.ReportInventory(ctx, log); err != nil {
				return ctrl.Result{}, err
			}
			return ctrl.Result{RequeueAfter: r.Poll}, nil
		}
		return ctrl.Result{RequeueAfter: r.Poll}, r.reboot(ctx, log, mn, boot)
	default:
		// Another boot than the stuck one: the host rebooted. Prove the
		// counter healthy.
		return ctrl.Result{RequeueAfter: r.Poll}, r.probeAfterReboot(ctx, log, mn, boot)
	}
}

// reboot reboots the host, once, when no tenant's VM helper is left. A
// helper goes only after the fence has recorded its VM's stop, so a helper
// left says a stop not yet on record, by an agent killed before it wrote
// it; the reboot would end the helper, the only one that knows how the VM
// went down. A VM whose helper does not say its state counts as running:
// the agent does not take down a VM it could not stop.
func (r *Instances) reboot(ctx context.Context, log logr.Logger, mn *fleetv1alpha1.MacNode, boot string) error {
	running, unrecorded, err := r.vmsLeft(ctx, log)
	if err != nil {
		return err
	}
	if running > 0 || unrecorded > 0 {
		log.Info("Waiting for the VMs to stop, and their stops to be recorded, before the reboot",
			"running", running, "stoppedUnrecorded", unrecorded)
		return nil
	}
	if r.Rebooter == nil {
		r.Recorder.Eventf(mn, nil, corev1.EventTypeWarning, fleetv1alpha1.ReasonRebootRequested, "Reboot",
			"Chassis %s must reboot to clear its stuck kernel VM quota, but its host agent has no rebooter: a person must reboot it", mn.Spec.Serial)
		return fmt.Errorf("%w: chassis %s must reboot to clear its stuck quota", ErrNoRebooter, r.NodeName)
	}
	log.Info("Rebooting the host to clear its stuck kernel VM quota", "bootID", boot)
	// Before the reboot: the host may be gone the moment it is asked.
	r.Recorder.Eventf(mn, nil, corev1.EventTypeNormal, fleetv1alpha1.ReasonRebootRequested, "Reboot",
		"Rebooting chassis %s to clear its stuck kernel VM quota (boot %s); its VMs are stopped, and restart after the reboot", mn.Spec.Serial, boot)
	if err := r.Rebooter.Reboot(ctx); err != nil {
		r.Recorder.Eventf(mn, nil, corev1.EventTypeWarning, fleetv1alpha1.ReasonRebootRequested, "Reboot",
			"Rebooting chassis %s failed, and is tried again: %v", mn.Spec.Serial, err)
		return fmt.Errorf("rebooting the host: %w", err)
	}
	r.quarantine.mu.Lock()
	r.quarantine.rebootedBoot = boot
	r.quarantine.mu.Unlock()
	log.Info("The host is rebooting; the agent stops")
	if r.Rebooted != nil {
		r.Rebooted()
	}
	return nil
}

// vmsLeft counts the VMs that are not known to be down (each helper's VM,
// unless it says it is Stopped), and the tenants' helpers whose VM is down
// but whose stop the fence has not yet recorded.
func (r *Instances) vmsLeft(ctx context.Context, log logr.Logger) (running, unrecorded int, err error) {
	helpers, err := r.Launcher.Running()
	if err != nil {
		return 0, 0, fmt.Errorf("listing the VM helpers: %w", err)
	}
	for uid, sock := range helpers {
		st, err := vmState(ctx, sock)
		switch {
		case err != nil:
			log.Info("A helper does not say its VM's state; it counts as running", "instanceUID", uid, "error", err.Error())
			running++
		case st != driver.StateStopped && st != driver.StateError:
			running++
		case uid != ProbeUID:
			unrecorded++
		}
	}
	return running, unrecorded, nil
}

// probeAfterReboot probes the quota once in a boot after the one it stuck
// in, unless this boot's report already says how it went: a probe that
// passed, or a quota that stuck again (only another reboot helps then).
func (r *Instances) probeAfterReboot(ctx context.Context, log logr.Logger, mn *fleetv1alpha1.MacNode, boot string) error {
	var reported *fleetv1alpha1.QuotaReport
	if mn.Status.Reported != nil {
		reported = mn.Status.Reported.Quota
	}
	last := r.LastQuota()
	if probed(last, boot) || probed(reported, boot) {
		return nil
	}
	if last != nil && last.BootID == boot && last.State == fleetv1alpha1.QuotaStuck {
		return nil
	}
	r.quarantine.mu.Lock()
	failedAt := r.quarantine.probeFailedAt
	r.quarantine.mu.Unlock()
	if !failedAt.IsZero() && r.Clock.Since(failedAt) < r.probeRetry() {
		return nil
	}
	return r.probe(ctx, log, mn, boot)
}

// probed reports whether q says a probe passed in boot.
func probed(q *fleetv1alpha1.QuotaReport, boot string) bool {
	return q != nil && q.BootID == boot && q.State == fleetv1alpha1.QuotaOK &&
		q.Probe != nil && q.Probe.BootID == boot && q.Probe.Result == fleetv1alpha1.ProbePassed
}

func (r *Instances) probeRetry() time.Duration {
	if r.ProbeRetry > 0 {
		return r.ProbeRetry
	}
	return 30 * time.Second
}

// simQuotaStick reproduces the field bug on a sim host when the own
// MacNode asks with a SimQuotaStickAnnotation value not handled yet: the
// kernel's counter fills with stuck slots, and one probe start follows at
// once, which the kernel refuses with code 6 while fewer VMs run than the
// class allows: reported Stuck. With every slot of the class running a VM
// there is no room to stick, and it waits (wait) until one stops. Only
// the sim driver honours it; nothing is raised, only filled.
func (r *Instances) simQuotaStick(ctx context.Context, log logr.Logger, mn *fleetv1alpha1.MacNode) (wait bool, err error) {
	value := mn.Annotations[fleetv1alpha1.SimQuotaStickAnnotation]
	if r.SimKernel == nil || value == "" {
		return false, nil
	}
	var handled string
	if _, err := r.readState(quotaStickFile, &handled); err != nil {
		return false, err
	}
	if handled == value {
		return false, nil
	}
	r.vmMu.Lock()
	defer r.vmMu.Unlock()
	r.inventoryMu.Lock()
	defer r.inventoryMu.Unlock()
	running, err := r.runningVMs(ctx, log)
	if err != nil {
		return false, err
	}
	capacity, err := r.vmCapacity(ctx)
	if err != nil {
		return false, err
	}
	if running >= capacity {
		log.Info("Sim quota-stick waits: every VM slot of the class runs a VM", "runningVMs", running, "vmCapacity", capacity)
		return true, nil
	}
	active, err := r.SimKernel.Active()
	if err != nil {
		return false, err
	}
	stuck, err := r.SimKernel.StickSlots(fleetv1alpha1.KernelVMLimit - active)
	if err != nil {
		return false, fmt.Errorf("sticking the sim kernel's slots: %w", err)
	}
	if err := r.writeState(quotaStickFile, value); err != nil {
		return false, err
	}
	log.Info("Sim fault: the kernel keeps stopped VMs counted", "stuckSlots", stuck, "runningVMs", running, "annotation", value)
	r.Recorder.Eventf(mn, nil, corev1.EventTypeWarning, fleetv1alpha1.ReasonQuotaStuck, "SimFault",
		"Sim fault (%s): the kernel of chassis %s keeps %d stopped VMs counted; a VM start follows", fleetv1alpha1.SimQuotaStickAnnotation, mn.Spec.Serial, stuck)
	// A start now meets the full counter: the code 6 of the field bug.
	out, err := r.probeVM(ctx, log, false)
	if err != nil {
		return false, err
	}
	if !driver.IsLimitExceeded(out.startErr) {
		log.Info("Sim fault: the start after the stuck slots was not refused", "startError", fmt.Sprint(out.startErr))
		return false, nil
	}
	return false, r.reportQuota(ctx, log, out.at)
}

// cleanUpProbeOnce removes what a probe left when the agent died in it: a
// helper the reaper would otherwise take for a tenant's, and a disk.
func (r *Instances) cleanUpProbeOnce(ctx context.Context, log logr.Logger) {
	r.quarantine.mu.Lock()
	done := r.quarantine.probeCleaned
	r.quarantine.probeCleaned = true
	r.quarantine.mu.Unlock()
	if done {
		return
	}
	if err := r.cleanUpProbe(ctx); err != nil && !errors.Is(err, context.Canceled) {
		log.Error(err, "Removing a probe's leftovers failed")
	}
}
