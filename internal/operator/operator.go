// Package operator wires MacRack's controllers, webhooks and admission
// policies into a controller-runtime manager. cmd/operator, make run and the
// envtest suites share it, so that what is tested is what runs.
package operator

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	certificatesv1 "k8s.io/api/certificates/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	computev1alpha1 "github.com/boualleiguie/macrack-operator/api/compute/v1alpha1"
	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
	leasingv1alpha1 "github.com/boualleiguie/macrack-operator/api/leasing/v1alpha1"
	workloadsv1alpha1 "github.com/boualleiguie/macrack-operator/api/workloads/v1alpha1"
	"github.com/boualleiguie/macrack-operator/internal/admission"
	"github.com/boualleiguie/macrack-operator/internal/audit/denial"
	auditevent "github.com/boualleiguie/macrack-operator/internal/audit/event"
	"github.com/boualleiguie/macrack-operator/internal/audit/sink"
	"github.com/boualleiguie/macrack-operator/internal/cachewait"
	"github.com/boualleiguie/macrack-operator/internal/fleetmetrics"
	"github.com/boualleiguie/macrack-operator/internal/index"
	"github.com/boualleiguie/macrack-operator/internal/patch"
	"github.com/boualleiguie/macrack-operator/internal/policy"
	auditexport "github.com/boualleiguie/macrack-operator/internal/reconcile/audit"
	"github.com/boualleiguie/macrack-operator/internal/reconcile/gitlabrunner"
	"github.com/boualleiguie/macrack-operator/internal/reconcile/image"
	"github.com/boualleiguie/macrack-operator/internal/reconcile/intent"
	"github.com/boualleiguie/macrack-operator/internal/reconcile/lease"
	"github.com/boualleiguie/macrack-operator/internal/reconcile/node"
	"github.com/boualleiguie/macrack-operator/internal/reconcile/placement"
	"github.com/boualleiguie/macrack-operator/internal/reconcile/pod"
	"github.com/boualleiguie/macrack-operator/internal/reconcile/servingcert"
)

// Options configure the operator.
type Options struct {
	Engine *policy.Engine
	// Clock is the business clock: leases, holds and releases read it.
	Clock clock.Clock
	// Params reach the policies: the agents' namespace, the operator's name.
	Params policy.Params
	// Webhooks serves the defaulting and validating webhooks.
	Webhooks bool
	// ApplyAdmissionPolicies applies the VAPs and their bindings at start-up.
	ApplyAdmissionPolicies bool
	// AgentRolesSettle is how long after agent.scope appears the agents'
	// roles are granted; admission.DefaultAgentRolesSettle if zero.
	AgentRolesSettle time.Duration
	// PolicyNamespace is the operator's own: it holds the params ConfigMap
	// the VAP bindings read, and the MacOSImages' pull Secrets.
	PolicyNamespace string
	// MaxConcurrentReconciles bounds the parallel reconciles of each
	// controller of objects: leases, chassis, placement, and each kind's
	// audit export (the image controller keeps its own two).
	MaxConcurrentReconciles int
	// LeaseTicks and NodeTicks, if set, enqueue leases and MacNodes on
	// demand (tests' fake clock).
	LeaseTicks, NodeTicks <-chan event.GenericEvent
	// Registerer takes the metrics; controller-runtime's registry if nil.
	Registerer prometheus.Registerer
	// WebhooksOnly leaves the controllers out, to measure the admission
	// path alone.
	WebhooksOnly bool
	// HeartbeatGrace is how stale an agent's heartbeat may grow before its
	// chassis is marked not ready.
	HeartbeatGrace time.Duration
	// AuditSink takes the audit and billing stream; nil runs no exporter
	// (the journals then fill, and drop, unexported).
	AuditSink sink.Sink
	// AuditOrigin names the cluster in the records' source.
	AuditOrigin auditevent.Origin
	// GitLabAllowedHosts, if set, are the only GitLab hosts a GitLabRunner
	// may name; GitLabVerifyInterval is how often a runner's token is
	// verified again (gitlabrunner.DefaultVerifyInterval if zero).
	GitLabAllowedHosts   []string
	GitLabVerifyInterval time.Duration
	// RunnerTicks, if set, enqueues GitLabRunners on demand (tests' fake
	// clock).
	RunnerTicks <-chan event.GenericEvent
	// KubeletServingCA, if set, approves and signs the host agents'
	// kubelet serving certificates (macrack.io/kubelet-serving); nil runs
	// no such controller, and the agents serve self-signed certificates.
	KubeletServingCA *servingcert.CA
}

