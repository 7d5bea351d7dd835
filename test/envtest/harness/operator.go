package harness

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/event"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
	"sigs.k8s.io/yaml"

	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
	auditevent "github.com/boualleiguie/macrack-operator/internal/audit/event"
	"github.com/boualleiguie/macrack-operator/internal/audit/sink"
	"github.com/boualleiguie/macrack-operator/internal/enroll"
	"github.com/boualleiguie/macrack-operator/internal/operator"
	"github.com/boualleiguie/macrack-operator/internal/policy"
	"github.com/boualleiguie/macrack-operator/internal/reconcile/servingcert"
	"github.com/boualleiguie/macrack-operator/policies"
)

// OperatorUser is the identity the in-process operator runs as.
const OperatorUser = "macrack-operator"

// WithWebhooks makes Start install config/webhook, served over TLS by the
// in-process operator and called by the API server.
func WithWebhooks(env *envtest.Environment) {
	env.WebhookInstallOptions = envtest.WebhookInstallOptions{
		Paths: []string{filepath.Join(RepoRoot(), "config", "webhook")},
	}
}

// Operator is the operator running in-process against Env, on a fake clock.
type Operator struct {
	// Clock is the operator's fake clock, unless OperatorOptions.Clock
	// gave it another (nil then).
	Clock *clocktesting.FakeClock
	clock SteppingClock
	// Ticks and NodeTicks reach the lease and the node controllers.
	Ticks, NodeTicks chan event.GenericEvent
	Engine           *policy.Engine
	Params           policy.Params
	// Client acts as the operator.
	Client client.Client
	// Registry holds the operator's metrics, as its /metrics would serve them.
	Registry *prometheus.Registry
	stop     context.CancelFunc
	done     chan error
}

// OperatorOptions tune StartOperator.
type OperatorOptions struct {
	Start                   time.Time
	Webhooks                bool
	MaxConcurrentReconciles int
	Log                     logr.Logger
	// WebhooksOnly runs the webhooks without the controllers.
	WebhooksOnly bool
	// WebhookPort, if set, serves the webhooks on this port of the
	// envtest's serving host, in place of the port the API server calls: a
	// suite that runs two replicas puts its own balancer on that one.
	WebhookPort int
	// ApplyAdmissionPolicies makes the operator apply, and keep, its
	// admission policies, their bindings and params, as it does in a
	// cluster. Suites that install them with InstallAdmissionPolicies leave
	// it off.
	ApplyAdmissionPolicies bool
	// HeartbeatGrace marks a chassis not ready when its agent's heartbeat
	// is older; zero disables the check.
	HeartbeatGrace time.Duration
	// AuditSink, if set, runs the audit exporter into it.
	AuditSink sink.Sink
	// Clock, if set, is the operator's clock in place of a fake one
	// (Operator.Clock is nil then); Step steps it.
	Clock SteppingClock
	// KubeletServingCACertFile and KubeletServingCAKeyFile, if set, run
	// the kubelet serving certificate controller with that CA
	// (kubeletca's ServingCAFile and ServingCAKeyFile), as the operator's
	// --kubelet-serving-ca-cert-file and --kubelet-serving-ca-key-file.
	KubeletServingCACertFile, KubeletServingCAKeyFile string
	// AsServiceAccount runs the operator as its Deployment does: not in
	// system:masters, which priority and fairness exempts, but in the
	// ServiceAccount groups, with config/rbac's ClusterRole and Role
	// bound to it. Its requests then queue where a cluster's would.
	AsServiceAccount bool
	// NoAdmission installs no admission policy at all, not even
	// agent.scope, which the others get so that the operator grants the
	// agents' roles: for a suite that proves the reconcilers alone and runs
	// no agent.
	NoAdmission bool
}

// OperatorNamespace holds the operator's placeholder Pods and policy params.
const OperatorNamespace = "macrack-system"

