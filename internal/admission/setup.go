package admission

import (
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	leasingv1alpha1 "github.com/boualleiguie/macrack-operator/api/leasing/v1alpha1"
	"github.com/boualleiguie/macrack-operator/internal/audit"
	"github.com/boualleiguie/macrack-operator/internal/inventory"
	"github.com/boualleiguie/macrack-operator/internal/policy"
)

// Setup registers the webhooks on the manager's webhook server. The
// inventory reads the manager's cache, whose indexes must be registered.
func Setup(mgr ctrl.Manager, engine *policy.Engine, clk clock.PassiveClock, params policy.Params, metrics *Metrics, denials *audit.Denials) error {
	if err := ctrl.NewWebhookManagedBy(mgr, &leasingv1alpha1.MacNodeLease{}).
		WithDefaulter(LeaseDefaulter{}).
		Complete(); err != nil {
		return err
	}
	mgr.GetWebhookServer().Register(ValidatePath, &webhook.Admission{Handler: &PolicyValidator{
		Engine:    engine,
		Inventory: inventory.Builder{Reader: mgr.GetCache()},
		Live:      mgr.GetAPIReader(),
		Clock:     clk,
		Params:    params,
		Metrics:   metrics,
		Denials:   denials,
	}})
	return nil
}
