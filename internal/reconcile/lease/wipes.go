package lease

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	computev1alpha1 "github.com/boualleiguie/macrack-operator/api/compute/v1alpha1"
	leasingv1alpha1 "github.com/boualleiguie/macrack-operator/api/leasing/v1alpha1"
)

// instanceHandler enqueues an instance's lease on every change, and, when
// the instance is gone with its wipe evidence, tells the tenant on the lease:
// agents write no Events in tenants' namespaces, so the operator does. The
// evidence also stays in the chassis' history (internal/chassis).
func (r *Reconciler) instanceHandler() handler.TypedEventHandler[client.Object, reconcile.Request] {
	enqueue := handler.EnqueueRequestsFromMapFunc(leaseOfInstance)
	return handler.Funcs{
		CreateFunc: func(ctx context.Context, e event.CreateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			enqueue.Create(ctx, e, q)
		},
		UpdateFunc: func(ctx context.Context, e event.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			enqueue.Update(ctx, e, q)
		},
		DeleteFunc: func(ctx context.Context, e event.DeleteEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			if inst, ok := e.Object.(*computev1alpha1.MacOSInstance); ok {
				r.recordWipe(ctx, inst)
			}
			enqueue.Delete(ctx, e, q)
		},
		GenericFunc: func(ctx context.Context, e event.GenericEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			enqueue.Generic(ctx, e, q)
		},
	}
}

// recordWipe emits DiskWiped on the lease of a deleted instance that carries
// its wipe evidence.
func (r *Reconciler) recordWipe(ctx context.Context, inst *computev1alpha1.MacOSInstance) {
	rt := inst.Status.Runtime
	if rt == nil || rt.Wipe == nil {
		return
	}
	lease := &leasingv1alpha1.MacNodeLease{}
	if err := r.Client.Get(ctx, client.ObjectKey{Namespace: inst.Namespace, Name: inst.Spec.LeaseName}, lease); err != nil {
		ctrl.LoggerFrom(ctx).Info("The lease of a wiped instance is gone; the chassis' history keeps the evidence",
			"MacOSInstance", client.ObjectKeyFromObject(inst), "error", err.Error())
		return
	}
	w := rt.Wipe
	files := "no files (the instance never had a disk)"
	if len(w.Files) > 0 {
		files = strings.Join(w.Files, ", ")
	}
	r.Recorder.Eventf(lease, inst, corev1.EventTypeNormal, leasingv1alpha1.ReasonDiskWiped, "Wipe", "%s",
		fmt.Sprintf("the disk of instance %s (%s) was destroyed at %s: %s, %d bytes allocated, by %s",
			inst.Name, inst.UID, w.WipedAt.UTC().Format("2006-01-02T15:04:05Z"), files, w.Bytes, w.Method))
}
