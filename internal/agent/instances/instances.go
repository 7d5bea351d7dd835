package instances

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"regexp"
	"slices"
	"sync"
	"time"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	computev1alpha1 "github.com/boualleiguie/macrack-operator/api/compute/v1alpha1"
	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
	"github.com/boualleiguie/macrack-operator/internal/agent/driver"
	"github.com/boualleiguie/macrack-operator/internal/agent/driver/sim"
	"github.com/boualleiguie/macrack-operator/internal/agent/helper"
	"github.com/boualleiguie/macrack-operator/internal/agent/host"
	"github.com/boualleiguie/macrack-operator/internal/agent/images"
	"github.com/boualleiguie/macrack-operator/internal/agent/jobs"
	"github.com/boualleiguie/macrack-operator/internal/agent/report"
	"github.com/boualleiguie/macrack-operator/internal/agent/vmspec"
	"github.com/boualleiguie/macrack-operator/internal/cachewait"
	"github.com/boualleiguie/macrack-operator/internal/chassis"
	"github.com/boualleiguie/macrack-operator/internal/conflict"
	"github.com/boualleiguie/macrack-operator/internal/finalizer"
	"github.com/boualleiguie/macrack-operator/internal/guest"
	"github.com/boualleiguie/macrack-operator/internal/sealing"
)

// Instances runs the instances placed on this chassis. It starts a VM only
// when a slot on its own MacNode names the instance's UID: the slot, which
// the operator claimed with optimistic concurrency, is what allows a VM to
// exist; a status.nodeName alone is not.
type Instances struct {
	Client   client.Client
	NodeName string
	Launcher helper.Launcher
	Disks    Disks
	Clock    clock.WithTicker
	// StopGrace bounds a graceful stop before the VM is forced off.
	StopGrace time.Duration
	// GuestPort is where the guest agent listens on vsock.
	GuestPort uint32
	// Poll is how often a running instance's guest is asked for a report.
	Poll time.Duration
	// NewMachineID makes an instance's machine identifier once (the
	// driver's: random bytes in the sim, VZMacMachineIdentifier on a Mac).
	NewMachineID func() ([]byte, error)
	// APIReader reads from the API server itself, not the cache: the
	// reaper wipes a disk only on its word.
	APIReader client.Reader
	// Recorder writes the agent's Events, about its own MacNode only.
	Recorder events.EventRecorder
	Log      logr.Logger

	// inventoryMu serialises looking at what the chassis holds and
	// reporting it, and reaping.
	inventoryMu sync.Mutex

	// Images is the golden cache: an instance's disk is cloned from its
	// verified golden, pulled on demand.
	Images *images.Store
	// PullPoll is how often an instance waiting on its golden's pull looks
	// again (1s if zero).
	PullPoll time.Duration
	// Report owns the MacNode's status.reported: the loop publishes the
	// quota, the inventory and the wipes into it, and flushes it when one
	// must be on record before it goes on.
	Report *report.Reporter

	// BootID says which boot of the host this is: a quota report is about
	// one boot, and the quarantine loop reads a reboot from it. Nil
	// reports the empty boot id.
	BootID host.BootIDSource
	// Rebooter reboots the host when the operator asks, to clear a stuck
	// quota. Nil: the chassis stays quarantined until a person reboots it.
	Rebooter host.Rebooter
	// Rebooted is called once the Rebooter has returned: the host is going
	// down, and the agent must stop (a real restart ends it too).
	Rebooted func()
	// SimKernel is the sim host's kernel, set only with the sim driver: it
	// honours SimQuotaStickAnnotation, and lets the probe VM boot from an
	// empty disk when no golden is cached.
	SimKernel sim.Kernel
	// ProbeRetry is how soon a probe that failed for another reason than
	// the kernel's code 6 is tried again (30s if zero).
	ProbeRetry time.Duration
	// GuestKey is the chassis' guest key: it opens an instance's sealed
	// spec.guestConfig, which the loop hands to the VM's job loop (Jobs).
	// Nil: no sealed config opens on this chassis.
	GuestKey *sealing.Key
	// Jobs runs the runner VMs' jobs, here on the host; nil runs none.
	Jobs *jobs.Runners
	// Scripts reaches an instance's guest for its job's scripts.
	Scripts func(*computev1alpha1.MacOSInstance) jobs.ScriptRunner

	// vmMu serialises the quota probe with the instance loop's starts: the
	// probe counts the VMs that run, then starts one, and no tenant VM may
	// start between the two.
	vmMu sync.Mutex

	// quota is the last quota state reported. It is kept in the state
	// directory too, so that an agent restart does not undo it.
	quotaMu sync.Mutex
	quota   *fleetv1alpha1.QuotaReport

	// quarantine is the quarantine loop's memory of this process.
	quarantine quarantineState

	// wipes are the latest wipes' evidence, for the MacNode report.
	wipesMu sync.Mutex
	wipes   []fleetv1alpha1.WipeEvidence

	// keysSaid is, per instance, the outcome of handing its guest its SSH
	// keys that was last logged, so that each is logged once.
	keysMu   sync.Mutex
	keysSaid map[types.UID]string
	// openKeys opens the session that hands a guest its keys; nil is a
	// guest.Session on the pass's connection (tests replace it).
	openKeys func(ctx context.Context, gc *guest.Client, user string) (keySetter, error)
}

