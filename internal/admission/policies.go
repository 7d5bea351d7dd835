package admission

import (
	"context"
	"fmt"
	"strconv"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	flowcontrolv1 "k8s.io/api/flowcontrol/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
	"github.com/boualleiguie/macrack-operator/internal/conflict"
	"github.com/boualleiguie/macrack-operator/internal/policy"
)

// +kubebuilder:rbac:groups=admissionregistration.k8s.io,resources=validatingadmissionpolicies;validatingadmissionpolicybindings,verbs=get;list;watch;create;update;patch
// +kubebuilder:rbac:groups="",resources=configmaps,verbs=get;list;watch;create;update;patch

// FieldOwner is the operator's server-side apply field manager.
const FieldOwner = "macrack-operator"

// SerialAnnotation records, on every object the applier writes, the serial
// of the bundle it came from.
const SerialAnnotation = fleetv1alpha1.PolicySerialAnnotation

// partOf selects the objects MacRack installs.
const partOf = "app.kubernetes.io/part-of"

// PolicyApplier applies the params ConfigMap, every
// ValidatingAdmissionPolicy with its binding, the FlowSchemas of the
// agents' heartbeats, of the operator and of its webhook, and the webhook's
// priority level, with server-side apply, and
// keeps them: it watches them and applies again whatever is deleted or
// edited. An OLM bundle can carry
// neither VAPs nor FlowSchemas, so the operator installs the very policies
// its engine compiled. It runs on the leader only, and never replaces an
// object a newer bundle (a higher serial) wrote, so that two replicas of a
// rolling upgrade don't fight.
type PolicyApplier struct {
	Client    client.Client
	Engine    *policy.Engine
	Namespace string
	Params    policy.Params
	// Reader reads the live objects. SetupWithManager sets it to the
	// applier's own cache, narrowed to them.
	Reader client.Reader
}

// applyKey is the one request the applier reconciles: every event means
// "make the whole set as it should be".
var applyKey = reconcile.Request{}

// conflictRetry is how soon an apply that lost a race reads again, should
// no event of the winning write arrive first.
const conflictRetry = 200 * time.Millisecond

// SetupWithManager watches the applier's objects through a cache of their
// own, narrowed to them (the manager's would hold every ConfigMap of the
// cluster), and applies once at start.
func (a *PolicyApplier) SetupWithManager(mgr ctrl.Manager) error {
	selector := labels.SelectorFromSet(labels.Set{partOf: "macrack"})
	c, err := cache.New(mgr.GetConfig(), cache.Options{
		Scheme: mgr.GetScheme(),
		ByObject: map[client.Object]cache.ByObject{
			&admissionregistrationv1.ValidatingAdmissionPolicy{}:        {Label: selector},
			&admissionregistrationv1.ValidatingAdmissionPolicyBinding{}: {Label: selector},
			&flowcontrolv1.FlowSchema{}:                                 {Label: selector},
			&flowcontrolv1.PriorityLevelConfiguration{}:                 {Label: selector},
			&corev1.ConfigMap{}: {
				Namespaces: map[string]cache.Config{a.Namespace: {}},
				Field:      fields.OneTermEqualSelector("metadata.name", policy.ParamsConfigMapName),
			},
		},
	})
	if err != nil {
		return fmt.Errorf("creating the admission policies' cache: %w", err)
	}
	if err := mgr.Add(c); err != nil {
		return err
	}
	a.Reader = c
	all := handler.EnqueueRequestsFromMapFunc(func(context.Context, client.Object) []reconcile.Request {
		return []reconcile.Request{applyKey}
	})
	start := make(chan event.GenericEvent, 1)
	start <- event.GenericEvent{Object: &corev1.ConfigMap{}}
	return ctrl.NewControllerManagedBy(mgr).
		Named("admission-policies").
		WatchesRawSource(source.Kind(c, client.Object(&admissionregistrationv1.ValidatingAdmissionPolicy{}), all)).
		WatchesRawSource(source.Kind(c, client.Object(&admissionregistrationv1.ValidatingAdmissionPolicyBinding{}), all)).
		WatchesRawSource(source.Kind(c, client.Object(&flowcontrolv1.FlowSchema{}), all)).
		WatchesRawSource(source.Kind(c, client.Object(&flowcontrolv1.PriorityLevelConfiguration{}), all)).
		WatchesRawSource(source.Kind(c, client.Object(&corev1.ConfigMap{}), all)).
		WatchesRawSource(source.Channel(start, all)).
		Complete(conflict.Quiet(a))
}

