// Package admission serves MacRack's admission webhooks: a defaulter for
// leases, and one validating handler that asks internal/policy about every
// write to a MacRack object, its status, its deletion and its finalizers.
package admission

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/boualleiguie/macrack-operator/internal/audit/denial"
	"github.com/boualleiguie/macrack-operator/internal/inventory"
	"github.com/boualleiguie/macrack-operator/internal/policy"
)

// ValidatePath is where the policy handler is served.
const ValidatePath = "/validate-macrack"

// +kubebuilder:webhook:path=/validate-macrack,mutating=false,failurePolicy=fail,sideEffects=None,groups=leasing.macrack.io,resources=macnodeleases;macnodeleases/status,verbs=create;update;delete,versions=v1alpha1,name=vmacnodelease.macrack.io,admissionReviewVersions=v1
// +kubebuilder:webhook:path=/validate-macrack,mutating=false,failurePolicy=fail,sideEffects=NoneOnDryRun,groups=compute.macrack.io,resources=macosinstances;macosinstances/status,verbs=create;update;delete,versions=v1alpha1,name=vmacosinstance.macrack.io,admissionReviewVersions=v1,timeoutSeconds=10
// +kubebuilder:webhook:path=/validate-macrack,mutating=false,failurePolicy=fail,sideEffects=None,groups=fleet.macrack.io,resources=macnodes;macnodes/status,verbs=create;update;delete,versions=v1alpha1,name=vmacnode.macrack.io,admissionReviewVersions=v1
// +kubebuilder:webhook:path=/validate-macrack,mutating=false,failurePolicy=fail,sideEffects=None,groups=fleet.macrack.io,resources=macnodeclasses,verbs=create;update;delete,versions=v1alpha1,name=vmacnodeclass.macrack.io,admissionReviewVersions=v1
// +kubebuilder:webhook:path=/validate-macrack,mutating=false,failurePolicy=fail,sideEffects=None,groups=workloads.macrack.io,resources=gitlabrunners,verbs=create;update,versions=v1alpha1,name=vgitlabrunner.macrack.io,admissionReviewVersions=v1

// PolicyValidator is the validating handler. It builds the policy input from
// the request, with now from Clock and the inventory from the cache indexes,
// and answers with the policy's decision. It fails closed.
type PolicyValidator struct {
	Engine    *policy.Engine
	Inventory inventory.Builder
	// Live, if set, reads objects from the API server: a denial is decided
	// again with the related objects read live, and only that decision
	// stands (the cache may lag behind what the requester has seen).
	Live    client.Reader
	Clock   clock.PassiveClock
	Params  policy.Params
	Metrics *Metrics
	// Denials, if set, takes each refusal for the audit stream.
	Denials *denial.Buffer
	// Reservations, if set, decide each new instance exactly, on live
	// reads and the lease's reservations, and record its admission.
	Reservations *Reservations
	// Reviews creates the SubjectAccessReviews that ask whether a
	// GitLabRunner's requester may get its token Secret (runner.secret).
	// Unset, every such request is refused.
	Reviews client.Writer
}

// Handle implements admission.Handler.
func (v *PolicyValidator) Handle(ctx context.Context, req admission.Request) (resp admission.Response) {
	start := time.Now() // latency is wall time, whatever the business clock says
	log := ctrl.LoggerFrom(ctx).WithValues("kind", req.Kind.Kind, "operation", req.Operation, "subResource", req.SubResource)
	defer func() {
		if v.Metrics != nil {
			v.Metrics.observe(req, resp, time.Since(start))
		}
	}()

	in, err := v.input(ctx, req)
	if err != nil {
		log.Error(err, "Building policy input failed")
		return deny(http.StatusInternalServerError, metav1.StatusReasonInternalError,
			"policy.error: "+err.Error())
	}
	var d policy.Decision
	if v.Reservations != nil && isInstanceCreate(req) {
		// Decided on live reads alone: a decision on the cache first would
		// be thrown away.
		d = v.admitInstance(ctx, req, in)
	} else {
		d, err = v.Engine.Decide(ctx, in)
		if err != nil {
			log.Error(err, "Policy input refused")
		}
		if !d.Allowed() && err == nil && v.Live != nil {
			d = v.decideLive(ctx, req, in, d)
		}
	}
	if d.Allowed() {
		return admission.Allowed("")
	}
	msgs := make([]string, 0, len(d.Violations))
	code, reason := int32(http.StatusUnprocessableEntity), metav1.StatusReasonInvalid
	for _, viol := range d.Violations {
		msgs = append(msgs, viol.Message)
		log.Info("Request denied", "rule", viol.Rule, "code", viol.Code, "revision", d.Revision)
		v.Denials.Offer(denial.Denial{
			Layer: "webhook", Rule: viol.Rule, Code: viol.Code, Revision: d.Revision, Message: viol.Message,
			Kind: req.Kind.Kind, Namespace: req.Namespace, Name: req.Name,
			Operation: string(req.Operation), User: req.UserInfo.Username, Key: string(req.UID), At: v.Clock.Now(),
		})
		switch {
		case viol.Code == policy.CodeError || viol.Code == policy.CodeDisagreement:
			code, reason = http.StatusInternalServerError, metav1.StatusReasonInternalError
		case (viol.Code == "agent.scope" || viol.Code == "runner.secret") && code != http.StatusInternalServerError:
			code, reason = http.StatusForbidden, metav1.StatusReasonForbidden
		}
	}
	return deny(code, reason, strings.Join(msgs, "; "))
}