// RecentWipes is the evidence of the latest wipes, newest last.
func (r *Instances) RecentWipes() []fleetv1alpha1.WipeEvidence {
	r.wipesMu.Lock()
	defer r.wipesMu.Unlock()
	return slices.Clone(r.wipes)
}

// recordWipe keeps a wipe's evidence for the MacNode report.
func (r *Instances) recordWipe(w fleetv1alpha1.WipeEvidence) {
	r.wipesMu.Lock()
	defer r.wipesMu.Unlock()
	r.wipes = append(r.wipes, w)
	if n := len(r.wipes); n > fleetv1alpha1.MaxWipeRecords {
		r.wipes = r.wipes[n-fleetv1alpha1.MaxWipeRecords:]
	}
	r.Report.Wipes(r.wipes)
}

// recordedWipe is the evidence recordWipe kept of the wipe of uid, if any.
func (r *Instances) recordedWipe(uid types.UID) (fleetv1alpha1.WipeEvidence, bool) {
	r.wipesMu.Lock()
	defer r.wipesMu.Unlock()
	for _, w := range r.wipes {
		if w.UID == uid {
			return w, true
		}
	}
	return fleetv1alpha1.WipeEvidence{}, false
}

// evidence is the API's record of a wipe of owner's disk.
func (r *Instances) evidence(o Owner, ev Evidence) fleetv1alpha1.WipeEvidence {
	return fleetv1alpha1.WipeEvidence{Namespace: o.Namespace, Name: o.Name, UID: o.UID, LeaseName: o.LeaseName,
		Files: ev.Files, Bytes: ev.Bytes, Method: ev.Method, WipedAt: metav1.NewTime(r.Clock.Now().UTC().Truncate(time.Second))}
}

// LastQuota is the quota state the instance loop last reported in this
// boot, or nil before any code-6 refusal or probe.
func (r *Instances) LastQuota() *fleetv1alpha1.QuotaReport {
	r.quotaMu.Lock()
	defer r.quotaMu.Unlock()
	return r.quota.DeepCopy()
}

// LoadQuota takes up the quota report an earlier run of the agent left in
// the state directory, if it is about this boot, and publishes it: a Stuck
// stands until the host reboots, whatever the facts source says. A report
// of an earlier boot is dropped, since the reboot reset the counter.
func (r *Instances) LoadQuota(ctx context.Context) error {
	var q fleetv1alpha1.QuotaReport
	ok, err := r.readState(quotaFile, &q)
	if err != nil || !ok {
		return err
	}
	boot, err := r.bootID(ctx)
	if err != nil {
		return err
	}
	if q.BootID != boot {
		r.Log.Info("Dropped the quota report of an earlier boot", "reportBootID", q.BootID, "bootID", boot, "quotaState", q.State)
		return r.removeState(quotaFile)
	}
	r.quotaMu.Lock()
	r.quota = &q
	r.quotaMu.Unlock()
	r.Report.Quota(&q)
	r.Log.Info("Took up the quota report of this boot", "bootID", boot, "quotaState", q.State)
	return nil
}

// bootID is the host's current boot id; "" without a BootID source.
func (r *Instances) bootID(ctx context.Context) (string, error) {
	if r.BootID == nil {
		return "", nil
	}
	id, err := r.BootID.BootID(ctx)
	if err != nil {
		return "", fmt.Errorf("reading the host's boot id: %w", err)
	}
	return id, nil
}

// RandomMachineID is the sim's machine identifier: 32 random bytes.
func RandomMachineID() ([]byte, error) {
	b := make([]byte, 32)
	_, err := rand.Read(b)
	return b, err
}

// SetupWithManager watches the instances of this node (the manager's cache
// holds only those, by the status.nodeName field selector) and the node's
// own MacNode, whose slots decide what may run.
func (r *Instances) SetupWithManager(mgr ctrl.Manager) error {
	// The loop reads its own writes: a pass on a cache from before its last
	// report would write the same report again.
	c, err := cachewait.New(r.Client, mgr.GetCache(), cachewait.DefaultTimeout, &computev1alpha1.MacOSInstance{}, &fleetv1alpha1.MacNode{})
	if err != nil {
		return err
	}
	r.Client = c
	return ctrl.NewControllerManagedBy(mgr).
		For(&computev1alpha1.MacOSInstance{}).
		Named("instances").
		Watches(&fleetv1alpha1.MacNode{}, handler.EnqueueRequestsFromMapFunc(r.instancesOfNode)).
		Complete(conflict.Quiet(r))
}

func (r *Instances) instancesOfNode(ctx context.Context, _ client.Object) []reconcile.Request {
	list := &computev1alpha1.MacOSInstanceList{}
	if err := r.Client.List(ctx, list); err != nil {
		return nil
	}
	reqs := make([]reconcile.Request, 0, len(list.Items))
	for _, i := range list.Items {
		reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&i)})
	}
	return reqs
}