// desired are the objects the applier keeps, as server-side apply
// configurations.
func (a *PolicyApplier) desired() ([]*unstructured.Unstructured, error) {
	// The priority level before the FlowSchema that names it: a FlowSchema
	// whose level is missing is dangling, and the API server ignores it.
	objs := []runtime.Object{policy.ParamsConfigMap(a.Namespace, a.Params), HeartbeatFlowSchema(a.Params.AgentsNamespace),
		OperatorFlowSchema(a.Params.OperatorUsername), AdmissionPriorityLevelConfiguration(), AdmissionFlowSchema(a.Params.OperatorUsername)}
	aps, err := a.Engine.AdmissionPolicies(a.Params)
	if err != nil {
		return nil, err
	}
	for _, ap := range aps {
		objs = append(objs, ap.Policy, ap.Binding)
	}
	out := make([]*unstructured.Unstructured, 0, len(objs))
	for _, o := range objs {
		m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(o)
		if err != nil {
			return nil, fmt.Errorf("converting %T: %w", o, err)
		}
		u := &unstructured.Unstructured{Object: m}
		delete(u.Object, "status")
		unstructured.RemoveNestedField(u.Object, "metadata", "creationTimestamp")
		ann := u.GetAnnotations()
		if ann == nil {
			ann = map[string]string{}
		}
		ann[SerialAnnotation] = strconv.FormatInt(a.Engine.Serial(), 10)
		u.SetAnnotations(ann)
		out = append(out, u)
	}
	return out, nil
}

// Reconcile applies every object that is missing, edited, or older than
// this bundle. An object it read is applied only at the resourceVersion it
// read: the cache may lag a newer bundle's write, and a blind forced apply
// would undo it. A conflict requeues, and the next read sees the write.
func (a *PolicyApplier) Reconcile(ctx context.Context, _ reconcile.Request) (reconcile.Result, error) {
	log := ctrl.LoggerFrom(ctx)
	objs, err := a.desired()
	if err != nil {
		return reconcile.Result{}, reconcile.TerminalError(err)
	}
	for _, u := range objs {
		live := &unstructured.Unstructured{}
		live.SetGroupVersionKind(u.GroupVersionKind())
		err := a.Reader.Get(ctx, client.ObjectKeyFromObject(u), live)
		switch {
		case apierrors.IsNotFound(err):
		case err != nil:
			return reconcile.Result{}, fmt.Errorf("reading %s %s: %w", u.GetKind(), u.GetName(), err)
		default:
			if serial, ok := liveSerial(live); ok && serial > a.Engine.Serial() {
				log.Info("Newer admission policy installed; leaving it", "kind", u.GetKind(), "name", u.GetName(),
					"serial", serial, "ownSerial", a.Engine.Serial())
				continue
			}
			u.SetResourceVersion(live.GetResourceVersion())
		}
		err = a.Client.Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner(FieldOwner), client.ForceOwnership)
		if apierrors.IsConflict(err) {
			log.Info("Admission policy object changed since it was read; reading it again", "kind", u.GetKind(), "name", u.GetName(),
				"resourceVersion", live.GetResourceVersion())
			return reconcile.Result{RequeueAfter: conflictRetry}, nil
		}
		if err != nil {
			return reconcile.Result{}, fmt.Errorf("applying %s %s: %w", u.GetKind(), u.GetName(), err)
		}
		if live.GetResourceVersion() == "" {
			log.Info("Applied admission policy object", "kind", u.GetKind(), "name", u.GetName(),
				"revision", a.Engine.Revision(), "serial", a.Engine.Serial())
		}
	}
	return reconcile.Result{}, nil
}

func liveSerial(u *unstructured.Unstructured) (int64, bool) {
	s, ok := u.GetAnnotations()[SerialAnnotation]
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseInt(s, 10, 64)
	return n, err == nil
}
