package instances

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	computev1alpha1 "github.com/boualleiguie/macrack-operator/api/compute/v1alpha1"
	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
)

// RunReaper reaps and reports the inventory every Poll until ctx ends. The
// instance loop only sees instances that exist; this loop sees what the
// chassis holds, and so what an instance that vanished left behind.
func (r *Instances) RunReaper(ctx context.Context) error {
	log := r.Log.WithName("reaper")
	for {
		if err := r.Reap(ctx, log); err != nil {
			log.Error(err, "Reaping failed")
		}
		select {
		case <-ctx.Done():
			return nil
		case <-r.Clock.After(r.Poll):
		}
	}
}

// Reap stops every VM whose instance holds no slot on this chassis, and
// wipes the disk of every instance that a live read shows is gone, then
// reports what the chassis holds. It only stops a VM: the disk of an
// instance that still exists is that instance's, and its own teardown
// wipes it.
func (r *Instances) Reap(ctx context.Context, log logr.Logger) error {
	r.inventoryMu.Lock()
	defer r.inventoryMu.Unlock()

	// What the chassis holds is listed before the slots are read: a VM or
	// a disk is made only after its slot is seen, so every one listed here
	// that has a slot has it in the MacNode read after.
	helpers, err := r.Launcher.Running()
	if err != nil {
		return fmt.Errorf("listing the VM helpers: %w", err)
	}
	disks, err := r.Disks.List()
	if err != nil {
		return err
	}
	mn := &fleetv1alpha1.MacNode{}
	if err := r.Client.Get(ctx, client.ObjectKey{Name: r.NodeName}, mn); err != nil {
		return fmt.Errorf("getting own MacNode: %w", err)
	}

	for _, uid := range sortedKeys(helpers) {
		if slotNames(mn, types.UID(uid)) || uid == ProbeUID {
			// The quota probe's helper is the probe's to remove.
			continue
		}
		if err := r.stop(ctx, uid); err != nil {
			log.Error(err, "Stopping a VM that holds no slot failed", "instanceUID", uid)
			continue
		}
		log.Info("Stopped a VM that holds no slot", "instanceUID", uid)
		r.Recorder.Eventf(mn, nil, corev1.EventTypeWarning, fleetv1alpha1.ReasonVMReaped, "Reap",
			"Stopped the VM of instance %s: it holds no slot on chassis %s", uid, mn.Spec.Serial)
	}

	for _, uid := range disks {
		if slotNames(mn, types.UID(uid)) {
			continue
		}
		gone, why, err := r.instanceGone(ctx, uid)
		if err != nil {
			log.Error(err, "Could not confirm that an instance is gone; its disk is kept", "instanceUID", uid)
			continue
		}
		if !gone {
			continue
		}
		if err := r.stop(ctx, uid); err != nil {
			log.Error(err, "Stopping the VM of a vanished instance failed; its disk is kept", "instanceUID", uid)
			continue
		}
		owner, _ := r.Disks.OwnerOf(uid)
		ev, err := r.Disks.Wipe(uid)
		if err != nil {
			log.Error(err, "Wiping the disk of a vanished instance failed", "instanceUID", uid)
			continue
		}
		r.Jobs.Forget(types.UID(uid))
		if owner.UID != "" {
			r.recordWipe(r.evidence(owner, ev))
		}
		log.Info("Wiped the disk of an instance that is gone", "instanceUID", uid, "why", why)
		r.Recorder.Eventf(mn, nil, corev1.EventTypeWarning, fleetv1alpha1.ReasonDiskReaped, "Reap",
			"Wiped the disk of instance %s on chassis %s: %s; %d bytes of %v, by %s", uid, mn.Spec.Serial, why, ev.Bytes, ev.Files, ev.Method)
	}
	return r.reportInventoryLocked(ctx, log, mn)
}

// instanceGone asks the API server itself, never the cache, whether the
// instance a disk was made for still exists: a cache that lags must not
// have a live tenant's disk wiped.
func (r *Instances) instanceGone(ctx context.Context, uid string) (bool, string, error) {
	owner, err := r.Disks.OwnerOf(uid)
	if err != nil {
		// No owner record (a crash between the directory and the record):
		// a live list of the instances placed here settles it.
		return r.absentFromNode(ctx, uid)
	}
	inst := &computev1alpha1.MacOSInstance{}
	err = r.APIReader.Get(ctx, client.ObjectKey{Namespace: owner.Namespace, Name: owner.Name}, inst)
	switch {
	case apierrors.IsNotFound(err):
		return true, fmt.Sprintf("instance %s/%s no longer exists", owner.Namespace, owner.Name), nil
	case err != nil:
		return false, "", fmt.Errorf("reading instance %s/%s: %w", owner.Namespace, owner.Name, err)
	case inst.UID != owner.UID:
		return true, fmt.Sprintf("%s/%s is now another instance (%s)", owner.Namespace, owner.Name, inst.UID), nil
	}
	return false, "", nil
}

