// Command operator runs the MacRack controllers and admission webhooks.
package main

import (
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
	"github.com/boualleiguie/macrack-operator/internal/audit/event"
	"github.com/boualleiguie/macrack-operator/internal/audit/sink"
	"github.com/boualleiguie/macrack-operator/internal/logging"
	"github.com/boualleiguie/macrack-operator/internal/operator"
	"github.com/boualleiguie/macrack-operator/internal/policy"
	"github.com/boualleiguie/macrack-operator/internal/reconcile/servingcert"
	macrackscheme "github.com/boualleiguie/macrack-operator/internal/scheme"
	"github.com/boualleiguie/macrack-operator/policies"
)

// options are the operator's command-line settings.
type options struct {
	metricsAddr          string
	probeAddr            string
	enableLeaderElection bool
	leaderElectionID     string
	leaderElectionNS     string
	leaseDuration        time.Duration
	renewDeadline        time.Duration
	retryPeriod          time.Duration
	releaseOnCancel      bool
	webhookPort          int
	webhookCertDir       string
	webhookCertName      string
	webhookKeyName       string
	enableHTTP2          bool

	enableWebhooks          bool
	applyAdmissionPolicies  bool
	policyNamespace         string
	agentsNamespace         string
	operatorUsername        string
	agentTokenAudiences     string
	maxConcurrentReconciles int
	policyTimeout           time.Duration
	heartbeatInterval       time.Duration
	missedHeartbeats        int
	auditSink               string
	clusterName             string
	gitlabAllowedHosts      string
	production              bool
	kubeletServingCACert    string
	kubeletServingCAKey     string
}

