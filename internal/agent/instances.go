package agent

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"net"
	"path/filepath"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	computev1alpha1 "github.com/boualleiguie/macrack-operator/api/compute/v1alpha1"
	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
	"github.com/boualleiguie/macrack-operator/internal/agent/driver"
	"github.com/boualleiguie/macrack-operator/internal/agent/helper"
	"github.com/boualleiguie/macrack-operator/internal/agent/vmspec"
	"github.com/boualleiguie/macrack-operator/internal/guest"
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
	Clock    clock.PassiveClock
	// StopGrace bounds a graceful stop before the VM is forced off.
	StopGrace time.Duration
	// GuestPort is where the guest agent listens on vsock.
	GuestPort uint32
	// Poll is how often a running instance's guest is asked for a report.
	Poll time.Duration
	// NewMachineID makes an instance's machine identifier once (the
	// driver's: random bytes in the sim, VZMacMachineIdentifier on a Mac).
	NewMachineID func() ([]byte, error)
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
	return ctrl.NewControllerManagedBy(mgr).
		For(&computev1alpha1.MacOSInstance{}).
		Named("instances").
		Watches(&fleetv1alpha1.MacNode{}, handler.EnqueueRequestsFromMapFunc(r.instancesOfNode)).
		Complete(r)
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
	if controllerutil.AddFinalizer(inst, computev1alpha1.DiskWipeFinalizer) {
		if err := r.Client.Update(ctx, inst); err != nil {
			return ctrl.Result{}, fmt.Errorf("adding %s: %w", computev1alpha1.DiskWipeFinalizer, err)
		}
	}

	mn := &fleetv1alpha1.MacNode{}
	if err := r.Client.Get(ctx, client.ObjectKey{Name: r.NodeName}, mn); err != nil {
		return ctrl.Result{}, fmt.Errorf("getting own MacNode: %w", err)
	}
	if !slotNames(mn, inst.UID) {
		// Placed without a slot (or its slot was freed): it must not run.
		if err := r.stop(ctx, uid); err != nil {
			return ctrl.Result{}, err
		}
		return ctrl.Result{}, r.report(ctx, inst, computev1alpha1.VMPending, ErrNoSlot.Error()+"; the VM is not started", nil)
	}

	spec, err := r.spec(ctx, inst)
	if err != nil {
		return ctrl.Result{RequeueAfter: r.Poll}, r.report(ctx, inst, computev1alpha1.VMFailed, err.Error(), nil)
	}
	c, err := r.helper(ctx, uid, spec)
	if err != nil {
		return ctrl.Result{}, err
	}
	defer c.Close()
	state, err := c.State(ctx)
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("asking the helper of %s: %w", uid, err)
	}
	if state == driver.StateStopped {
		log.Info("Starting VM", "MacOSInstance", req.NamespacedName)
		if err := c.Start(ctx, spec); err != nil {
			if driver.IsLimitExceeded(err) {
				r.reportQuota(ctx, log)
			}
			return ctrl.Result{RequeueAfter: r.Poll}, r.report(ctx, inst, computev1alpha1.VMFailed, "start failed: "+err.Error(), nil)
		}
		if state, err = c.State(ctx); err != nil {
			return ctrl.Result{}, err
		}
	}
	var g *guest.Report
	if state == driver.StateRunning {
		g = r.askGuest(ctx, log, c)
	}
	return ctrl.Result{RequeueAfter: r.Poll}, r.report(ctx, inst, vmPhase(state), "", g)
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
func (r *Instances) spec(ctx context.Context, inst *computev1alpha1.MacOSInstance) (vmspec.VMSpec, error) {
	img := &fleetv1alpha1.MacOSImage{}
	if err := r.Client.Get(ctx, client.ObjectKey{Name: inst.Spec.ImageName}, img); err != nil {
		return vmspec.VMSpec{}, fmt.Errorf("getting MacOSImage %s: %w", inst.Spec.ImageName, err)
	}
	uid := string(inst.UID)
	disk, aux, err := r.Disks.Prepare(uid, img.Name)
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
	if c, err := helper.Dial(ctx, sock); err == nil {
		_ = c.Stop(ctx, r.StopGrace)
		c.Close()
	}
	return r.Launcher.Remove(ctx, uid)
}

