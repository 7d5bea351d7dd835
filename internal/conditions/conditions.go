// Package conditions sets metav1.Conditions through one setter, so that every
// controller stamps ObservedGeneration, keeps LastTransitionTime unless the
// status flips, and keeps a stable order.
package conditions

import (
	"sort"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Set sets one condition on list. now stamps LastTransitionTime when the
// status flips (or the condition is new); the list stays sorted by type.
// It reports whether the status flipped, so a caller can emit an Event.
func Set(list *[]metav1.Condition, c metav1.Condition, generation int64, now metav1.Time) bool {
	c.ObservedGeneration = generation
	prev := meta.FindStatusCondition(*list, c.Type)
	flipped := prev == nil || prev.Status != c.Status
	if flipped {
		c.LastTransitionTime = now
	} else {
		c.LastTransitionTime = prev.LastTransitionTime
	}
	meta.RemoveStatusCondition(list, c.Type)
	*list = append(*list, c)
	sort.SliceStable(*list, func(i, j int) bool { return (*list)[i].Type < (*list)[j].Type })
	return flipped
}

// True, False and Unknown build a condition.
func True(t, reason, message string) metav1.Condition {
	return metav1.Condition{Type: t, Status: metav1.ConditionTrue, Reason: reason, Message: message}
}

// False builds a False condition.
func False(t, reason, message string) metav1.Condition {
	return metav1.Condition{Type: t, Status: metav1.ConditionFalse, Reason: reason, Message: message}
}

// Unknown builds an Unknown condition.
func Unknown(t, reason, message string) metav1.Condition {
	return metav1.Condition{Type: t, Status: metav1.ConditionUnknown, Reason: reason, Message: message}
}

// IsTrue reports whether the condition of type t is True.
func IsTrue(list []metav1.Condition, t string) bool {
	return meta.IsStatusConditionTrue(list, t)
}