func main() {
	var opts options
	fs := flag.CommandLine
	fs.StringVar(&opts.metricsAddr, "metrics-bind-address", ":8080", "The address the metrics endpoint binds to; 0 disables it.")
	fs.StringVar(&opts.probeAddr, "health-probe-bind-address", ":8081", "The address the health and ready probes bind to.")
	fs.BoolVar(&opts.enableLeaderElection, "leader-elect", false, "Enable leader election, so that only one replica reconciles.")
	fs.StringVar(&opts.leaderElectionID, "leader-election-id", "operator.macrack.io", "The name of the leader election Lease.")
	fs.StringVar(&opts.leaderElectionNS, "leader-election-namespace", "", "The namespace of the leader election Lease; defaults to the pod's namespace.")
	fs.DurationVar(&opts.leaseDuration, "leader-elect-lease-duration", 15*time.Second,
		"How long a standby waits, after it last saw the leader renew, before it takes the leader election Lease over.")
	fs.DurationVar(&opts.renewDeadline, "leader-elect-renew-deadline", 10*time.Second,
		"How long the leader keeps trying to renew its Lease before it gives up leading (and exits); below --leader-elect-lease-duration.")
	fs.DurationVar(&opts.retryPeriod, "leader-elect-retry-period", 2*time.Second,
		"How often the leader renews its Lease, and a standby tries to acquire it (with up to 1.2x jitter).")
	fs.BoolVar(&opts.releaseOnCancel, "leader-election-release-on-cancel", true,
		"On SIGTERM, release the leader election Lease once the controllers have stopped, so that a standby takes over at once.")
	fs.IntVar(&opts.webhookPort, "webhook-port", 9443, "The port the webhook server serves TLS on.")
	fs.StringVar(&opts.webhookCertDir, "webhook-cert-dir", "", "The directory holding the webhook serving certificate; defaults to controller-runtime's.")
	fs.StringVar(&opts.webhookCertName, "webhook-cert-name", "tls.crt", "The webhook serving certificate's file name in --webhook-cert-dir.")
	fs.StringVar(&opts.webhookKeyName, "webhook-key-name", "tls.key", "The webhook serving key's file name in --webhook-cert-dir.")
	fs.BoolVar(&opts.enableHTTP2, "enable-http2", false, "Serve webhooks and metrics over HTTP/2 as well (off: CVE-2023-44487).")
	fs.BoolVar(&opts.enableWebhooks, "enable-webhooks", true, "Serve the defaulting and validating webhooks.")
	fs.BoolVar(&opts.applyAdmissionPolicies, "apply-admission-policies", true, "Apply, and keep, the ValidatingAdmissionPolicies, their bindings and params, MacRack's FlowSchemas and its webhook's priority level.")
	fs.StringVar(&opts.policyNamespace, "policy-namespace", envOr("POD_NAMESPACE", policy.DefaultParamsNamespace), "The namespace of the policies' params ConfigMap (the operator's own).")
	fs.StringVar(&opts.agentsNamespace, "agents-namespace", "macrack-agents", "The namespace of the host agents' ServiceAccounts (agent-<node>).")
	fs.StringVar(&opts.agentTokenAudiences, "agent-token-audiences", "",
		"The API server's token audiences (its --api-audiences, comma-separated): agents may request tokens for these only. Empty: the audiences of the operator's own ServiceAccount token.")
	fs.StringVar(&opts.operatorUsername, "operator-username", "system:serviceaccount:macrack-system:macrack-operator", "The operator's own username, as the API server sees it.")
	fs.IntVar(&opts.maxConcurrentReconciles, "max-concurrent-reconciles", 8, "Parallel reconciles of each controller: leases, chassis, placement, and each kind's audit export.")
	fs.DurationVar(&opts.policyTimeout, "policy-timeout", policy.DefaultTimeout, "The deadline of one policy decision; past it, the request is denied.")
	fs.DurationVar(&opts.heartbeatInterval, "heartbeat-interval", 10*time.Second, "How often host agents renew their heartbeat Lease.")
	fs.IntVar(&opts.missedHeartbeats, "missed-heartbeats", 4, "How many heartbeats may be missed before a chassis and its Node are marked not ready.")
	fs.StringVar(&opts.auditSink, "audit-sink", "stdout",
		"Where the audit and billing stream goes: nats://host:port[?stream=NAME&replicas=N&creds=FILE] (JetStream; MacRack creates its stream), http(s)://url (CloudEvents over HTTP), or stdout (JSON lines).")
	fs.StringVar(&opts.clusterName, "cluster-name", "default", "This cluster's name in the audit records' source, macrack://<cluster>/<controller>.")
	fs.StringVar(&opts.gitlabAllowedHosts, "gitlab-allowed-hosts", "",
		"Comma-separated GitLab hosts GitLabRunners may name (exact, or *.example.com): the operator sends runner tokens to them only, to verify and unregister runners. Empty: any host, which --production refuses.")
	fs.BoolVar(&opts.production, "production", false,
		"Production mode: refuse to start with a setting only a development cluster may use, today an empty --gitlab-allowed-hosts (a GitLabRunner could then send its token to any host). The bundle's Deployment sets it.")
	fs.StringVar(&opts.kubeletServingCACert, "kubelet-serving-ca-cert-file", "",
		"The CA (PEM) that signs the host agents' kubelet serving certificates, CertificateSigningRequests of macrack.io/kubelet-serving: the operator approves an agent's request only for its own Node and enrolled address, and denies the rest. Give kube-apiserver the same file as --kubelet-certificate-authority. Read at start-up. With --kubelet-serving-ca-key-file; empty: none is approved or signed, and the agents serve self-signed certificates.")
	fs.StringVar(&opts.kubeletServingCAKey, "kubelet-serving-ca-key-file", "", "The private key (PEM) of --kubelet-serving-ca-cert-file.")
	zapOpts := logging.BindFlags(fs)
	flag.Parse()

	log := logging.New(zapOpts)
	ctrl.SetLogger(log)

	if err := run(log, opts); err != nil {
		log.Error(err, "Operator stopped")
		os.Exit(1)
	}
}

// splitList splits a comma-separated flag, dropping empty items.
func splitList(s string) []string {
	var out []string
	for _, v := range strings.Split(s, ",") {
		if v = strings.TrimSpace(v); v != "" {
			out = append(out, v)
		}
	}
	return out
}

// loadServingCA is the kubelet serving CA of the flags; nil without them.
func loadServingCA(opts options) (*servingcert.CA, error) {
	switch {
	case opts.kubeletServingCACert == "" && opts.kubeletServingCAKey == "":
		return nil, nil
	case opts.kubeletServingCACert == "" || opts.kubeletServingCAKey == "":
		return nil, fmt.Errorf("--kubelet-serving-ca-cert-file and --kubelet-serving-ca-key-file go together")
	}
	return servingcert.LoadCA(opts.kubeletServingCACert, opts.kubeletServingCAKey)
}

func envOr(key, fallback string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return fallback
}

// errUnsafeSettings is a setting production mode refuses.
var errUnsafeSettings = errors.New("unsafe in production")

// validate refuses, in production mode, the settings only a development
// cluster may run with.
func (o options) validate() error {
	if o.production && len(splitList(o.gitlabAllowedHosts)) == 0 {
		return fmt.Errorf("%w: --production needs --gitlab-allowed-hosts, the GitLab hosts runners may send their tokens to (exact, or *.example.com), such as --gitlab-allowed-hosts=gitlab.com; without it any host a GitLabRunner names would get its token", errUnsafeSettings)
	}
	return nil
}

