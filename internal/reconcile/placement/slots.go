package placement

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	computev1alpha1 "github.com/boualleiguie/macrack-operator/api/compute/v1alpha1"
	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
	"github.com/boualleiguie/macrack-operator/internal/chassis"
	"github.com/boualleiguie/macrack-operator/internal/index"
	"github.com/boualleiguie/macrack-operator/internal/phase"
)

// reconcileSlots observes the chassis' instances and decides its slots, in
// memory: live slots kept, dead ones dropped, new claims added, each asked
// of the policies. With a fence (the chassis is under quarantine), it
// claims nothing: each waiting instance without a slot is refused, saying
// why it waits.
func (r *Reconciler) reconcileSlots(ctx context.Context, s *scope) error {
	if err := r.observeInstances(ctx, s); err != nil {
		return err
	}
	mn := s.node
	exists := map[types.UID]bool{}
	for _, i := range s.placed {
		exists[i.UID] = true
		r.placedOn.Delete(i.UID) // the cache shows it placed
	}
	for _, i := range s.waiting {
		exists[i.UID] = true
	}
	var slots []fleetv1alpha1.Slot
	for _, sl := range mn.Status.Slots {
		if exists[sl.UID] {
			slots = append(slots, sl)
		}
	}
	hasSlot := map[types.UID]bool{}
	for _, sl := range slots {
		hasSlot[sl.UID] = true
	}

	capacity, classKnown, err := r.capacity(ctx, mn)
	if err != nil {
		// A cache error is retried; it is never a tenant's capacity verdict.
		return err
	}
	waiting := s.waiting
	sort.SliceStable(waiting, func(a, b int) bool {
		return waiting[a].CreationTimestamp.Before(&waiting[b].CreationTimestamp)
	})
	for _, inst := range waiting {
		if hasSlot[inst.UID] {
			s.claims = append(s.claims, inst) // claimed on an earlier pass; the placement was not written yet
			continue
		}
		if s.fence != "" {
			s.refused = append(s.refused, refusal{inst, ReasonChassisQuarantined, s.fence})
			continue
		}
		if !classKnown {
			s.refused = append(s.refused, refusal{inst, computev1alpha1.ReasonClassNotFound,
				fmt.Sprintf("chassis %s names MacNodeClass %s, which does not exist; nothing is placed on it", mn.Spec.Serial, mn.Spec.NodeClassName)})
			continue
		}
		if len(slots) >= capacity {
			s.refused = append(s.refused, refusal{inst, computev1alpha1.ReasonCapacityExceeded,
				fmt.Sprintf("chassis %s runs at most %d macOS VMs and all its slots are taken", mn.Spec.Serial, capacity)})
			continue
		}
		if msg, err := r.mayPlace(ctx, mn, &inst); err != nil {
			return err
		} else if msg != "" {
			s.refused = append(s.refused, refusal{inst, computev1alpha1.ReasonPolicyDenied, msg})
			continue
		}
		slots = append(slots, fleetv1alpha1.Slot{Namespace: inst.Namespace, Name: inst.Name, UID: inst.UID})
		hasSlot[inst.UID] = true
		s.claims = append(s.claims, inst)
	}

	if sameSlots(slots, mn.Status.Slots) {
		return nil
	}
	updated := mn.DeepCopy()
	updated.Status.Slots = slots
	d, err := r.StatusWrite(ctx, updated, mn, nil)
	if err != nil {
		return err
	}
	if !d.Allowed() {
		return fmt.Errorf("claiming slots on %s refused: %s", mn.Name, d.Violations[0].Message)
	}
	mn.Status.Slots, s.slotsClaimed = slots, true
	return nil
}

