package admission

import (
	"context"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	computev1alpha1 "github.com/boualleiguie/macrack-operator/api/compute/v1alpha1"
	leasingv1alpha1 "github.com/boualleiguie/macrack-operator/api/leasing/v1alpha1"
	"github.com/boualleiguie/macrack-operator/internal/audit/denial"
	"github.com/boualleiguie/macrack-operator/internal/conflict"
	"github.com/boualleiguie/macrack-operator/internal/inventory"
	"github.com/boualleiguie/macrack-operator/internal/policy"
)

// Setup registers the webhooks on the manager's webhook server. The
// inventory reads the manager's cache, whose indexes must be registered.
// Both defaulters are registered whatever finalizers they give: the
// webhook configuration names their paths.
func Setup(mgr ctrl.Manager, engine *policy.Engine, clk clock.PassiveClock, params policy.Params, metrics *Metrics, denials *denial.Buffer, defaulters Defaulters) error {
	if err := ctrl.NewWebhookManagedBy(mgr, &leasingv1alpha1.MacNodeLease{}).
		WithDefaulter(defaulters.Lease).
		Complete(); err != nil {
		return err
	}
	if err := ctrl.NewWebhookManagedBy(mgr, &computev1alpha1.MacOSInstance{}).
		WithDefaulter(defaulters.Instance).
		Complete(); err != nil {
		return err
	}
	mgr.GetWebhookServer().Register(ValidatePath, &webhook.Admission{Handler: &PolicyValidator{
		Engine:       engine,
		Inventory:    inventory.Builder{Reader: mgr.GetCache()},
		Live:         mgr.GetAPIReader(),
		Clock:        clk,
		Params:       params,
		Metrics:      metrics,
		Denials:      denials,
		Reservations: NewReservations(mgr.GetAPIReader(), mgr.GetClient()),
		Reviews:      mgr.GetClient(),
	}})
	return nil
}

// SetupSweeper adds the operator's pass over the leases' reservations: on
// each new instance, and every half TTL of the business clock.
func SetupSweeper(mgr ctrl.Manager, clk clock.Clock) error {
	s := &Sweeper{
		Reservations: NewReservations(mgr.GetAPIReader(), mgr.GetClient()),
		Cache:        mgr.GetCache(), Clock: clk, Period: leasingv1alpha1.ReservationTTL / 2,
	}
	if err := mgr.Add(s); err != nil {
		return err
	}
	hasReservations := predicate.NewPredicateFuncs(func(o client.Object) bool {
		l, ok := o.(*leasingv1alpha1.MacNodeLease)
		return ok && len(l.Status.Reservations) > 0
	})
	created := predicate.Funcs{
		CreateFunc:  func(event.CreateEvent) bool { return true },
		UpdateFunc:  func(event.UpdateEvent) bool { return false },
		DeleteFunc:  func(event.DeleteEvent) bool { return false },
		GenericFunc: func(event.GenericEvent) bool { return false },
	}
	return ctrl.NewControllerManagedBy(mgr).Named("reservations").
		For(&leasingv1alpha1.MacNodeLease{}, builder.WithPredicates(hasReservations)).
		Watches(&computev1alpha1.MacOSInstance{}, handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
			i, ok := o.(*computev1alpha1.MacOSInstance)
			if !ok || i.Spec.LeaseName == "" {
				return nil
			}
			lease := types.NamespacedName{Namespace: i.Namespace, Name: i.Spec.LeaseName}
			s.Seen(lease, i.UID)
			return []reconcile.Request{{NamespacedName: lease}}
		}), builder.WithPredicates(created)).
		Complete(conflict.Quiet(s))
}