func run(log logr.Logger, opts options) error {
	if err := opts.validate(); err != nil {
		return err
	}
	if len(splitList(opts.gitlabAllowedHosts)) == 0 {
		log.Info("No --gitlab-allowed-hosts: GitLabRunners may send their tokens to any host they name; --production refuses this")
	}
	scheme, err := macrackscheme.New()
	if err != nil {
		return err
	}
	var tlsOpts []func(*tls.Config)
	if !opts.enableHTTP2 {
		tlsOpts = append(tlsOpts, func(c *tls.Config) { c.NextProtos = []string{"http/1.1"} })
	}

	cfg, err := ctrl.GetConfig()
	if err != nil {
		return fmt.Errorf("loading kubeconfig: %w", err)
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                  scheme,
		Cache:                   operator.CacheOptions(),
		Metrics:                 metricsserver.Options{BindAddress: opts.metricsAddr, TLSOpts: tlsOpts},
		HealthProbeBindAddress:  opts.probeAddr,
		LeaderElection:          opts.enableLeaderElection,
		LeaderElectionID:        opts.leaderElectionID,
		LeaderElectionNamespace: opts.leaderElectionNS,
		LeaseDuration:           &opts.leaseDuration,
		RenewDeadline:           &opts.renewDeadline,
		RetryPeriod:             &opts.retryPeriod,
		// Safe: the process exits as soon as the manager has stopped.
		LeaderElectionReleaseOnCancel: opts.releaseOnCancel,
		WebhookServer: webhook.NewServer(webhook.Options{
			Port:     opts.webhookPort,
			CertDir:  opts.webhookCertDir,
			CertName: opts.webhookCertName,
			KeyName:  opts.webhookKeyName,
			TLSOpts:  tlsOpts,
		}),
	})
	if err != nil {
		return fmt.Errorf("creating manager: %w", err)
	}
	ctx := ctrl.SetupSignalHandler()
	engine, err := policy.Load(ctx, policies.FS, policy.WithLogger(log.WithName("policy")), policy.WithTimeout(opts.policyTimeout))
	if err != nil {
		return err
	}
	log.Info("Policies loaded", "revision", engine.Revision(), "serial", engine.Serial(), "rules", len(engine.Rules()))
	if opts.agentTokenAudiences == "" {
		auds, err := ownTokenAudiences(serviceAccountTokenFile)
		if err != nil {
			return fmt.Errorf("--agent-token-audiences is not set, and %w", err)
		}
		opts.agentTokenAudiences = strings.Join(auds, ",")
		log.Info("Agent token audiences read from the operator's own token", "audiences", auds)
	}
	servingCA, err := loadServingCA(opts)
	if err != nil {
		return err
	}
	if servingCA != nil {
		log.Info("Approving and signing the agents' kubelet serving certificates", "signer", fleetv1alpha1.KubeletServingSigner, "ca", servingCA.Cert.Subject.String(), "notAfter", servingCA.Cert.NotAfter)
	} else {
		log.Info("No --kubelet-serving-ca-cert-file: the agents' kubelet serving certificate requests are neither approved nor signed")
	}
	sink, err := sink.Open(ctrl.LoggerInto(ctx, log.WithName("audit")), opts.auditSink, os.Stdout)
	if err != nil {
		return err
	}
	defer sink.Close()
	if err := operator.Setup(ctx, mgr, operator.Options{
		Engine: engine,
		Clock:  clock.RealClock{},
		Params: policy.Params{
			AgentsNamespace:     opts.agentsNamespace,
			OperatorUsername:    opts.operatorUsername,
			AgentTokenAudiences: opts.agentTokenAudiences,
		},
		Webhooks:                opts.enableWebhooks,
		ApplyAdmissionPolicies:  opts.applyAdmissionPolicies,
		PolicyNamespace:         opts.policyNamespace,
		MaxConcurrentReconciles: opts.maxConcurrentReconciles,
		HeartbeatGrace:          opts.heartbeatInterval * time.Duration(opts.missedHeartbeats),
		AuditSink:               sink,
		AuditOrigin:             event.Origin{Cluster: opts.clusterName},
		GitLabAllowedHosts:      splitList(opts.gitlabAllowedHosts),
		KubeletServingCA:        servingCA,
	}); err != nil {
		return err
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return fmt.Errorf("adding health check: %w", err)
	}
	ready := healthz.Ping
	if opts.enableWebhooks {
		ready = mgr.GetWebhookServer().StartedChecker()
	}
	if err := mgr.AddReadyzCheck("readyz", ready); err != nil {
		return fmt.Errorf("adding ready check: %w", err)
	}

	log.Info("Starting manager")
	if err := mgr.Start(ctx); err != nil {
		return fmt.Errorf("running manager: %w", err)
	}
	return nil
}
