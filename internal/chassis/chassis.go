// Package chassis holds the two steps of giving a chassis back that both the
// lease controller (on a lease's release) and the node controller (on a
// binding whose lease is gone) take: deleting the lease's instances, and
// clearing the MacNode's binding into its history.
package chassis

import (
	"context"
	"fmt"
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
// agent to stop the VM and wipe the disk: those that still carry
// macrack.io/disk-wipe. An instance held only by someone else's finalizer
// has had its disk wiped; what keeps it is its owner's business, and it
// holds no chassis.
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
		if controllerutil.ContainsFinalizer(inst, fleetv1alpha1.DiskWipeFinalizer) {
			awaiting++
		}
	}
	return awaiting, nil
}

// Freed returns node with its binding and slots cleared and the lease
// recorded in its history. It goes back through Enrolled: the node
// controller moves it to Ready only if its facts still meet its class.
func Freed(node *fleetv1alpha1.MacNode, now time.Time) *fleetv1alpha1.MacNode {
	out := node.DeepCopy()
	if b := node.Status.Binding; b != nil {
		out.Status.History = append(out.Status.History, fleetv1alpha1.LeaseRecord{
			LeaseNamespace: b.LeaseNamespace, LeaseName: b.LeaseName, LeaseUID: b.LeaseUID,
			BoundAt: b.BoundAt, ReleasedAt: metav1.NewTime(now.UTC().Truncate(time.Second)),
		})
		if n := len(out.Status.History); n > HistoryLimit {
			out.Status.History = out.Status.History[n-HistoryLimit:]
		}
	}
	out.Status.Binding = nil
	out.Status.Slots = nil
	out.Status.Phase = fleetv1alpha1.MacNodeEnrolled
	return out
}