// Reconcile starts, reports, stops and wipes one instance.
func (r *Instances) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	log := ctrl.LoggerFrom(ctx)
	inst := &computev1alpha1.MacOSInstance{}
	if err := r.Client.Get(ctx, req.NamespacedName, inst); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if inst.Status.NodeName != r.NodeName {
		return ctrl.Result{}, nil
	}
	uid := string(inst.UID)
	if !inst.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, r.teardown(ctx, log, inst)
	}
	if !controllerutil.ContainsFinalizer(inst, fleetv1alpha1.DiskWipeFinalizer) {
		// A patch of the finalizers alone: the tenant's spec is never sent
		// back, so never rewritten (8192Mi stays 8192Mi, which agent.scope
		// would refuse as a spec change if it came back as 8Gi). It tests
		// the finalizers only, so the instance's status writes do not
		// refuse it.
		if err := finalizer.Add(ctx, r.Client, inst, fleetv1alpha1.DiskWipeFinalizer); err != nil {
			return ctrl.Result{}, r.refused(ctx, log, inst, computev1alpha1.VMFailed,
				"adding the "+fleetv1alpha1.DiskWipeFinalizer+" finalizer", err)
		}
	}

	mn := &fleetv1alpha1.MacNode{}
	if err := r.Client.Get(ctx, client.ObjectKey{Name: r.NodeName}, mn); err != nil {
		return ctrl.Result{}, fmt.Errorf("getting own MacNode: %w", err)
	}
	if mn.Status.Phase.Fenced() {
		// quarantine.fence: the chassis' quota stuck. Its VMs stop, gently,
		// and none starts until the operator lifts the phase.
		return r.fence(ctx, log, inst, mn)
	}
	if !slotNames(mn, inst.UID) {
		// Placed without a slot (or its slot was freed): it must not run.
		if err := r.stop(ctx, uid); err != nil {
			return ctrl.Result{}, err
		}
		return ctrl.Result{}, r.report(ctx, inst, computev1alpha1.VMPending, ErrNoSlot.Error()+"; the VM is not started", nil)
	}

	img := &fleetv1alpha1.MacOSImage{}
	if err := r.Client.Get(ctx, client.ObjectKey{Name: inst.Spec.ImageName}, img); err != nil {
		return ctrl.Result{RequeueAfter: r.Poll}, r.failed(ctx, log, inst,
			fmt.Sprintf("getting MacOSImage %s: %v", inst.Spec.ImageName, err))
	}
	if st := r.Images.Ensure(img, false); st.Phase != fleetv1alpha1.ImageReady {
		return ctrl.Result{RequeueAfter: cmp.Or(r.PullPoll, time.Second)}, r.reportPull(ctx, inst, img, st)
	}
	spec, err := r.spec(ctx, inst, img)
	if err != nil {
		return ctrl.Result{RequeueAfter: r.Poll}, r.failed(ctx, log, inst, err.Error())
	}
	c, state, startErr, err := r.start(ctx, log, req, uid, spec)
	if err != nil {
		return ctrl.Result{}, err
	}
	defer c.Close()
	if startErr != nil {
		return ctrl.Result{RequeueAfter: r.Poll}, r.failed(ctx, log, inst, "start failed: "+startErr.Error())
	}
	if vmPhase(state) == computev1alpha1.VMFailed {
		return ctrl.Result{RequeueAfter: r.Poll}, r.failed(ctx, log, inst, fmt.Sprintf("the VM is in state %q", state))
	}
	var w guestWord
	if state == driver.StateRunning {
		w = r.tendGuest(ctx, log, c, inst, img)
	}
	return ctrl.Result{RequeueAfter: r.Poll}, r.reportGuest(ctx, inst, vmPhase(state), w.message, w)
}

// failed stops whatever of the instance still runs, its VM and its helper,
// and only then reports it Failed: a VM never runs while its instance says
// it does not, unaccounted for by the tenant and the chassis' inventory.
// The next pass starts it afresh, should what failed mend.
func (r *Instances) failed(ctx context.Context, log logr.Logger, inst *computev1alpha1.MacOSInstance, msg string) error {
	uid := string(inst.UID)
	if err := r.stop(ctx, uid); err != nil {
		// The helpers could not be listed: removing this one, which is a
		// no-op when it is absent, ends its VM all the same.
		if rerr := r.Launcher.Remove(ctx, uid); rerr != nil {
			return fmt.Errorf("stopping %s/%s before reporting it Failed (%s): %w", inst.Namespace, inst.Name, msg, errors.Join(err, rerr))
		}
	}
	log.Info("The instance failed; none of it runs", "MacOSInstance", client.ObjectKeyFromObject(inst), "reason", msg)
	return r.report(ctx, inst, computev1alpha1.VMFailed, msg, nil)
}