// StartOperator runs the operator's manager in-process with a fake clock.
func (e *Env) StartOperator(o OperatorOptions) (*Operator, error) {
	engine, err := policy.Load(context.Background(), policies.FS, policy.WithTimeout(30*time.Second))
	if err != nil {
		return nil, err
	}
	groups := []string{"system:masters"}
	if o.AsServiceAccount {
		if groups, err = e.bindOperatorRoles(context.Background()); err != nil {
			return nil, err
		}
	}
	user, err := e.Environment.ControlPlane.AddUser(envtest.User{Name: OperatorUser, Groups: groups}, nil)
	if err != nil {
		return nil, fmt.Errorf("adding the operator's user: %w", err)
	}
	cfg := rest.CopyConfig(user.Config())
	cfg.QPS, cfg.Burst = 500, 1000
	opts := ctrl.Options{
		Scheme:                 e.Scheme,
		Cache:                  operator.CacheOptions(),
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Logger:                 o.Log,
		Controller:             config.Controller{SkipNameValidation: ptr.To(true)},
	}
	if o.Webhooks {
		w := e.Environment.WebhookInstallOptions
		port := w.LocalServingPort
		if o.WebhookPort != 0 {
			port = o.WebhookPort
		}
		opts.WebhookServer = webhook.NewServer(webhook.Options{Host: w.LocalServingHost, Port: port, CertDir: w.LocalServingCertDir})
	}
	mgr, err := ctrl.NewManager(cfg, opts)
	if err != nil {
		return nil, err
	}
	params, err := e.Params(context.Background())
	if err != nil {
		return nil, err
	}
	op := &Operator{
		Ticks:     make(chan event.GenericEvent, 1024),
		NodeTicks: make(chan event.GenericEvent, 1024),
		Engine:    engine,
		Params:    params,
		Client:    mgr.GetClient(),
		Registry:  prometheus.NewRegistry(),
		done:      make(chan error, 1),
	}
	if o.Clock != nil {
		op.clock = o.Clock
	} else {
		op.Clock = clocktesting.NewFakeClock(o.Start)
		op.clock = op.Clock
	}
	var servingCA *servingcert.CA
	if o.KubeletServingCACertFile != "" || o.KubeletServingCAKeyFile != "" {
		if servingCA, err = servingcert.LoadCA(o.KubeletServingCACertFile, o.KubeletServingCAKeyFile); err != nil {
			return nil, err
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	op.stop = cancel
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: OperatorNamespace}}
	if err := e.Client.Create(ctx, ns); client.IgnoreAlreadyExists(err) != nil {
		cancel()
		return nil, err
	}
	// The operator grants the agents' roles only under agent.scope; a
	// suite that applies no policies through the operator still has it.
	if !o.ApplyAdmissionPolicies && !o.WebhooksOnly && !o.NoAdmission {
		if err := InstallAgentScope(ctx, e.Client, engine, op.Params); err != nil {
			cancel()
			return nil, err
		}
	}
	if err := operator.Setup(ctx, mgr, operator.Options{
		Engine: engine, Clock: op.clock, Params: op.Params,
		Webhooks: o.Webhooks, MaxConcurrentReconciles: o.MaxConcurrentReconciles,
		LeaseTicks: op.Ticks, NodeTicks: op.NodeTicks, Registerer: op.Registry,
		WebhooksOnly: o.WebhooksOnly, PolicyNamespace: OperatorNamespace, HeartbeatGrace: o.HeartbeatGrace,
		ApplyAdmissionPolicies: o.ApplyAdmissionPolicies,
		AuditSink:              o.AuditSink, AuditOrigin: auditevent.Origin{Cluster: "envtest"},
		KubeletServingCA: servingCA,
	}); err != nil {
		cancel()
		return nil, err
	}
	e.resolving = e.resolving || !o.WebhooksOnly
	go func() { op.done <- mgr.Start(ctx) }()
	if !mgr.GetCache().WaitForCacheSync(ctx) {
		cancel()
		return nil, fmt.Errorf("the operator's cache did not sync")
	}
	return op, nil
}

// bindOperatorRoles creates config/rbac's roles of the operator and binds
// them to OperatorUser, once per control plane, and returns the groups a
// ServiceAccount of OperatorNamespace has.
func (e *Env) bindOperatorRoles(ctx context.Context) ([]string, error) {
	groups := []string{"system:serviceaccounts", "system:serviceaccounts:" + OperatorNamespace}
	if err := e.Client.Get(ctx, client.ObjectKey{Name: "macrack-operator"}, &rbacv1.ClusterRoleBinding{}); err == nil {
		return groups, nil // an operator started before, or a replica
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: OperatorNamespace}}
	if err := e.Client.Create(ctx, ns); client.IgnoreAlreadyExists(err) != nil {
		return nil, err
	}
	if err := e.ApplyYAML(ctx, "config/rbac/role.yaml"); err != nil {
		return nil, err
	}
	subjects := []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: OperatorUser}}
	for _, b := range []client.Object{
		&rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "macrack-operator"}, Subjects: subjects,
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "macrack-operator"}},
		&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "macrack-operator", Namespace: OperatorNamespace}, Subjects: subjects,
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "macrack-operator"}},
	} {
		if err := e.Client.Create(ctx, b); err != nil {
			return nil, fmt.Errorf("binding the operator's roles: %w", err)
		}
	}
	return groups, nil
}

// Params are the operator's settings in the suites: the agents' namespace,
// the operator's user, and the API server's token audiences, read from the
// API server itself (it fills an empty TokenRequest's audiences with them).
func (e *Env) Params(ctx context.Context) (policy.Params, error) {
	p := policy.Params{AgentsNamespace: AgentsNamespace, OperatorUsername: OperatorUser}
	auds, err := enroll.APIAudiences(ctx, e.Client, metav1.NamespaceDefault)
	if err != nil {
		return p, err
	}
	p.AgentTokenAudiences = strings.Join(auds, ",")
	return p, nil
}

// Stop stops the operator and waits for it.
func (op *Operator) Stop() error {
	op.stop()
	return <-op.done
}

// Step moves the fake clock and enqueues the given objects, as a clock
// tick would on a real one. A MacNode goes to the node controller, and to
// the lease controller, which maps it to its binding's lease (an orphaned
// binding's release is the lease controller's).
func (op *Operator) Step(d time.Duration, objs ...client.Object) {
	op.clock.Step(d)
	for _, o := range objs {
		if _, isMacNode := o.(*fleetv1alpha1.MacNode); isMacNode {
			op.NodeTicks <- event.GenericEvent{Object: o}
		}
		op.Ticks <- event.GenericEvent{Object: o}
	}
}

// ApplyYAML creates every object in a YAML file of the repository.
func (e *Env) ApplyYAML(ctx context.Context, rel string) error {
	data, err := os.ReadFile(filepath.Join(RepoRoot(), rel))
	if err != nil {
		return err
	}
	for _, doc := range splitYAML(data) {
		u := map[string]any{}
		if err := yaml.Unmarshal(doc, &u); err != nil {
			return fmt.Errorf("%s: %w", rel, err)
		}
		if len(u) == 0 {
			continue
		}
		obj := unstructuredFrom(u)
		if err := e.Client.Create(ctx, obj); err != nil {
			return fmt.Errorf("%s: creating %s %s: %w", rel, obj.GetKind(), obj.GetName(), err)
		}
	}
	return nil
}