func deny(code int32, reason metav1.StatusReason, msg string) admission.Response {
	r := admission.Denied(msg)
	r.Result.Code = code
	r.Result.Reason = reason
	return r
}

// input converts the admission request once: raw JSON to maps (integers stay
// integers, as in the API server), then the inventory.
func (v *PolicyValidator) input(ctx context.Context, req admission.Request) (policy.Input, error) {
	var in policy.Input
	var err error
	if in.Object, err = decode(req.Object.Raw); err != nil {
		return in, fmt.Errorf("decoding object: %w", err)
	}
	if in.OldObject, err = decode(req.OldObject.Raw); err != nil {
		return in, fmt.Errorf("decoding oldObject: %w", err)
	}
	kind := schema.GroupVersionKind{Group: req.Kind.Group, Version: req.Kind.Version, Kind: req.Kind.Kind}
	in.Request = policy.Request{
		Operation:   string(req.Operation),
		Kind:        kind,
		Resource:    schema.GroupVersionResource{Group: req.Resource.Group, Version: req.Resource.Version, Resource: req.Resource.Resource},
		SubResource: req.SubResource,
		Name:        req.Name,
		Namespace:   req.Namespace,
		UserInfo:    policy.UserInfo{Username: req.UserInfo.Username, UID: req.UserInfo.UID, Groups: req.UserInfo.Groups},
	}
	in.Params = v.Params
	in.Now = v.Clock.Now()
	if in.Inventory, err = v.Inventory.For(ctx, kind.GroupKind(), in.Object, in.OldObject); err != nil {
		return in, fmt.Errorf("reading inventory: %w", err)
	}
	// The requester's own access, not a cached object: asked of the API
	// server on every request that names a runner's token.
	fact, err := tokenSecretAccess(ctx, v.Reviews, req, in.Object, in.OldObject)
	if err != nil {
		return in, err
	}
	if fact != nil {
		in.Inventory[TokenSecretAccessRole] = fact
	}
	return in, nil
}

func decode(raw []byte) (map[string]any, error) {
	if len(raw) == 0 {
		return nil, nil
	}
	var m map[string]any
	if err := utiljson.Unmarshal(raw, &m); err != nil {
		return nil, err
	}
	return m, nil
}

// Metrics count admission decisions.
type Metrics struct {
	requests *prometheus.CounterVec
	latency  *prometheus.HistogramVec
}

// NewMetrics creates the handler's metrics; register Collectors.
func NewMetrics() *Metrics {
	return &Metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "macrack_admission_requests_total",
			Help: "Admission requests by kind, operation and result (allowed, or the HTTP code of the denial).",
		}, []string{"kind", "operation", "result"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "macrack_admission_duration_seconds",
			Help:    "Time to answer one admission request: decoding, inventory and policy.",
			Buckets: []float64{50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3, 50e-3, 0.25, 1},
		}, []string{"kind"}),
	}
}

// Collectors returns the metrics for registration.
func (m *Metrics) Collectors() []prometheus.Collector {
	return []prometheus.Collector{m.requests, m.latency}
}

func (m *Metrics) observe(req admission.Request, resp admission.Response, d time.Duration) {
	result := "allowed"
	if !resp.Allowed && resp.Result != nil {
		result = fmt.Sprint(resp.Result.Code)
	}
	m.requests.WithLabelValues(req.Kind.Kind, string(req.Operation), result).Inc()
	m.latency.WithLabelValues(req.Kind.Kind).Observe(d.Seconds())
}

// decideLive decides again, on the related objects read from the API server,
// a request the cached inventory denied. Only denials pay for the reads.
func (v *PolicyValidator) decideLive(ctx context.Context, req admission.Request, in policy.Input, cached policy.Decision) policy.Decision {
	log := ctrl.LoggerFrom(ctx)
	kind := schema.GroupKind{Group: req.Kind.Group, Kind: req.Kind.Kind}
	live := inventory.Builder{Reader: v.Inventory.Reader, Getter: v.Live}
	inv, err := live.For(ctx, kind, in.Object, in.OldObject)
	if err != nil {
		log.Error(err, "Reading the inventory live failed; the cached decision stands")
		return cached
	}
	if fact, ok := in.Inventory[TokenSecretAccessRole]; ok {
		inv[TokenSecretAccessRole] = fact // asked of the API server already
	}
	in.Inventory = inv
	d, err := v.Engine.Decide(ctx, in)
	if err != nil {
		log.Error(err, "Policy input refused on live reads; the cached decision stands")
		return cached
	}
	if d.Allowed() {
		log.V(1).Info("The cache lagged: allowed on live reads what it denied")
	}
	return d
}