// start reaches the instance's helper, launching it if need be, and starts
// its VM unless it runs: the VM's state after, the start's own failure
// (startErr, reported on the instance), or a failure to reach the helper
// (err). A code-6 refusal is reported as the quota's state.
func (r *Instances) start(ctx context.Context, log logr.Logger, req ctrl.Request, uid string, spec vmspec.VMSpec) (c *helper.Client, state driver.State, startErr, err error) {
	// The probe counts the VMs, then starts its own: no start between.
	r.vmMu.Lock()
	defer r.vmMu.Unlock()
	if c, err = r.helper(ctx, uid, spec); err != nil {
		return nil, "", nil, err
	}
	if state, err = c.State(ctx); err != nil {
		c.Close()
		return nil, "", nil, fmt.Errorf("asking the helper of %s: %w", uid, err)
	}
	if state != driver.StateStopped {
		return c, state, nil, nil
	}
	log.Info("Starting VM", "MacOSInstance", req.NamespacedName)
	if startErr = c.Start(ctx, spec); startErr != nil {
		if driver.IsLimitExceeded(startErr) {
			if qerr := r.reportQuota(ctx, log, r.Clock.Now()); qerr != nil {
				log.Error(qerr, "A start was refused with code 6, but the quota state could not be established; none reported")
			}
		}
		return c, driver.StateStopped, startErr, nil
	}
	if state, err = c.State(ctx); err != nil {
		c.Close()
		return nil, "", nil, err
	}
	return c, state, nil, nil
}

func slotNames(mn *fleetv1alpha1.MacNode, uid types.UID) bool {
	for _, s := range mn.Status.Slots {
		if s.UID == uid {
			return true
		}
	}
	return false
}

func vmPhase(s driver.State) computev1alpha1.VMPhase {
	switch s {
	case driver.StateRunning:
		return computev1alpha1.VMRunning
	case driver.StateStarting:
		return computev1alpha1.VMStarting
	case driver.StateStopping:
		return computev1alpha1.VMStopping
	case driver.StateStopped:
		return computev1alpha1.VMStopped
	}
	return computev1alpha1.VMFailed
}

// spec clones the instance's disk from its image and renders its VMSpec.
func (r *Instances) spec(_ context.Context, inst *computev1alpha1.MacOSInstance, img *fleetv1alpha1.MacOSImage) (vmspec.VMSpec, error) {
	uid := string(inst.UID)
	if err := r.Disks.RecordOwner(Owner{Namespace: inst.Namespace, Name: inst.Name, UID: inst.UID, LeaseName: inst.Spec.LeaseName}); err != nil {
		return vmspec.VMSpec{}, err
	}
	// An instance that reported a pull waited for its golden; one that
	// did not found it in the cache: a cache hit, once its disk is cloned.
	waited := inst.Status.Runtime != nil && inst.Status.Runtime.Phase == computev1alpha1.VMPulling
	disk, aux, err := r.Disks.Prepare(uid, func(disk, aux string) (string, error) {
		m, err := r.Images.Clone(img, disk, aux)
		if err == nil && !waited {
			r.Images.CountCacheHit(img.Name)
		}
		return string(m), err
	})
	if err != nil {
		return vmspec.VMSpec{}, err
	}
	machineID, err := vmspec.LoadOrCreateMachineIdentifier(filepath.Join(r.Disks.InstanceDir(uid), vmspec.MachineIdentifierFile), r.NewMachineID)
	if err != nil {
		return vmspec.VMSpec{}, err
	}
	return vmspec.Render(inst, img, vmspec.Paths{Disk: disk, AuxiliaryStorage: aux}, machineID)
}

// helper reattaches to the instance's helper, or launches it.
func (r *Instances) helper(ctx context.Context, uid string, spec vmspec.VMSpec) (*helper.Client, error) {
	sock, err := r.Launcher.Launch(ctx, uid, spec)
	if err != nil {
		return nil, fmt.Errorf("launching the helper of %s: %w", uid, err)
	}
	c, err := helper.Dial(ctx, sock)
	if err != nil {
		return nil, fmt.Errorf("reaching the helper of %s: %w", uid, err)
	}
	return c, nil
}

// stop ends the instance's VM and helper, if any.
func (r *Instances) stop(ctx context.Context, uid string) error {
	running, err := r.Launcher.Running()
	if err != nil {
		return err
	}
	sock, ok := running[uid]
	if !ok {
		return nil
	}
	r.stopJob(ctx, r.Log, uid, false)
	if c, err := helper.Dial(ctx, sock); err == nil {
		_ = c.Stop(ctx, r.StopGrace)
		c.Close()
	}
	return r.Launcher.Remove(ctx, uid)
}