// observeInstances finds the instances on the chassis, and those of its
// lease that wait for a slot: only a Leased chassis places, and one under
// quarantine tells its waiting instances why it does not. Each instance of
// the lease is on one list or the other, whichever read saw it.
func (r *Reconciler) observeInstances(ctx context.Context, s *scope) error {
	mn := s.node
	placed := &computev1alpha1.MacOSInstanceList{}
	if err := r.Client.List(ctx, placed, client.MatchingFields{index.InstanceByNode: mn.Name}); err != nil {
		return fmt.Errorf("listing instances on %s: %w", mn.Name, err)
	}
	s.placed = slices.DeleteFunc(placed.Items, gone)
	s.fence = quarantineFence(mn)
	b := mn.Status.Binding
	if b == nil || (mn.Status.Phase != fleetv1alpha1.MacNodeLeased && s.fence == "") {
		return nil
	}
	ofLease := &computev1alpha1.MacOSInstanceList{}
	if err := r.Client.List(ctx, ofLease, client.InNamespace(b.LeaseNamespace),
		client.MatchingFields{index.InstanceByLease: index.LeaseKey(b.LeaseNamespace, b.LeaseName)}); err != nil {
		return fmt.Errorf("listing instances of %s/%s: %w", b.LeaseNamespace, b.LeaseName, err)
	}
	onChassis := map[types.UID]bool{}
	for _, i := range s.placed {
		onChassis[i.UID] = true
	}
	for _, i := range ofLease.Items {
		switch {
		case i.Status.NodeName == "" && i.DeletionTimestamp.IsZero():
			s.waiting = append(s.waiting, i)
		case i.Status.NodeName == mn.Name && !onChassis[i.UID] && !gone(i):
			// The two Lists are two reads of the cache: a placement that
			// landed between them is on neither list as read (unplaced
			// in the first, placed in the second), and its slot would be
			// dropped, leaving it placed without one, which nothing
			// claims again. It is on the chassis.
			s.placed = append(s.placed, i)
		}
	}
	return nil
}

// gone: a deleted instance whose agent has wiped it holds no VM and no
// disk. It may linger, held by its audit finalizer until its last records
// are out (and by the agent's, which that exporter takes off with its own),
// but on no slot.
func gone(i computev1alpha1.MacOSInstance) bool {
	return !i.DeletionTimestamp.IsZero() && !chassis.AwaitsWipe(&i)
}

// quarantineFence says why a chassis takes no new instance, as
// quarantine.fence says it at admission, or is "" for a chassis that is not
// under quarantine: Quarantined, Rebooting, or with a quarantine that has
// not recovered.
func quarantineFence(mn *fleetv1alpha1.MacNode) string {
	q := mn.Status.Quarantine
	state := string(mn.Status.Phase)
	switch {
	case mn.Status.Phase.Fenced():
	case q.Active():
		state = fmt.Sprintf("under quarantine (phase %s)", phase.OrPending(mn.Status.Phase))
	default:
		return ""
	}
	cause := "its kernel VM quota stuck and MacRack is rebooting it"
	if q != nil && q.NeedsAttention {
		cause = fmt.Sprintf("its kernel VM quota stuck more than %d times in 24 hours and it waits for a person to repair it", fleetv1alpha1.MaxQuarantinesPerDay)
	}
	return fmt.Sprintf("quarantine.fence: chassis %s is %s: %s; no slot is claimed on it until it recovers, and this instance waits unplaced until then",
		mn.Spec.Serial, state, cause)
}

// mayPlace asks instance.cap and instance.tenant about the placement.
func (r *Reconciler) mayPlace(ctx context.Context, mn *fleetv1alpha1.MacNode, inst *computev1alpha1.MacOSInstance) (string, error) {
	to := inst.DeepCopy()
	to.Status.NodeName = mn.Name
	d, err := r.StatusWrite(ctx, to, inst, nil)
	if err != nil || d.Allowed() {
		return "", err
	}
	msgs := make([]string, len(d.Violations))
	for i, v := range d.Violations {
		msgs[i] = v.Message
	}
	return strings.Join(msgs, "; "), nil
}

// capacity is the chassis' VM capacity: its class's, never above the
// kernel's two. known is false when the class does not exist, which places
// nothing; any other error is the caller's to retry.
func (r *Reconciler) capacity(ctx context.Context, mn *fleetv1alpha1.MacNode) (capacity int, known bool, err error) {
	class := &fleetv1alpha1.MacNodeClass{}
	if err := r.Client.Get(ctx, client.ObjectKey{Name: mn.Spec.NodeClassName}, class); err != nil {
		if apierrors.IsNotFound(err) {
			return 0, false, nil
		}
		return 0, false, fmt.Errorf("getting MacNodeClass %s of %s: %w", mn.Spec.NodeClassName, mn.Name, err)
	}
	return min(int(class.Spec.VMCapacity), fleetv1alpha1.KernelVMLimit), true, nil
}

func sameSlots(a, b []fleetv1alpha1.Slot) bool {
	return slices.Equal(a, b)
}
