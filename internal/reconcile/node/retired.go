package node

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	computev1alpha1 "github.com/boualleiguie/macrack-operator/api/compute/v1alpha1"
	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
	"github.com/boualleiguie/macrack-operator/internal/chassis"
	"github.com/boualleiguie/macrack-operator/internal/index"
)

// maxUnwipedDisks is status.unwipedDisks' schema limit.
const maxUnwipedDisks = 64

// reconcileRetired is instance.wipe's break-glass. The Mac of a retired
// chassis is dead, so its agent will never wipe the disks of the instances
// being deleted on it, and their macrack.io/disk-wipe finalizers would hold
// their namespace forever. The operator records each such disk in
// status.unwipedDisks, in the pass's status write, and removes the
// finalizer only on a later pass, once the MacNode as read (so, as stored)
// records the disk: no disk is let go unrecorded. The status write
// enqueues that pass.
func (r *Reconciler) reconcileRetired(ctx context.Context, s *scope) error {
	if !s.node.Spec.Retired {
		return nil
	}
	if err := r.retireAgent(ctx, s); err != nil {
		return err
	}
	list := &computev1alpha1.MacOSInstanceList{}
	if err := r.Client.List(ctx, list, client.MatchingFields{index.InstanceByNode: s.node.Name}); err != nil {
		return fmt.Errorf("listing instances on %s: %w", s.node.Name, err)
	}
	var stuck []computev1alpha1.MacOSInstance
	for _, i := range list.Items {
		if !i.DeletionTimestamp.IsZero() && chassis.AwaitsWipe(&i) {
			stuck = append(stuck, i)
		}
	}
	if len(stuck) == 0 {
		return nil
	}
	stored := map[types.UID]bool{}
	for _, d := range s.node.Status.UnwipedDisks {
		stored[d.UID] = true
	}
	if err := r.recordUnwiped(ctx, s, stuck); err != nil {
		return err
	}
	log := ctrl.LoggerFrom(ctx)
	for i := range stuck {
		inst := &stuck[i]
		if !stored[inst.UID] {
			continue // recorded by this pass's write; let go on the next
		}
		let := inst.DeepCopy()
		controllerutil.RemoveFinalizer(let, fleetv1alpha1.DiskWipeFinalizer)
		if err := r.Client.Patch(ctx, let, client.MergeFromWithOptions(inst, client.MergeFromWithOptimisticLock{})); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("removing %s from %s/%s of retired chassis %s: %w", fleetv1alpha1.DiskWipeFinalizer, inst.Namespace, inst.Name, s.node.Name, err)
		}
		log.Info("Let an instance of a retired chassis go without a wipe", "MacOSInstance", client.ObjectKeyFromObject(inst), "instanceUID", inst.UID)
	}
	return nil
}

// recordUnwiped adds the disks of stuck to status.unwipedDisks, in memory,
// unless they are there already: the pass's status write carries them.
func (r *Reconciler) recordUnwiped(ctx context.Context, s *scope, stuck []computev1alpha1.MacOSInstance) error {
	recorded := map[types.UID]bool{}
	for _, d := range s.node.Status.UnwipedDisks {
		recorded[d.UID] = true
	}
	updated := s.node.DeepCopy()
	var added []computev1alpha1.MacOSInstance
	for _, i := range stuck {
		if recorded[i.UID] {
			continue
		}
		updated.Status.UnwipedDisks = append(updated.Status.UnwipedDisks, fleetv1alpha1.UnwipedDisk{
			Namespace: i.Namespace, Name: i.Name, UID: i.UID, LeaseName: i.Spec.LeaseName,
			RecordedAt: metav1.NewTime(s.now.UTC().Truncate(time.Second)),
		})
		added = append(added, i)
	}
	if len(added) == 0 {
		return nil
	}
	if n := len(updated.Status.UnwipedDisks); n > maxUnwipedDisks {
		// Never drop a record to make room: the disks stay held instead.
		return fmt.Errorf("retired chassis %s would record %d unwiped disks, above the %d its status holds", s.node.Name, n, maxUnwipedDisks)
	}
	d, err := r.StatusWrite(ctx, updated, s.node, nil)
	if err != nil {
		return err
	}
	if !d.Allowed() {
		return fmt.Errorf("recording unwiped disks on MacNode %s refused: %s", s.node.Name, d.Violations[0].Message)
	}
	s.node.Status.UnwipedDisks = updated.Status.UnwipedDisks
	for _, i := range added {
		s.tell(corev1.EventTypeWarning, fleetv1alpha1.ReasonDiskLeftUnwiped, "BreakGlass",
			fmt.Sprintf("Retired chassis %s: let instance %s/%s (%s) go without wiping its disk; destroy the SSD rather than reuse it", s.node.Spec.Serial, i.Namespace, i.Name, i.UID))
	}
	return nil
}

// retireAgent deletes the retired chassis' agent's ServiceAccount, which
// revokes its tokens: its namespace holds the agents' roles, and an
// identity there that is not enrolled may only read. Enrolling the chassis
// again creates a new one.
func (r *Reconciler) retireAgent(ctx context.Context, s *scope) error {
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: r.Params.AgentsNamespace,
		Name: fleetv1alpha1.AgentServiceAccountPrefix + s.node.Name}}
	err := r.Client.Delete(ctx, sa)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("deleting the agent ServiceAccount of retired chassis %s: %w", s.node.Name, err)
	}
	ctrl.LoggerFrom(ctx).Info("Deleted the agent ServiceAccount of a retired chassis", "ServiceAccount", client.ObjectKeyFromObject(sa))
	return nil
}