// teardown stops the VM, wipes its disk, and only then lets the instance go.
// The stop and the wipe's evidence go on record in one status write (issue
// 39): the stop is the deletion's, and the wipe follows at once. Until that
// write, the stop is kept in the state directory, since the helper that
// knew how the VM went down is gone by then. Should anything between the
// two fail, the stop goes on record at once, with the failure.
func (r *Instances) teardown(ctx context.Context, log logr.Logger, inst *computev1alpha1.MacOSInstance) error {
	if !controllerutil.ContainsFinalizer(inst, fleetv1alpha1.DiskWipeFinalizer) {
		return nil
	}
	if wipedForExport(inst) {
		// Done on an earlier pass, which reported it; the finalizer is the
		// exporter's to take now. (Had that pass's chassis report failed,
		// the reaper's next pass reports the emptied inventory.)
		r.keysOutcome(inst.UID, "")
		return nil
	}
	uid := string(inst.UID)
	// Gently, as a quarantine does: the VM's job, if one runs, is
	// reported interrupted before the VM goes, rather than left running
	// in the CI system; then the guest is asked.
	r.stopJob(ctx, log, uid, true)
	method, err := r.stopGracefully(ctx, log, uid)
	if err != nil {
		return fmt.Errorf("stopping %s: %w", uid, err)
	}
	// A stop an earlier pass made, or an agent killed before it recorded
	// it, is still to be recorded.
	stop, err := r.keptStop(inst.UID)
	if err != nil {
		log.Error(err, "Reading a deleted instance's unrecorded stop failed; its wipe is recorded without it", "MacOSInstance", client.ObjectKeyFromObject(inst))
	}
	if method != "" {
		stop = &computev1alpha1.VMStop{Method: method, Reason: computev1alpha1.StopReasonInstanceDeleted, At: metav1.NewTime(r.Clock.Now().UTC().Truncate(time.Second))}
		if err := r.keepStop(inst.UID, stop); err != nil {
			// Not kept past the helper: on record now, as a stop on its own.
			log.Error(err, "Keeping a deleted instance's stop failed; it is recorded apart from its wipe", "MacOSInstance", client.ObjectKeyFromObject(inst))
			if err := r.reportStopped(ctx, inst, msgStoppedWiping, stop); err != nil {
				return err
			}
		}
	}
	if err := r.Launcher.Remove(ctx, uid); err != nil {
		return r.stoppedUnwiped(ctx, inst, stop, fmt.Errorf("removing the helper of %s: %w", uid, err))
	}
	ev, err := r.Disks.Wipe(uid)
	if err != nil {
		return r.stoppedUnwiped(ctx, inst, stop, err)
	}
	r.Jobs.Forget(inst.UID)
	// The operator returns the chassis only once its inventory is empty:
	// say so with the wipe's evidence rather than on the reaper's next
	// pass.
	if err := r.publishInventory(ctx, log); err != nil {
		log.Error(err, "Reporting the inventory after a wipe failed; the reaper reports it on its next pass")
	}
	// instance.wipe: the finalizer comes off only after the wipe is on record.
	if inst.Status.Runtime == nil || inst.Status.Runtime.WipedAt == nil {
		// A pass retried on a cache that has not seen its record yet finds
		// the disk gone: it writes the evidence of the wipe that was done.
		w, recorded := r.recordedWipe(inst.UID)
		if !recorded {
			w = r.evidence(Owner{Namespace: inst.Namespace, Name: inst.Name, UID: inst.UID, LeaseName: inst.Spec.LeaseName}, ev)
			r.recordWipe(w)
		}
		// The chassis' report first, with the emptied inventory and the
		// evidence: the wipe's record frees the instance's slot at once
		// (chassis.AwaitsWipe), and placement's write of the chassis,
		// locked on its resourceVersion, would lose to this report landing
		// in between (issue 39). A failure is retried after the record.
		if err := r.Report.Flush(ctx); err != nil {
			log.Error(err, "Reporting the wipe before its record failed; it is reported after it")
		}
		rt := stoppedRuntime(inst, msgStoppedWiped, stop)
		at := metav1.NewTime(r.Clock.Now())
		rt.WipedAt, rt.Wipe = &at, &w
		if err := r.writeRuntime(ctx, inst, rt); err != nil {
			return r.stoppedUnwiped(ctx, inst, stop, fmt.Errorf("recording the stop and the wipe of %s: %w", uid, err))
		}
	}
	r.forgetStop(log, inst.UID)
	// The chassis' history takes the evidence from the MacNode's report
	// when the lease is released, which may be as soon as this instance is
	// gone: report it first, with the emptied inventory, in one write.
	if err := r.Report.Flush(ctx); err != nil {
		return fmt.Errorf("reporting the wipe of %s on MacNode %s: %w", uid, r.NodeName, err)
	}
	if leftToExporter(inst) {
		// wipedForExport from the next pass on.
		r.keysOutcome(inst.UID, "")
		log.Info("Instance wiped; the audit exporter releases it", "MacOSInstance", client.ObjectKeyFromObject(inst))
		return nil
	}
	if err := finalizer.Remove(ctx, r.Client, inst, fleetv1alpha1.DiskWipeFinalizer); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		return r.refused(ctx, log, inst, computev1alpha1.VMStopped,
			"removing the "+fleetv1alpha1.DiskWipeFinalizer+" finalizer after the wipe", err)
	}
	r.keysOutcome(inst.UID, "")
	log.Info("Instance wiped and released", "MacOSInstance", client.ObjectKeyFromObject(inst))
	return nil
}

// wipedForExport: the wipe is on record, and the audit exporter takes
// macrack.io/disk-wipe off with its own (leftToExporter).
func wipedForExport(inst *computev1alpha1.MacOSInstance) bool {
	return chassis.Wiped(inst) && leftToExporter(inst)
}

