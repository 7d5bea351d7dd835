// Package taints computes the operator's changes to a Node's taints and
// labels. It touches only macrack.io/ taints and keeps every other taint, in
// its place: the API server and other controllers own those.
package taints

import (
	"strings"

	corev1 "k8s.io/api/core/v1"

	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
)

// Keys and labels the operator owns on Nodes (defined in api/fleet/v1alpha1).
const (
	Prefix      = fleetv1alpha1.Prefix
	UnleasedKey = fleetv1alpha1.UnleasedTaint
	LeasedKey   = fleetv1alpha1.LeasedTaint
	// QuarantinedKey is added, beside the lease's taint, while the
	// chassis is in the quarantine loop.
	QuarantinedKey = fleetv1alpha1.QuarantinedTaint
	TenantLabel    = fleetv1alpha1.TenantLabel
	SerialLabel    = fleetv1alpha1.SerialLabel
	ClassLabel     = fleetv1alpha1.ClassLabel
)

// Desired is the macrack.io/ taint set for a node: unleased when tenant is
// empty, leased=<tenant> otherwise.
func Desired(tenant string) []corev1.Taint {
	if tenant == "" {
		return []corev1.Taint{{Key: UnleasedKey, Effect: corev1.TaintEffectNoSchedule}}
	}
	return []corev1.Taint{{Key: LeasedKey, Value: tenant, Effect: corev1.TaintEffectNoSchedule}}
}

// Quarantined adds the macrack.io/quarantined:NoSchedule taint to desired:
// a quarantined chassis keeps its lease's taint, and takes nothing new.
func Quarantined(desired []corev1.Taint) []corev1.Taint {
	return append(desired, corev1.Taint{Key: QuarantinedKey, Effect: corev1.TaintEffectNoSchedule})
}

// Apply returns current with its macrack.io/ taints replaced by desired.
// Foreign taints keep their order; desired taints go at the end. changed
// reports whether anything differs.
func Apply(current, desired []corev1.Taint) (out []corev1.Taint, changed bool) {
	var mine []corev1.Taint
	for _, t := range current {
		if strings.HasPrefix(t.Key, Prefix) {
			mine = append(mine, t)
			continue
		}
		out = append(out, t)
	}
	out = append(out, desired...)
	return out, !sameSet(mine, desired)
}

func sameSet(a, b []corev1.Taint) bool {
	if len(a) != len(b) {
		return false
	}
	for _, x := range a {
		found := false
		for _, y := range b {
			if x.Key == y.Key && x.Value == y.Value && x.Effect == y.Effect {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}

// DesiredLabels is the macrack.io/ label set of a chassis' Node: its
// serial and class, and the tenant while it is leased. The operator writes
// every macrack.io/ label of a Node, from the MacNode; an agent writes none
// (agent.scope), so a compromised one cannot pass for another chassis.
func DesiredLabels(serial, class, tenant string) map[string]string {
	l := map[string]string{SerialLabel: serial, ClassLabel: class}
	if tenant != "" {
		l[TenantLabel] = tenant
	}
	return l
}

// Labels returns labels with its macrack.io/ labels replaced by desired:
// one that desired lacks is removed, and every other label is kept.
// changed reports whether anything differs. labels is not modified.
func Labels(labels, desired map[string]string) (out map[string]string, changed bool) {
	out = make(map[string]string, len(labels)+len(desired))
	for k, v := range labels {
		if strings.HasPrefix(k, Prefix) {
			if want, ok := desired[k]; !ok || want != v {
				changed = true
			}
			continue
		}
		out[k] = v
	}
	for k, v := range desired {
		if have, ok := labels[k]; !ok || have != v {
			changed = true
		}
		out[k] = v
	}
	return out, changed
}
