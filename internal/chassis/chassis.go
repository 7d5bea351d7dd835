// Package chassis gives a chassis back to the pool, the one way both the
// lease controller (on a lease's release) and the node controller (on a
// binding whose lease is gone) do it: the lease's instances deleted and
// wiped, the chassis reported empty by its agent, then the binding cleared
// into the history.
package chassis

import (
	"context"
	"fmt"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	computev1alpha1 "github.com/boualleiguie/macrack-operator/api/compute/v1alpha1"
	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
	"github.com/boualleiguie/macrack-operator/internal/index"
)

// HistoryLimit bounds MacNode.status.history.
const HistoryLimit = 32

// DeleteInstances deletes every instance of the lease namespace/name that is
// not already being deleted, and returns how many still wait for their host
// agent to stop the VM and wipe the disk (AwaitsWipe). An instance held
// only by someone else's finalizer, or by the agent's with its wipe on
// record, has had its disk wiped; what keeps it is its owner's business,
// and it holds no chassis.
func DeleteInstances(ctx context.Context, c client.Client, namespace, name string) (int, error) {
	list := &computev1alpha1.MacOSInstanceList{}
	if err := c.List(ctx, list, client.InNamespace(namespace),
		client.MatchingFields{index.InstanceByLease: index.LeaseKey(namespace, name)}); err != nil {
		return 0, fmt.Errorf("listing instances of %s/%s: %w", namespace, name, err)
	}
	awaiting := 0
	for i := range list.Items {
		inst := &list.Items[i]
		if inst.DeletionTimestamp.IsZero() {
			if err := c.Delete(ctx, inst); client.IgnoreNotFound(err) != nil {
				return 0, fmt.Errorf("deleting instance %s/%s: %w", inst.Namespace, inst.Name, err)
			}
		}
		if AwaitsWipe(inst) {
			awaiting++
		}
	}
	return awaiting, nil
}

// AwaitsWipe reports whether inst waits for its agent to stop its VM and
// wipe its disk: it carries macrack.io/disk-wipe, and no wipe is on record.
// A wiped instance may keep the finalizer a while longer, until the audit
// exporter takes it off with its own last records (issue 39); it holds no
// VM and no disk by then.
func AwaitsWipe(inst *computev1alpha1.MacOSInstance) bool {
	return !Wiped(inst) && controllerutil.ContainsFinalizer(inst, fleetv1alpha1.DiskWipeFinalizer)
}

// Wiped reports whether inst's disk wipe is on record: its agent wrote
// status.runtime.wipedAt, which instance.wipe requires before
// macrack.io/disk-wipe goes, and writes nothing after it.
func Wiped(inst *computev1alpha1.MacOSInstance) bool {
	return inst.Status.Runtime != nil && inst.Status.Runtime.WipedAt != nil
}

// Outcome is where a release stands after one pass.
type Outcome struct {
	// Freed is the MacNode as written, once the chassis is back in the pool
	// (or, retired, let go).
	Freed *fleetv1alpha1.MacNode
	// AwaitingWipe counts the instances whose agent has yet to stop their
	// VM and wipe their disk.
	AwaitingWipe int
	// Slots counts the slots still claimed on the chassis: placement owns
	// them, and frees each once its instance is gone.
	Slots int
	// Holds says what the chassis still holds, by its agent's report, when
	// that is what keeps it.
	Holds string
}

// Release takes one step of giving node back for the lease
// namespace/name: it deletes the lease's instances, waits for their
// wipes, for placement to free their slots, then for the agent to report
// the chassis empty, and then writes the MacNode freed. The caller asks
// the policies first.
//
// A retired chassis is let go without waiting for its agent, which is
// dead: it never returns to the pool, and what its disks hold is in
// status.unwipedDisks.
func Release(ctx context.Context, c client.Client, node *fleetv1alpha1.MacNode, namespace, name string, now time.Time) (Outcome, error) {
	awaiting, err := DeleteInstances(ctx, c, namespace, name)
	if err != nil {
		return Outcome{}, err
	}
	if awaiting > 0 {
		return Outcome{AwaitingWipe: awaiting}, nil
	}
	// The binding is cleared only once the slots are empty: slots are
	// placement's alone to write, and a binding gone first would let
	// another lease claim a chassis with slots still taken.
	if n := len(node.Status.Slots); n > 0 {
		return Outcome{Slots: n}, nil
	}
	if !node.Spec.Retired {
		if holds := Holds(node); holds != "" {
			return Outcome{Holds: holds}, nil
		}
	}
	freed := Freed(node, now)
	// Only the binding and the history go, with the resourceVersion read: a
	// whole status would also write back the agent's report as this
	// operator's types encode it.
	if err := c.Status().Patch(ctx, freed, client.MergeFromWithOptions(node, client.MergeFromWithOptimisticLock{})); err != nil {
		return Outcome{}, fmt.Errorf("freeing MacNode %s: %w", node.Name, err)
	}
	return Outcome{Freed: freed}, nil
}