// leftToExporter: the instance carries the audit exporter's finalizer and
// no one else's but this agent's, so the exporter takes macrack.io/disk-wipe
// off with its own in one write once the wipe is on record and the last
// records are out (issue 39), rather than this agent in a write of its
// own. instance.wipe holds either way: the finalizer goes only after
// status.runtime.wipedAt, which only this agent writes. Without the
// exporter's finalizer, or with a tenant's that would hold the exporter's
// back, the agent takes its own off, as before.
func leftToExporter(inst *computev1alpha1.MacOSInstance) bool {
	for _, f := range inst.Finalizers {
		if f != fleetv1alpha1.AuditFinalizer && f != fleetv1alpha1.DiskWipeFinalizer {
			return false
		}
	}
	return controllerutil.ContainsFinalizer(inst, fleetv1alpha1.AuditFinalizer)
}

// report writes status.runtime, and nothing else, with a merge patch.
func (r *Instances) report(ctx context.Context, inst *computev1alpha1.MacOSInstance, phase computev1alpha1.VMPhase, msg string, g *guest.Report) error {
	return r.reportGuest(ctx, inst, phase, msg, guestWord{report: g})
}

// reportGuest is report with what became of the guest's config too: one
// write for the guest's report, its job and its config.
func (r *Instances) reportGuest(ctx context.Context, inst *computev1alpha1.MacOSInstance, phase computev1alpha1.VMPhase, msg string, w guestWord) error {
	g := w.report
	rt := computev1alpha1.RuntimeStatus{Phase: phase, Message: truncate(msg, maxMessage)}
	if old := inst.Status.Runtime; old != nil && g == nil {
		// Keep the guest's last word until it speaks again.
		rt.BootStage, rt.XcodeVersions, rt.DiskHeadroom, rt.LastReportAt = old.BootStage, old.XcodeVersions, old.DiskHeadroom, old.LastReportAt
		rt.ReadyForWork = old.ReadyForWork && phase == computev1alpha1.VMRunning
	}
	if old := inst.Status.Runtime; old != nil {
		rt.WipedAt, rt.Wipe = old.WipedAt, old.Wipe // instance.wipe's record stays
		rt.LastStop = old.LastStop                  // so does the last stop's, until the next
		// The config's fate and the job's last word stay until they change:
		// a VM stopped, or a guest restarted that has no job yet, does not
		// undo the record of the VM's one job.
		rt.GuestConfig, rt.Job = old.GuestConfig, old.Job
	}
	if w.config != nil {
		rt.GuestConfig = w.config
	}
	if phase == computev1alpha1.VMRunning {
		// A run starts with the first report that says Running: its time
		// is the audit stream's running record, in this same write.
		rt.StartedAt = startedAt(inst.Status.Runtime, r.Clock.Now())
	}
	if g != nil {
		at := metav1.NewTime(r.Clock.Now())
		rt.BootStage, rt.XcodeVersions, rt.ReadyForWork, rt.LastReportAt = g.BootStage, g.XcodeVersions, g.ReadyForWork, &at
		rt.DiskHeadroom = resource.NewQuantity(g.DiskHeadroomBytes, resource.BinarySI)
		if g.Job != nil {
			if job, ok := jobStatus(g.Job); ok {
				rt.Job = job
			} else {
				ctrl.LoggerFrom(ctx).Info("The guest reported a job the API would refuse; its last job report stands",
					"MacOSInstance", client.ObjectKeyFromObject(inst), "jobPhase", string(g.Job.Phase), "jobID", g.Job.ID)
			}
		}
		// A report that changes nothing but its time is no write, until
		// the time stored is guestReportRefresh old: a running VM's guest
		// answers every Poll, and each write of the same report would be
		// one more for the API server and for everyone who watches.
		// Nothing decides on the time's freshness, so the refresh is paid
		// hourly (issue 39: at a minute, a fleet's running VMs were most
		// of what a long wave writes beyond the heartbeats).
		if old := inst.Status.Runtime; old != nil && old.LastReportAt != nil && r.Clock.Since(old.LastReportAt.Time) < guestReportRefresh {
			same := rt
			same.LastReportAt = old.LastReportAt
			if equalRuntime(*old, same) {
				rt = same
			}
		}
	}
	return r.writeRuntime(ctx, inst, rt)
}

// startedAt is a Running report's run start: old's, while old already
// said Running, else now (a run starts, or a report from before startedAt
// existed gets one).
func startedAt(old *computev1alpha1.RuntimeStatus, now time.Time) *metav1.Time {
	if old != nil && old.Phase == computev1alpha1.VMRunning && old.StartedAt != nil {
		return old.StartedAt
	}
	t := metav1.NewTime(now.UTC().Truncate(time.Second))
	return &t
}

// guestReportRefresh is how stale status.runtime.lastReportAt may grow
// while the guest's report stays the same: older than that, the guest has
// stopped answering. No controller reads the time; it is for people.
const guestReportRefresh = time.Hour