// teardown stops the VM, wipes its disk, and only then lets the instance go.
func (r *Instances) teardown(ctx context.Context, log logr.Logger, inst *computev1alpha1.MacOSInstance) error {
	if !controllerutil.ContainsFinalizer(inst, computev1alpha1.DiskWipeFinalizer) {
		return nil
	}
	uid := string(inst.UID)
	if err := r.stop(ctx, uid); err != nil {
		return fmt.Errorf("stopping %s: %w", uid, err)
	}
	if err := r.report(ctx, inst, computev1alpha1.VMStopped, "stopped; wiping the disk", nil); err != nil {
		return err
	}
	if err := r.Disks.Wipe(uid); err != nil {
		return err
	}
	before := inst.DeepCopy()
	controllerutil.RemoveFinalizer(inst, computev1alpha1.DiskWipeFinalizer)
	if err := r.Client.Patch(ctx, inst, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})); err != nil {
		return client.IgnoreNotFound(err)
	}
	log.Info("Instance wiped and released", "MacOSInstance", client.ObjectKeyFromObject(inst))
	return nil
}

// askGuest asks the guest agent for a report through the helper's vsock
// proxy. A guest that does not answer yet is not an error: it is booting.
func (r *Instances) askGuest(ctx context.Context, log logr.Logger, c *helper.Client) *guest.Report {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	conn, err := c.DialGuest(ctx, r.GuestPort)
	if err != nil {
		log.V(1).Info("Guest not reachable yet", "error", err.Error())
		return nil
	}
	defer conn.Close()
	return reportOver(ctx, log, conn)
}

func reportOver(ctx context.Context, log logr.Logger, conn net.Conn) *guest.Report {
	gc := guest.NewClient(conn)
	if _, err := gc.Handshake(ctx); err != nil {
		log.V(1).Info("Guest handshake failed", "error", err.Error())
		return nil
	}
	rep, err := gc.Report(ctx)
	if err != nil {
		log.V(1).Info("Guest report failed", "error", err.Error())
		return nil
	}
	return &rep
}

// report writes status.runtime, and nothing else, with a merge patch.
func (r *Instances) report(ctx context.Context, inst *computev1alpha1.MacOSInstance, phase computev1alpha1.VMPhase, msg string, g *guest.Report) error {
	rt := computev1alpha1.RuntimeStatus{Phase: phase, Message: msg}
	if old := inst.Status.Runtime; old != nil && g == nil {
		// Keep the guest's last word until it speaks again.
		rt.BootStage, rt.XcodeVersions, rt.DiskHeadroom, rt.LastReportAt = old.BootStage, old.XcodeVersions, old.DiskHeadroom, old.LastReportAt
		rt.ReadyForWork = old.ReadyForWork && phase == computev1alpha1.VMRunning
	}
	if g != nil {
		at := metav1.NewTime(r.Clock.Now())
		rt.BootStage, rt.XcodeVersions, rt.ReadyForWork, rt.LastReportAt = g.BootStage, g.XcodeVersions, g.ReadyForWork, &at
		rt.DiskHeadroom = resource.NewQuantity(g.DiskHeadroomBytes, resource.BinarySI)
	}
	if inst.Status.Runtime != nil && equalRuntime(*inst.Status.Runtime, rt) {
		return nil
	}
	patch, err := json.Marshal(map[string]any{"status": map[string]any{"runtime": rt}})
	if err != nil {
		return err
	}
	if err := r.Client.Status().Patch(ctx, inst, client.RawPatch(types.MergePatchType, patch)); err != nil {
		return client.IgnoreNotFound(fmt.Errorf("reporting runtime of %s/%s: %w", inst.Namespace, inst.Name, err))
	}
	return nil
}

func equalRuntime(a, b computev1alpha1.RuntimeStatus) bool {
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	return string(ja) == string(jb)
}

// reportQuota records a code-6 refusal below the limit: the kernel's VM
// counter is stuck, and only a host reboot clears it. Never a workaround.
func (r *Instances) reportQuota(ctx context.Context, log logr.Logger) {
	running, err := r.Launcher.Running()
	if err != nil {
		return
	}
	state := fleetv1alpha1.QuotaOK
	if len(running) < 2 {
		state = fleetv1alpha1.QuotaStuck
	}
	now := metav1.NewTime(r.Clock.Now())
	patch, _ := json.Marshal(map[string]any{"status": map[string]any{"reported": map[string]any{"quota": fleetv1alpha1.QuotaReport{
		State: state, RunningVMs: int32(len(running)), LastErrorCode: driver.CodeVirtualMachineLimitExceeded, LastErrorAt: &now}}}})
	mn := &fleetv1alpha1.MacNode{}
	mn.Name = r.NodeName
	if err := r.Client.Status().Patch(ctx, mn, client.RawPatch(types.MergePatchType, patch)); err != nil {
		log.Error(err, "Reporting the quota state failed")
		return
	}
	log.Info("Kernel VM quota refused a start", "quotaState", state, "runningVMs", len(running))
}