// Holds says what the chassis holds by its agent's last report, or "" when
// the agent reports it empty. A chassis whose agent has not reported is not
// empty: nothing says so.
func Holds(node *fleetv1alpha1.MacNode) string {
	var inv *fleetv1alpha1.HostInventory
	if node.Status.Reported != nil {
		inv = node.Status.Reported.Inventory
	}
	switch {
	case inv == nil:
		return fmt.Sprintf("the agent of chassis %s has not reported what it holds", node.Spec.Serial)
	case inv.Empty():
		return ""
	}
	var held []string
	if n := len(inv.VMs); n > 0 {
		uids := make([]string, 0, n)
		for _, vm := range inv.VMs {
			uids = append(uids, fmt.Sprintf("%s (%s)", vm.UID, vm.State))
		}
		held = append(held, fmt.Sprintf("%d VM(s): %s", n, strings.Join(uids, ", ")))
	}
	if n := len(inv.Disks); n > 0 {
		uids := make([]string, 0, n)
		for _, d := range inv.Disks {
			uids = append(uids, string(d))
		}
		held = append(held, fmt.Sprintf("%d instance disk(s): %s", n, strings.Join(uids, ", ")))
	}
	return fmt.Sprintf("chassis %s still holds %s, by its agent's report of %s", node.Spec.Serial,
		strings.Join(held, " and "), inv.ObservedAt.UTC().Format(time.RFC3339))
}

// Freed returns node with its binding cleared and the lease recorded in
// its history: the binding and the history are the lease controller's.
// The slots are placement's, freed before; the phase is the node
// controller's, which derives it from the binding gone, and moves the
// chassis to Ready only if its facts still meet its class.
func Freed(node *fleetv1alpha1.MacNode, now time.Time) *fleetv1alpha1.MacNode {
	out := node.DeepCopy()
	if b := node.Status.Binding; b != nil {
		out.Status.History = append(out.Status.History, fleetv1alpha1.LeaseRecord{
			LeaseNamespace: b.LeaseNamespace, LeaseName: b.LeaseName, LeaseUID: b.LeaseUID,
			BoundAt: b.BoundAt, ReleasedAt: metav1.NewTime(now.UTC().Truncate(time.Second)),
			Wipes: wipesOf(node, b),
		})
		if n := len(out.Status.History); n > HistoryLimit {
			out.Status.History = out.Status.History[n-HistoryLimit:]
		}
	}
	out.Status.Binding = nil
	return out
}

// wipeClockSkew is how far behind the operator's clock the agent's may run
// and its wipes still count for the lease bound since.
const wipeClockSkew = 5 * time.Minute

// wipesOf is the agent's wipe evidence for the bound lease's instances, for
// the chassis' history: the agent's report keeps only the latest.
func wipesOf(node *fleetv1alpha1.MacNode, b *fleetv1alpha1.Binding) []fleetv1alpha1.WipeEvidence {
	if node.Status.Reported == nil {
		return nil
	}
	var out []fleetv1alpha1.WipeEvidence
	for _, w := range node.Status.Reported.Wipes {
		// The agent's clock stamps wipedAt, the operator's boundAt: allow
		// them to disagree by wipeClockSkew.
		if w.Namespace == b.LeaseNamespace && w.LeaseName == b.LeaseName && w.WipedAt.Add(wipeClockSkew).After(b.BoundAt.Time) {
			out = append(out, w)
		}
	}
	if n := len(out); n > fleetv1alpha1.MaxWipeRecords {
		out = out[n-fleetv1alpha1.MaxWipeRecords:]
	}
	return out
}
