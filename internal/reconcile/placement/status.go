package placement

import (
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	computev1alpha1 "github.com/boualleiguie/macrack-operator/api/compute/v1alpha1"
	"github.com/boualleiguie/macrack-operator/internal/conditions"
)

// instanceUpdate is one waiting instance's status as the pass leaves it.
type instanceUpdate struct {
	// before is the instance as read; inst, as this pass wants it.
	before, inst *computev1alpha1.MacOSInstance
	// placed: the instance holds a slot and is placed on the chassis.
	placed bool
	// placedCond is the Placed condition the pass set.
	placedCond metav1.Condition
}

// updateStatus sets, in one place, each waiting instance's placement and
// Placed condition from the pass's decisions: a claimed instance is placed
// on the chassis, a refused one is told why it waits.
func (r *Reconciler) updateStatus(s *scope) {
	mn := s.node
	for i := range s.claims {
		u := newUpdate(&s.claims[i])
		u.inst.Status.NodeName = mn.Name
		u.placed = true
		u.set(conditions.True(computev1alpha1.ConditionPlaced, computev1alpha1.ReasonPlaced,
			fmt.Sprintf("a slot on chassis %s (%s) is this instance's", mn.Spec.Serial, mn.Name)), s.now)
		s.updates = append(s.updates, u)
	}
	for i := range s.refused {
		ref := &s.refused[i]
		u := newUpdate(&ref.inst)
		u.set(conditions.False(computev1alpha1.ConditionPlaced, ref.reason, ref.message), s.now)
		s.updates = append(s.updates, u)
	}
}

func newUpdate(inst *computev1alpha1.MacOSInstance) instanceUpdate {
	return instanceUpdate{before: inst.DeepCopy(), inst: inst}
}

func (u *instanceUpdate) set(c metav1.Condition, now metav1.Time) {
	conditions.Set(&u.inst.Status.Conditions, c, u.inst.Generation, now)
	u.placedCond = c
}