// reportPull says, in status.runtime, that the instance waits for its
// golden, and how far the pull has come.
func (r *Instances) reportPull(ctx context.Context, inst *computev1alpha1.MacOSInstance, img *fleetv1alpha1.MacOSImage, st images.State) error {
	msg := fmt.Sprintf("pulling golden %s: %d%%", img.Name, st.Percent)
	switch st.Phase {
	case fleetv1alpha1.ImageWaiting:
		msg = fmt.Sprintf("the pull of golden %s waits for room in the image cache: %s", img.Name, st.Message)
	case fleetv1alpha1.ImageFailed:
		msg = fmt.Sprintf("the pull of golden %s failed, and is tried again: %s", img.Name, st.Message)
	default:
		if st.Message != "" {
			msg += " (" + st.Message + ")"
		}
	}
	pct := st.Percent
	rt := computev1alpha1.RuntimeStatus{Phase: computev1alpha1.VMPulling, Message: truncate(msg, maxMessage), PullPercent: &pct}
	if old := inst.Status.Runtime; old != nil {
		rt.WipedAt, rt.Wipe, rt.LastStop = old.WipedAt, old.Wipe, old.LastStop
		rt.GuestConfig, rt.Job = old.GuestConfig, old.Job
	}
	return r.writeRuntime(ctx, inst, rt)
}

// writeRuntime writes status.runtime, and nothing else, with a merge patch,
// unless it holds rt already.
func (r *Instances) writeRuntime(ctx context.Context, inst *computev1alpha1.MacOSInstance, rt computev1alpha1.RuntimeStatus) error {
	if old := inst.Status.Runtime; old != nil && rt.StartedAt == nil {
		rt.StartedAt = old.StartedAt // the last run's start stays until the next
	}
	if inst.Status.Runtime != nil && equalRuntime(*inst.Status.Runtime, rt) {
		return nil
	}
	patch, err := runtimePatch(inst.Status.Runtime, rt)
	if err != nil {
		return err
	}
	if err := r.Client.Status().Patch(ctx, inst, client.RawPatch(types.MergePatchType, patch)); err != nil {
		return client.IgnoreNotFound(fmt.Errorf("reporting runtime of %s/%s: %w", inst.Namespace, inst.Name, err))
	}
	return nil
}

// runtimePatch is the merge patch that makes status.runtime rt: a field rt
// leaves out (a Running VM's message, a finished pull's percentage) is set
// to null, since a merge patch keeps what it does not name.
func runtimePatch(old *computev1alpha1.RuntimeStatus, rt computev1alpha1.RuntimeStatus) ([]byte, error) {
	b, err := json.Marshal(rt)
	if err != nil {
		return nil, err
	}
	fields := map[string]any{}
	if err := json.Unmarshal(b, &fields); err != nil {
		return nil, err
	}
	if old != nil {
		ob, err := json.Marshal(old)
		if err != nil {
			return nil, err
		}
		was := map[string]any{}
		if err := json.Unmarshal(ob, &was); err != nil {
			return nil, err
		}
		for k := range was {
			if _, ok := fields[k]; !ok {
				fields[k] = nil
			}
		}
	}
	return json.Marshal(map[string]any{"status": map[string]any{"runtime": fields}})
}

// maxMessage is status.runtime.message's schema limit, in characters.
const maxMessage = 1024

// truncate cuts s to at most n characters, marking the cut.
func truncate(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}

func equalRuntime(a, b computev1alpha1.RuntimeStatus) bool {
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	return string(ja) == string(jb)
}

// quotaHolding reports whether a VM in state s holds one of the kernel's VM
// slots, so counts as running toward the quota. Starting counts: the
// framework (and the sim's kernel) takes the slot when a start begins, so a
// VM still booting is one of the two. Stopping and Paused count too: such a
// VM still exists in the hypervisor. Stopped and Error do not: the VM is off.
func quotaHolding(s driver.State) bool {
	switch s {
	case driver.StateStarting, driver.StateRunning, driver.StateStopping, driver.StatePaused:
		return true
	}
	return false
}

// helperAnswerTimeout bounds each helper's answer when the agent counts VMs.
const helperAnswerTimeout = 2 * time.Second

// runningVMs counts the VMs of this host from their own state: each
// helper's VM is asked for it. A helper process is not a VM: one whose VM
// is Stopped, or that does not answer in time, is not counted.
func (r *Instances) runningVMs(ctx context.Context, log logr.Logger) (int, error) {
	helpers, err := r.Launcher.Running()
	if err != nil {
		return 0, fmt.Errorf("listing the VM helpers: %w", err)
	}
	n := 0
	for uid, sock := range helpers {
		state, err := vmState(ctx, sock)
		if err != nil {
			log.Info("A helper did not say its VM's state; its VM is not counted as running", "instanceUID", uid, "error", err.Error())
			continue
		}
		if quotaHolding(state) {
			n++
		}
	}
	return n, nil
}

func vmState(ctx context.Context, sock string) (driver.State, error) {
	ctx, cancel := context.WithTimeout(ctx, helperAnswerTimeout)
	defer cancel()
	c, err := helper.Dial(ctx, sock)
	if err != nil {
		return "", err
	}
	defer c.Close()
	return c.State(ctx)
}

