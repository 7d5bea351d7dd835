package placement

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	computev1alpha1 "github.com/boualleiguie/macrack-operator/api/compute/v1alpha1"
)

// A placeholder goes at once, with a grace period of 0: no kubelet runs it,
// so none would end a graceful deletion, and a Pod left Terminating would be
// deleted again on every pass (issue 17). One already going at once is left
// to go.
func TestAPlaceholderIsDeletedAtOnceAndOnce(t *testing.T) {
	r, c := setup(t, 2, instance("a", time.Second))
	reconcileNode(t, r)
	a := get(t, c, "a")
	a.Status.Runtime = &computev1alpha1.RuntimeStatus{Phase: computev1alpha1.VMRunning}
	if err := c.Status().Update(context.Background(), a); err != nil {
		t.Fatal(err)
	}
	reconcileNode(t, r)
	var deletes []*client.DeleteOptions
	r.Client = interceptor.NewClient(c.(client.WithWatch), interceptor.Funcs{
		Delete: func(ctx context.Context, cl client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
			o := &client.DeleteOptions{}
			o.ApplyOptions(opts)
			deletes = append(deletes, o)
			return cl.Delete(ctx, obj, opts...)
		},
	})
	a = get(t, c, "a")
	a.Status.Runtime.Phase = computev1alpha1.VMStopped
	if err := c.Status().Update(context.Background(), a); err != nil {
		t.Fatal(err)
	}
	reconcileNode(t, r)
	if len(deletes) != 1 || deletes[0].GracePeriodSeconds == nil || *deletes[0].GracePeriodSeconds != 0 {
		t.Fatalf("deletes %+v, want one, with a grace period of 0", deletes)
	}

	// A placeholder the cache still shows going at once (the API server
	// marks it deleting before it removes it) is not deleted again.
	going := placeholder("macrack-system", "c02a", a)
	going.Name = "vm-going"
	going.Labels[InstanceUIDLabel] = "uid-gone"
	if err := c.Create(context.Background(), going); err != nil {
		t.Fatal(err)
	}
	deletes = nil
	r.Client = interceptor.NewClient(c.(client.WithWatch), interceptor.Funcs{
		List: func(ctx context.Context, cl client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
			if err := cl.List(ctx, list, opts...); err != nil {
				return err
			}
			if pods, ok := list.(*corev1.PodList); ok {
				for i := range pods.Items {
					if pods.Items[i].Name == going.Name {
						pods.Items[i].DeletionGracePeriodSeconds = ptr.To(int64(0))
						pods.Items[i].DeletionTimestamp = &metav1.Time{Time: t0}
					}
				}
			}
			return nil
		},
		Delete: func(ctx context.Context, cl client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
			deletes = append(deletes, &client.DeleteOptions{})
			return cl.Delete(ctx, obj, opts...)
		},
	})
	reconcileNode(t, r)
	if len(deletes) != 0 {
		t.Fatalf("a placeholder going at once was deleted again: %d deletes", len(deletes))
	}
}