// CacheOptions are the manager's cache options, for cmd/operator and the
// envtest harness alike. The cache drops every object's managedFields and
// kubectl's last-applied copy of it (stripMetadata): no controller reads
// them, a patch computed from the cached copy leaves them as stored, and
// they are a large share of each cached object. Of Pods it holds only
// instances' (their label selects them on the API server), so that a large
// cluster's Pods cost the operator nothing, and of those and of Nodes only
// the fields a controller reads (podFields, nodeFields); of coordination
// Leases, only the heartbeats' namespace, not every other controller's
// leader election, renewed every few seconds; of
// CertificateSigningRequests, only those of macrack.io/kubelet-serving.
func CacheOptions() cache.Options {
	return cache.Options{
		DefaultTransform: stripMetadata,
		ByObject: map[client.Object]cache.ByObject{
			&corev1.Pod{}:           {Label: labels.SelectorFromSet(labels.Set{fleetv1alpha1.InstancePodLabel: "true"}), Transform: podFields},
			&corev1.Node{}:          {Transform: nodeFields},
			&coordinationv1.Lease{}: {Namespaces: map[string]cache.Config{fleetv1alpha1.HeartbeatNamespace: {}}},
			// Only the requests of MacRack's signer, when the kubelet
			// serving certificate controller runs.
			&certificatesv1.CertificateSigningRequest{}: {
				Field: fields.OneTermEqualSelector("spec.signerName", fleetv1alpha1.KubeletServingSigner)},
		},
	}
}

// lastApplied is kubectl apply's copy of the object as last applied: as
// large as the object's spec again, and read by kubectl alone.
const lastApplied = "kubectl.kubernetes.io/last-applied-configuration"

// stripMetadata drops managedFields and kubectl's last-applied copy. It
// keeps the copy of the kinds the operator updates whole (a runner's
// finalizer, a CSR's approval), where the update would otherwise erase it
// on the API server: an update that omits managedFields keeps them, one
// that omits an annotation deletes it.
func stripMetadata(in any) (any, error) {
	o, ok := in.(metav1.Object)
	if !ok {
		return in, nil
	}
	o.SetManagedFields(nil)
	switch in.(type) {
	case *workloadsv1alpha1.GitLabRunner, *certificatesv1.CertificateSigningRequest:
		return in, nil
	}
	if a := o.GetAnnotations(); a[lastApplied] != "" {
		kept := make(map[string]string, len(a)-1)
		for k, v := range a {
			if k != lastApplied {
				kept[k] = v
			}
		}
		if len(kept) == 0 {
			kept = nil
		}
		o.SetAnnotations(kept)
	}
	return in, nil
}

// podFields keeps of an instance's Pod what the Pod controller reads: its
// metadata (labels, owner, deletion), the Node it is bound to, and its
// status, which it mirrors and patches; not the containers, volumes and
// tolerations of the spec it made, which it never reads back (a drifted
// Pod is made again, never patched).
func podFields(in any) (any, error) {
	p, ok := in.(*corev1.Pod)
	if !ok {
		return stripMetadata(in)
	}
	if _, err := stripMetadata(p); err != nil {
		return nil, err
	}
	p.Spec = corev1.PodSpec{NodeName: p.Spec.NodeName}
	return p, nil
}

// nodeFields keeps of a Node what the node and Pod controllers read: its
// metadata, spec (taints) and status conditions and addresses, which they
// patch; not a kubelet's images, capacity and system info, the bulk of a
// real cluster's Nodes, which every one of them is cached with.
func nodeFields(in any) (any, error) {
	n, ok := in.(*corev1.Node)
	if !ok {
		return stripMetadata(in)
	}
	if _, err := stripMetadata(n); err != nil {
		return nil, err
	}
	n.Status = corev1.NodeStatus{Conditions: n.Status.Conditions, Addresses: n.Status.Addresses}
	return n, nil
}

