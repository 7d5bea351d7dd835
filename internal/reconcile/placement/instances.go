package placement

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/boualleiguie/macrack-operator/internal/patch"
)

// patchInstances writes each waiting instance once, after the MacNode's
// slots landed. A placement applies its own fields alone (nodeName and
// Placed), under placement's field manager: the instance's other writers,
// the exporter's journal and finalizer in the same moments, do not refuse
// it, and the slot it names is already claimed. A refusal only says why
// the instance waits, and is not written again while it says the same.
func (r *Reconciler) patchInstances(ctx context.Context, s *scope) error {
	mn := s.node
	for _, u := range s.updates {
		if !u.placed && !placedChanged(u) {
			continue
		}
		if u.placed {
			if on, ok := r.placedOn.Load(u.inst.UID); ok && on == mn.Name {
				continue // placed; the cache has not shown it yet
			}
		}
		var err error
		if u.placed {
			err = patch.ApplyStatus(ctx, r.Client, u.inst, FieldOwner, map[string]any{
				"nodeName": mn.Name, "conditions": []metav1.Condition{*meta.FindStatusCondition(u.inst.Status.Conditions, u.placedCond.Type)}})
		} else {
			err = patch.NewHelper(u.before, r.Client).Patch(ctx, u.inst)
		}
		if err != nil {
			if !u.placed {
				if err := client.IgnoreNotFound(err); err != nil {
					return fmt.Errorf("telling %s/%s why it waits: %w", u.inst.Namespace, u.inst.Name, err)
				}
				continue // deleted meanwhile: nothing waits any more
			}
			return fmt.Errorf("placing %s/%s on %s: %w", u.inst.Namespace, u.inst.Name, mn.Name, err)
		}
		if u.placed {
			r.placedOn.Store(u.inst.UID, mn.Name)
			r.Recorder.Eventf(u.inst, mn, corev1.EventTypeNormal, "Placed", "Place", "Placed on chassis %s (%s)", mn.Spec.Serial, mn.Name)
		} else {
			r.Recorder.Eventf(u.inst, nil, corev1.EventTypeWarning, u.placedCond.Reason, "Place", "%s", u.placedCond.Message)
		}
	}
	return nil
}

// placedChanged reports whether a refusal changes what the instance's
// Placed condition says: its status, reason or message. A new generation
// alone is no news to the tenant, and no write.
func placedChanged(u instanceUpdate) bool {
	was := meta.FindStatusCondition(u.before.Status.Conditions, u.placedCond.Type)
	return was == nil || was.Status != u.placedCond.Status || was.Reason != u.placedCond.Reason || was.Message != u.placedCond.Message
}