func (r *Instances) absentFromNode(ctx context.Context, uid string) (bool, string, error) {
	list := &computev1alpha1.MacOSInstanceList{}
	if err := r.APIReader.List(ctx, list, client.MatchingFields{"status.nodeName": r.NodeName}); err != nil {
		return false, "", fmt.Errorf("listing the instances placed on %s: %w", r.NodeName, err)
	}
	for _, i := range list.Items {
		if string(i.UID) == uid {
			return false, "", nil
		}
	}
	return true, "no instance placed on this chassis has its UID", nil
}

// ReportInventory reports what the chassis holds now, and returns once it
// is on record: the operator must see it before the loop goes on.
func (r *Instances) ReportInventory(ctx context.Context, log logr.Logger) error {
	if err := r.publishInventory(ctx, log); err != nil {
		return err
	}
	return r.Report.Flush(ctx)
}

// publishInventory publishes what the chassis holds now. The instance loop
// calls it after a wipe, so that a release need not wait for the next pass.
func (r *Instances) publishInventory(ctx context.Context, log logr.Logger) error {
	r.inventoryMu.Lock()
	defer r.inventoryMu.Unlock()
	mn := &fleetv1alpha1.MacNode{}
	if err := r.Client.Get(ctx, client.ObjectKey{Name: r.NodeName}, mn); err != nil {
		return fmt.Errorf("getting own MacNode: %w", err)
	}
	return r.reportInventoryLocked(ctx, log, mn)
}

// reportInventoryLocked looks and publishes status.reported.inventory.
// Looking and publishing under one lock keeps an older look from
// overwriting a newer one.
func (r *Instances) reportInventoryLocked(ctx context.Context, log logr.Logger, mn *fleetv1alpha1.MacNode) error {
	inv, err := r.inventory(ctx, log)
	if err != nil {
		return err
	}
	if q := mn.Status.Quarantine; q.Active() && mn.Status.Phase.Fenced() {
		// Taken under the fence: the instance loop starts no VM now.
		inv.QuarantinedAt = q.QuarantinedAt.DeepCopy()
	}
	if old := mn.Status.Reported; old != nil && old.Inventory != nil && sameHoldings(*old.Inventory, inv) &&
		!staleInQuarantine(mn, old.Inventory) {
		return nil
	}
	r.Report.Inventory(inv)
	log.V(1).Info("Inventory published", "vms", len(inv.VMs), "disks", len(inv.Disks))
	return nil
}

// staleInQuarantine reports whether inv was not taken under the chassis'
// current quarantine: the operator asks for the reboot only on one that
// was, so an unchanged one is reported again.
func staleInQuarantine(mn *fleetv1alpha1.MacNode, inv *fleetv1alpha1.HostInventory) bool {
	q := mn.Status.Quarantine
	return q.Active() && mn.Status.Phase.Fenced() && (inv.QuarantinedAt == nil || !inv.QuarantinedAt.Equal(&q.QuarantinedAt))
}

// inventory lists the chassis' VMs, from their helpers, and its instance
// disks. A helper that does not answer is listed: its VM may still exist.
func (r *Instances) inventory(ctx context.Context, log logr.Logger) (fleetv1alpha1.HostInventory, error) {
	inv := fleetv1alpha1.HostInventory{ObservedAt: metav1.NewTime(r.Clock.Now().UTC().Truncate(time.Second))}
	helpers, err := r.Launcher.Running()
	if err != nil {
		return inv, fmt.Errorf("listing the VM helpers: %w", err)
	}
	for _, uid := range sortedKeys(helpers) {
		if uid == ProbeUID {
			continue // no tenant's: the quota probe's, gone when it ends
		}
		state := "Unknown"
		if s, err := vmState(ctx, helpers[uid]); err == nil {
			state = string(s)
		} else {
			log.V(1).Info("A helper did not say its VM's state", "instanceUID", uid, "error", err.Error())
		}
		inv.VMs = append(inv.VMs, fleetv1alpha1.HostVM{UID: types.UID(uid), State: state})
	}
	disks, err := r.Disks.List()
	if err != nil {
		return inv, err
	}
	for _, uid := range disks {
		inv.Disks = append(inv.Disks, types.UID(uid))
	}
	// Within the schema's bounds, or the report is refused and a stale one
	// stands. Cut, the lists still say the chassis is not empty.
	if len(inv.VMs) > maxInventoryVMs {
		log.Info("More VMs than the inventory holds; the first are reported", "vms", len(inv.VMs), "reported", maxInventoryVMs)
		inv.VMs = inv.VMs[:maxInventoryVMs]
	}
	if len(inv.Disks) > maxInventoryDisks {
		log.Info("More instance disks than the inventory holds; the first are reported", "disks", len(inv.Disks), "reported", maxInventoryDisks)
		inv.Disks = inv.Disks[:maxInventoryDisks]
	}
	return inv, nil
}

// The schema's limits on status.reported.inventory.
const (
	maxInventoryVMs   = 16
	maxInventoryDisks = 64
)

// sameHoldings compares two inventories, when they were taken aside.
func sameHoldings(a, b fleetv1alpha1.HostInventory) bool {
	a.ObservedAt, b.ObservedAt = metav1.Time{}, metav1.Time{}
	return equality.Semantic.DeepEqual(a, b)
}

func sortedKeys(m map[string]string) []string { return slices.Sorted(maps.Keys(m)) }