// Setup adds everything to mgr.
func Setup(ctx context.Context, mgr ctrl.Manager, o Options) error {
	if o.Engine == nil || o.Clock == nil {
		return errors.New("operator: Engine and Clock are required")
	}
	if err := o.Params.Validate(); err != nil {
		return fmt.Errorf("operator: the policies' settings: %w", err)
	}
	if err := index.Register(ctx, mgr.GetFieldIndexer()); err != nil {
		return err
	}
	reg := o.Registerer
	if reg == nil {
		reg = metrics.Registry
	}
	admissionMetrics := admission.NewMetrics()
	nodeMetrics := node.NewMetrics()
	collectors := append(o.Engine.Collectors(), admissionMetrics.Collectors()...)
	collectors = append(collectors, fleetmetrics.Collectors(mgr.GetCache(), mgr.GetLogger().WithName("metrics"))...)
	collectors = append(collectors, patch.Collectors()...)
	for _, c := range append(collectors, nodeMetrics.Collectors()...) {
		if err := reg.Register(c); err != nil && !errors.As(err, &prometheus.AlreadyRegisteredError{}) {
			return fmt.Errorf("registering metrics: %w", err)
		}
	}
	auditMetrics := auditexport.NewMetrics()
	for _, c := range auditMetrics.Collectors() {
		if err := reg.Register(c); err != nil && !errors.As(err, &prometheus.AlreadyRegisteredError{}) {
			return fmt.Errorf("registering metrics: %w", err)
		}
	}
	var denials *denial.Buffer
	if o.AuditSink != nil && !o.WebhooksOnly {
		denials = denial.NewBuffer(denial.DefaultBufferSize, auditMetrics.DropDenial)
	}
	identity := o.Params.OperatorUsername
	if o.WebhooksOnly {
		return admission.Setup(mgr, o.Engine, o.Clock, o.Params, admissionMetrics, denials, admission.Finalizers(false, false))
	}
	// The controllers read their own writes: a reconcile that ran again
	// on a cache from before its last write would write it again.
	c, err := cachewait.New(mgr.GetClient(), mgr.GetCache(), cachewait.DefaultTimeout,
		&leasingv1alpha1.MacNodeLease{}, &computev1alpha1.MacOSInstance{}, &fleetv1alpha1.MacNode{},
		&fleetv1alpha1.MacOSImage{}, &corev1.Node{}, &corev1.Pod{}, &workloadsv1alpha1.GitLabRunner{})
	if err != nil {
		return err
	}
	// Each controller writes under its own field manager: the API server
	// then names a status field's owner, and a second writer shows.
	checker := func(fieldOwner string) intent.Checker {
		return intent.Checker{Client: client.WithFieldOwner(c, fieldOwner), Engine: o.Engine, Clock: o.Clock,
			Params: o.Params, Identity: identity, Denials: denials}
	}
	if err := (&lease.Reconciler{
		Checker: checker(lease.FieldOwner), Recorder: mgr.GetEventRecorder("macrack-lease"),
		Ticks: o.LeaseTicks, MaxConcurrentReconciles: o.MaxConcurrentReconciles,
		JournalDropped: auditMetrics.DropJournal,
	}).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("setting up the lease controller: %w", err)
	}
	if err := (&node.Reconciler{
		Checker: checker(node.FieldOwner), Recorder: mgr.GetEventRecorder("macrack-node"),
		Ticks: o.NodeTicks, HeartbeatGrace: o.HeartbeatGrace, APIReader: mgr.GetAPIReader(), Metrics: nodeMetrics,
		MaxConcurrentReconciles: o.MaxConcurrentReconciles, JournalDropped: auditMetrics.DropJournal,
	}).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("setting up the node controller: %w", err)
	}
	if err := (&placement.Reconciler{
		Checker: checker(placement.FieldOwner), Recorder: mgr.GetEventRecorder("macrack-placement"),
		MaxConcurrentReconciles: o.MaxConcurrentReconciles,
	}).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("setting up the placement controller: %w", err)
	}
	if err := (&pod.Reconciler{
		Client: client.WithFieldOwner(c, pod.FieldOwner), APIReader: mgr.GetAPIReader(), Clock: o.Clock,
		Recorder: mgr.GetEventRecorder("macrack-pod"), MaxConcurrentReconciles: o.MaxConcurrentReconciles,
	}).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("setting up the instance Pod controller: %w", err)
	}
	if err := (&image.Reconciler{
		Client: client.WithFieldOwner(c, image.FieldOwner), APIReader: mgr.GetAPIReader(), Clock: o.Clock,
		Recorder: mgr.GetEventRecorder("macrack-image"), Namespace: o.PolicyNamespace,
	}).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("setting up the image controller: %w", err)
	}
	if o.KubeletServingCA != nil {
		csrs, err := cachewait.New(mgr.GetClient(), mgr.GetCache(), cachewait.DefaultTimeout, &certificatesv1.CertificateSigningRequest{})
		if err != nil {
			return err
		}
		if err := (&servingcert.Reconciler{
			Client: client.WithFieldOwner(csrs, servingcert.FieldOwner), CA: o.KubeletServingCA, AgentsNamespace: o.Params.AgentsNamespace, Clock: o.Clock,
			Recorder: mgr.GetEventRecorder("macrack-kubelet-serving"),
		}).SetupWithManager(mgr); err != nil {
			return fmt.Errorf("setting up the kubelet serving certificate controller: %w", err)
		}
	}
	if o.AuditSink != nil {
		if err := (&auditexport.Exporter{
			Client: client.WithFieldOwner(c, auditexport.FieldOwner), Clock: o.Clock, Sink: o.AuditSink, Origin: o.AuditOrigin,
			Denials: denials, Metrics: auditMetrics, MaxConcurrentReconciles: o.MaxConcurrentReconciles,
		}).SetupWithManager(mgr); err != nil {
			return fmt.Errorf("setting up the audit exporter: %w", err)
		}
	}
	tenants, err := gitlabrunner.NewImpersonation(mgr.GetConfig(), mgr.GetScheme(), mgr.GetRESTMapper())
	if err != nil {
		return err
	}
	if err := (&gitlabrunner.Reconciler{
		Client: client.WithFieldOwner(c, gitlabrunner.FieldOwner), Tenants: tenants, GitLab: gitlabrunner.NewGitLab, Clock: o.Clock,
		Recorder: mgr.GetEventRecorder("macrack-gitlab-runner"), VerifyInterval: o.GitLabVerifyInterval,
		AllowedHosts: o.GitLabAllowedHosts, MaxConcurrentReconciles: o.MaxConcurrentReconciles, Ticks: o.RunnerTicks,
	}).SetupWithManager(ctx, mgr); err != nil {
		return fmt.Errorf("setting up the GitLabRunner controller: %w", err)
	}
	if o.Webhooks {
		// New leases and instances come with the finalizers of the
		// controllers and the exporter this operator runs.
		if err := admission.Setup(mgr, o.Engine, o.Clock, o.Params, admissionMetrics, denials, admission.Finalizers(true, o.AuditSink != nil)); err != nil {
			return fmt.Errorf("setting up webhooks: %w", err)
		}
		if err := admission.SetupSweeper(mgr, o.Clock); err != nil {
			return fmt.Errorf("setting up the reservations' sweeper: %w", err)
		}
	}
	// Whoever installed agent.scope, the agents' roles follow it.
	if err := (&admission.AgentRoleBinder{
		Client: mgr.GetClient(), Live: mgr.GetAPIReader(), AgentsNamespace: o.Params.AgentsNamespace, Settle: o.AgentRolesSettle,
	}).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("setting up the agents' role bindings: %w", err)
	}
	if o.ApplyAdmissionPolicies {
		if err := (&admission.PolicyApplier{
			Client: mgr.GetClient(), Engine: o.Engine, Namespace: o.PolicyNamespace, Params: o.Params,
		}).SetupWithManager(mgr); err != nil {
			return fmt.Errorf("setting up the admission policies: %w", err)
		}
	}
	return nil
}