// vmCapacity is the VMs this chassis' class allows, at most fleetv1alpha1.KernelVMLimit.
func (r *Instances) vmCapacity(ctx context.Context) (int, error) {
	mn := &fleetv1alpha1.MacNode{}
	if err := r.Client.Get(ctx, client.ObjectKey{Name: r.NodeName}, mn); err != nil {
		return 0, fmt.Errorf("getting own MacNode: %w", err)
	}
	class := &fleetv1alpha1.MacNodeClass{}
	if err := r.Client.Get(ctx, client.ObjectKey{Name: mn.Spec.NodeClassName}, class); err != nil {
		return 0, fmt.Errorf("getting MacNodeClass %s: %w", mn.Spec.NodeClassName, err)
	}
	if class.Spec.VMCapacity < 1 {
		return 0, fmt.Errorf("MacNodeClass %s has vmCapacity %d", class.Name, class.Spec.VMCapacity)
	}
	return min(int(class.Spec.VMCapacity), fleetv1alpha1.KernelVMLimit), nil
}

// reportQuota records a code-6 refusal seen at refusedAt: Stuck when fewer
// VMs run than the class allows (the kernel's VM counter is stuck, and only
// a host reboot clears it; never a workaround), OK when the refusal was the
// limit doing its job. A state it cannot establish (the helpers cannot be
// listed, the class cannot be read) it does not report: it returns why.
func (r *Instances) reportQuota(ctx context.Context, log logr.Logger, refusedAt time.Time) error {
	running, err := r.runningVMs(ctx, log)
	if err != nil {
		return err
	}
	capacity, err := r.vmCapacity(ctx)
	if err != nil {
		return err
	}
	state := fleetv1alpha1.QuotaOK
	if running < capacity {
		state = fleetv1alpha1.QuotaStuck
	}
	at := metav1.NewTime(refusedAt)
	q := &fleetv1alpha1.QuotaReport{State: state, RunningVMs: int32(running),
		LastErrorCode: driver.CodeVirtualMachineLimitExceeded, LastErrorAt: &at}
	if err := r.writeQuota(ctx, q); err != nil {
		return err
	}
	log.Info("Kernel VM quota refused a start", "quotaState", state, "runningVMs", running, "vmCapacity", capacity, "bootID", q.BootID)
	return nil
}

// writeQuota keeps q, stamped with the current boot, in memory and in the
// state directory, for the agent's next start, and reports it as the whole
// of status.reported.quota, at once. A quota whose boot the agent cannot
// tell is not reported.
func (r *Instances) writeQuota(ctx context.Context, q *fleetv1alpha1.QuotaReport) error {
	boot, err := r.bootID(ctx)
	if err != nil {
		return fmt.Errorf("reporting the quota state %s: %w", q.State, err)
	}
	q.BootID = boot
	// Kept first: an agent that dies before the report goes out reports it
	// from the state directory when it starts again, in this boot. One
	// lock over the three, so that two reports (the loop's, the probe's)
	// leave the same last one in each.
	r.quotaMu.Lock()
	if err := r.writeState(quotaFile, q); err != nil {
		r.quotaMu.Unlock()
		return fmt.Errorf("keeping the quota report %s in the state directory: %w", q.State, err)
	}
	r.quota = q.DeepCopy()
	r.Report.Quota(q)
	r.quotaMu.Unlock()
	if err := r.Report.Flush(ctx); err != nil {
		return fmt.Errorf("reporting the quota state %s: %w", q.State, err)
	}
	return nil
}

// policyRule finds the rule an admission refusal names: each policy's
// message opens with its rule ("agent.scope: ..."), whether a
// ValidatingAdmissionPolicy or the webhook refused.
var policyRule = regexp.MustCompile(`(?:^|[\s:])([a-z][a-z0-9]*\.[a-z][a-z0-9-]*): `)

// refusal reports whether err is the API server refusing a write on
// policy grounds (422 Invalid or 403 Forbidden: admission or RBAC), and
// the rule it names, if any.
func refusal(err error) (rule string, ok bool) {
	if !apierrors.IsInvalid(err) && !apierrors.IsForbidden(err) {
		return "", false
	}
	if m := policyRule.FindStringSubmatch(err.Error()); m != nil {
		return m[1], true
	}
	return "unknown", true
}

// refused handles a failed write of the instance: a refusal on policy
// grounds is logged with its rule and told in status.runtime.message (a
// separate write, which agent.scope allows), so that it never hides in the
// agent's log. It returns the error, wrapped, for a retry with backoff.
func (r *Instances) refused(ctx context.Context, log logr.Logger, inst *computev1alpha1.MacOSInstance, phase computev1alpha1.VMPhase, what string, err error) error {
	err = fmt.Errorf("%s of %s/%s: %w", what, inst.Namespace, inst.Name, err)
	rule, ok := refusal(err)
	if !ok {
		return err
	}
	log.Error(err, "The API server refused the agent's write", "MacOSInstance", client.ObjectKeyFromObject(inst), "write", what, "rule", rule)
	said := err.Error()
	var status apierrors.APIStatus
	if errors.As(err, &status) {
		said = status.Status().Message
	}
	msg := fmt.Sprintf("the API server refused %s (%s): %s", what, rule, said)
	if phase == computev1alpha1.VMFailed {
		if ferr := r.failed(ctx, log, inst, msg); ferr != nil {
			log.Error(ferr, "Reporting the refusal in status.runtime failed too")
		}
		return err
	}
	if rerr := r.report(ctx, inst, phase, msg, nil); rerr != nil {
		log.Error(rerr, "Reporting the refusal in status.runtime failed too")
	}
	return err
}
