// Package agent is the host agent's mechanics on one Mac mini: it registers
// the chassis' Node, heartbeats, reports the hardware facts, renews its own
// token, and runs the instances placed on its chassis in VM helpers. It is a
// client of the Kubernetes API only: it never imports the operator's
// controllers or webhooks, and what it may write is policed by agent.scope.
//
// Config and Run wire its two parts: package host registers the chassis,
// heartbeats, reports the facts and renews the token; package instances runs
// the instance loop and its reaper.
package agent

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	computev1alpha1 "github.com/boualleiguie/macrack-operator/api/compute/v1alpha1"
	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
	"github.com/boualleiguie/macrack-operator/internal/agent/driver/sim"
	"github.com/boualleiguie/macrack-operator/internal/agent/helper"
	"github.com/boualleiguie/macrack-operator/internal/agent/host"
	"github.com/boualleiguie/macrack-operator/internal/agent/images"
	"github.com/boualleiguie/macrack-operator/internal/agent/instances"
	"github.com/boualleiguie/macrack-operator/internal/agent/jobs"
	"github.com/boualleiguie/macrack-operator/internal/agent/kubelet"
	"github.com/boualleiguie/macrack-operator/internal/agent/report"
	"github.com/boualleiguie/macrack-operator/internal/agent/servingcert"
	"github.com/boualleiguie/macrack-operator/internal/agent/sessions"
	"github.com/boualleiguie/macrack-operator/internal/guest"
	"github.com/boualleiguie/macrack-operator/internal/runner/custom"
	"github.com/boualleiguie/macrack-operator/internal/runner/jobloop"
	macrackscheme "github.com/boualleiguie/macrack-operator/internal/scheme"
)

// Rebooter reboots the host: the only repair of a stuck kernel VM quota.
// The sim's is host.SimRebooter; a Mac's, host.NewLaunchdRebooter().
type Rebooter = host.Rebooter

// BootIDSource says which boot of the host this is: the sim's is
// host.SimBootID, a Mac's host.SysctlBootID (kern.bootsessionuuid).
type BootIDSource = host.BootIDSource

// Config is one host agent's settings.
type Config struct {
	// NodeName is the chassis' serial in lower case.
	NodeName string
	// AgentsNamespace holds the agent's ServiceAccount.
	AgentsNamespace string
	// StateDir holds images, instance disks and helpers' sockets.
	StateDir string
	// GuestKeyFile holds the chassis' guest key, which opens the sealed
	// guest configs of its instances; <StateDir>/guest-key if empty. Its
	// public half is reported as status.reported.guestKey.
	GuestKeyFile string
	Facts        host.FactsSource
	Launcher     helper.Launcher
	// HeartbeatInterval is how often the heartbeat Lease is renewed.
	HeartbeatInterval time.Duration
	// FactsInterval is how often the facts are reported again.
	FactsInterval time.Duration
	// TokenFile, if set, receives the agent's renewed tokens; the rest
	// config reads its bearer token from it.
	TokenFile string
	TokenTTL  time.Duration
	// ImageCacheBudget, if positive, overrides the class's
	// imageCacheBudget: the bytes the golden cache may allocate.
	ImageCacheBudget int64
	// PullConcurrency is how many chunks a pull fetches at once (4 if
	// zero).
	PullConcurrency int
	// RegistryAuth is a Docker config JSON with the golden registries'
	// credentials, provisioned on the host with the agent; empty is
	// anonymous.
	RegistryAuth []byte
	// PullRetry is how soon a pull that waited for room or failed is
	// tried again (30s if zero).
	PullRetry time.Duration
	// ImagesInterval is how often the golden cache's state is reported
	// (2s if zero): a pull's progress shows at that pace.
	ImagesInterval time.Duration
	Clock          clock.WithTicker
	Log            logr.Logger
	// NewMachineID makes machine identifiers (RandomMachineID in the sim).
	NewMachineID func() ([]byte, error)
	// Poll is how often running instances are looked at again; 10s if zero.
	Poll time.Duration
	// BootID says which boot of the host this is: reported as
	// status.reported.bootID, and stamped on every quota report. Nil
	// reports none.
	BootID host.BootIDSource
	// Rebooter reboots the host when the quarantine loop asks. After it
	// has, Run returns ErrHostRebooted. Nil: the chassis stays quarantined
	// until a person reboots it.
	Rebooter Rebooter
	// SimKernel is the sim host's kernel, set only with the sim driver: it
	// honours the sim quota-stick fault, and boots the quota probe from an
	// empty disk when no golden is cached.
	SimKernel sim.Kernel
	// StopGrace bounds a graceful stop before the VM is forced off; 30s if
	// zero.
	StopGrace time.Duration
	// KubeletAddress, if set, is where the agent serves the kubelet API
	// of its instances (host:port): exec and container logs, which the API
	// server sends to the Node's enrolled address and this port. The port
	// is published as the Node's kubelet endpoint.
	KubeletAddress string
	// KubeletClientCAFile holds the CA of the client certificates the
	// kubelet API accepts: the cluster's client CA, which signs the API
	// server's kubelet client. Bearer tokens are checked by TokenReview.
	KubeletClientCAFile string
	// KubeletCertFile and KubeletKeyFile are the kubelet API's serving
	// certificate. Empty, the agent asks the cluster for one (a
	// CertificateSigningRequest of macrack.io/kubelet-serving for its
	// Node and the kubelet address, package servingcert), keeps its key
	// in StateDir, and serves a self-signed one until it is issued.
	KubeletCertFile, KubeletKeyFile string
	// JobPoll is how often a runner VM's job loop, which runs here on the
	// host, asks GitLab for its job; jobloop.DefaultPollInterval if zero.
	JobPoll time.Duration
	// GitLabRunner, if set, is gitlab-runner (18.1 or later) on this host:
	// each runner VM's job runs with it and the custom executor, whose
	// stages (RunnerStage, custom.DefaultStageBinary if empty) reach the
	// VM through the agent. The token stays on the host either way.
	GitLabRunner, RunnerStage string
	// NewJob, if set, makes each runner VM's job loop in place of the
	// project's own (jobloop.RunOne, the job's scripts run in the VM
	// through its exec channel): the fleet simulator's interpreter, say.
	NewJob jobs.NewWorkload
}

// kubeletPort is the port of KubeletAddress; 0 if the agent serves no
// kubelet API.
func (c Config) kubeletPort() (int32, error) {
	if c.KubeletAddress == "" {
		return 0, nil
	}
	ap, err := netip.ParseAddrPort(c.KubeletAddress)
	if err != nil || ap.Port() == 0 {
		return 0, fmt.Errorf("%w: the kubelet address %q is not an IP:port", ErrConfig, c.KubeletAddress)
	}
	return int32(ap.Port()), nil
}

// Run registers the chassis and runs the agent until ctx ends, or until
// it rebooted its host to clear a stuck quota: it returns ErrHostRebooted
// then, and its supervisor starts it again once the host is back (the
// sim's supervisor after a simulated reboot time).
func Run(parent context.Context, cfg *rest.Config, c Config) error {
	// The agent's goroutines all end with ctx; the host's reboot ends it.
	ctx, cancel := context.WithCancelCause(parent)
	defer cancel(nil)
	var wg sync.WaitGroup
	defer wg.Wait()
	rebooted := func() {
		// A host's shutdown gives its processes a moment: the agent's last
		// writes (the reboot's Event, sent in the background) go out.
		go func() {
			select {
			case <-ctx.Done():
			case <-c.Clock.After(rebootFlush):
			}
			cancel(ErrHostRebooted)
		}()
	}
	err := run(ctx, cfg, c, &wg, rebooted)
	cancel(nil)
	if errors.Is(context.Cause(ctx), ErrHostRebooted) {
		return ErrHostRebooted
	}
	return err
}

// rebootFlush is how long the agent goes on after it rebooted its host.
const rebootFlush = time.Second

func run(ctx context.Context, cfg *rest.Config, c Config, wg *sync.WaitGroup, rebooted func()) error {
	scheme, err := macrackscheme.New()
	if err != nil {
		return err
	}
	direct, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return fmt.Errorf("creating client: %w", err)
	}
	guestKey, err := host.LoadGuestKey(cmp.Or(c.GuestKeyFile, host.DefaultGuestKeyPath(c.StateDir)), c.Log)
	if err != nil {
		return err
	}
	// Published with the other facts, in the same write.
	c.Facts = host.GuestKeyFacts{FactsSource: c.Facts, Key: guestKey.Public()}
	if c.TokenFile != "" {
		if c.TokenTTL < 10*time.Minute || c.TokenTTL > host.MaxTokenTTL {
			return fmt.Errorf("%w: the token lifetime %s is not between 10m and %s, which agent.scope allows an agent", ErrConfig, c.TokenTTL, host.MaxTokenTTL)
		}
		renewer := &host.TokenRenewer{Client: direct, Namespace: c.AgentsNamespace, NodeName: c.NodeName,
			File: c.TokenFile, TTL: c.TokenTTL, Clock: c.Clock, Log: c.Log.WithName("token")}
		if err := renewer.Renew(ctx); err != nil {
			return err
		}
		wg.Go(func() { _ = renewer.Run(ctx) })
	}
	kubeletPort, err := c.kubeletPort()
	if err != nil {
		return err
	}
	if _, err := host.Register(ctx, direct, c.NodeName, kubeletPort); err != nil {
		return err
	}
	c.Log.Info("Registered", "node", c.NodeName)

	// The cache holds only this chassis' objects: its instances through
	// the status.nodeName selectable field, its own MacNode and Node.
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                 scheme,
		Logger:                 c.Log,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Controller:             config.Controller{SkipNameValidation: ptrTrue()},
		// Without managedFields, as the operator's: nothing reads them.
		Cache: cache.Options{DefaultTransform: cache.TransformStripManagedFields(), ByObject: map[client.Object]cache.ByObject{
			&computev1alpha1.MacOSInstance{}: {Field: fields.OneTermEqualSelector("status.nodeName", c.NodeName)},
			&fleetv1alpha1.MacNode{}:         {Field: fields.OneTermEqualSelector("metadata.name", c.NodeName)},
			&corev1.Node{}:                   {Field: fields.OneTermEqualSelector("metadata.name", c.NodeName)},
		}},
	})
	if err != nil {
		return fmt.Errorf("creating the agent's manager: %w", err)
	}
	recorder := mgr.GetEventRecorder("macrack-agent")
	// The one writer of status.reported: the facts, the quota, the
	// inventory, the golden cache and the wipes publish into it.
	rep := &report.Reporter{Client: direct, NodeName: c.NodeName, Clock: c.Clock, Log: c.Log.WithName("report")}
	wg.Go(func() { _ = rep.Run(ctx) })
	chassis := &images.Chassis{NodeName: c.NodeName, Direct: direct, Cached: mgr.GetClient(), Recorder: recorder, Report: rep,
		Clock: c.Clock, Log: c.Log.WithName("images"), Poll: c.Poll, ReportInterval: c.ImagesInterval}
	store := chassis.NewStore(images.StoreOptions{Root: filepath.Join(c.StateDir, "images"), BudgetOverride: c.ImageCacheBudget,
		Concurrency: c.PullConcurrency, RegistryAuth: c.RegistryAuth, Retry: c.PullRetry})
	if err := mgr.Add(manager.RunnableFunc(store.Run)); err != nil {
		return err
	}
	guests := &sessions.Guests{Launcher: c.Launcher, GuestPort: guest.DefaultPort, Reader: mgr.GetClient()}
	inst := &instances.Instances{
		Client: mgr.GetClient(), NodeName: c.NodeName, Launcher: c.Launcher, Disks: instances.Disks{Root: c.StateDir},
		Clock: c.Clock, StopGrace: cmp.Or(c.StopGrace, 30*time.Second), GuestPort: guest.DefaultPort, Poll: cmp.Or(c.Poll, 10*time.Second),
		NewMachineID: c.NewMachineID, APIReader: mgr.GetAPIReader(), Recorder: recorder,
		Images: store, Log: c.Log.WithName("instances"),
		BootID: c.BootID, Rebooter: c.Rebooter, Rebooted: rebooted, SimKernel: c.SimKernel,
		GuestKey: guestKey, Report: rep,
		Jobs: &jobs.Runners{Parent: ctx, New: c.jobLoop(), Log: c.Log.WithName("jobs")},
		Scripts: func(inst *computev1alpha1.MacOSInstance) jobs.ScriptRunner {
			return guests.Scripts(inst)
		},
	}
	// Before the first facts report: a Stuck of this boot must stand.
	if err := inst.LoadQuota(ctx); err != nil {
		c.Log.Error(err, "Taking up the last quota report failed; the facts source's word stands until the loop reports")
	}
	// This run's wipes, none yet, replace an earlier run's.
	rep.Wipes(inst.RecentWipes())
	if err := inst.SetupWithManager(mgr); err != nil {
		return err
	}
	if err := inst.SetupQuarantineWithManager(mgr); err != nil {
		return err
	}
	if err := mgr.Add(manager.RunnableFunc(inst.RunReaper)); err != nil {
		return err
	}
	if c.KubeletAddress != "" {
		if err := c.addKubelet(mgr, cfg); err != nil {
			return err
		}
	}
	hb := &host.Heartbeat{Client: direct, NodeName: c.NodeName, Interval: c.HeartbeatInterval, Clock: c.Clock, Log: c.Log.WithName("heartbeat")}
	wg.Go(func() { _ = hb.Run(ctx) })
	wg.Go(func() { c.reportFacts(ctx, rep) })
	wg.Go(func() { _ = chassis.RunReport(ctx, store) })
	// The pre-pull loop reads the MacNode, its class and the images from
	// the cache: the manager starts it once the cache has synced.
	if err := mgr.Add(manager.RunnableFunc(func(ctx context.Context) error { return chassis.RunPrePull(ctx, store) })); err != nil {
		return err
	}
	return mgr.Start(ctx)
}

// addKubelet serves the kubelet API of the chassis' instances once the
// cache has synced: exec, logs and port-forward, resolved from the cache,
// checked with TokenReviews and SubjectAccessReviews as the agent itself.
// Without certificate files, it serves the certificate the cluster signs
// for the kubelet address (servingcert), self-signed until then.
func (c Config) addKubelet(mgr manager.Manager, cfg *rest.Config) error {
	reviews, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("creating the kubelet API's review client: %w", err)
	}
	srv := &kubelet.Server{
		NodeName: c.NodeName, Addr: c.KubeletAddress, ClientCAFile: c.KubeletClientCAFile,
		TLSCertFile: c.KubeletCertFile, TLSKeyFile: c.KubeletKeyFile, Reviews: reviews,
		Resolver: kubelet.CacheResolver{Reader: mgr.GetClient(), NodeName: c.NodeName},
		Guests:   &sessions.Guests{Launcher: c.Launcher, GuestPort: guest.DefaultPort, Reader: mgr.GetClient()},
		Log:      c.Log.WithName("kubelet"),
	}
	if c.KubeletCertFile == "" && c.KubeletKeyFile == "" {
		// kubeletPort checked the address.
		addr := netip.MustParseAddrPort(c.KubeletAddress).Addr().Unmap()
		if addr.IsUnspecified() {
			c.Log.Info("The kubelet API listens on no one address: no serving certificate is asked of the cluster, and the self-signed one serves", "address", c.KubeletAddress)
		} else {
			certs := &servingcert.Requester{Client: reviews, NodeName: c.NodeName, Address: addr, Dir: c.StateDir,
				Clock: c.Clock, Log: c.Log.WithName("serving-certificate")}
			srv.Certificates = certs.GetCertificate
			if err := mgr.Add(manager.RunnableFunc(certs.Run)); err != nil {
				return err
			}
		}
	}
	return mgr.Add(manager.RunnableFunc(srv.Run))
}

// reportFacts publishes the facts at once, then every FactsInterval.
func (c Config) reportFacts(ctx context.Context, rep *report.Reporter) {
	for {
		if err := c.publishFacts(ctx, rep); err != nil {
			c.Log.Error(err, "Reading the facts failed")
		}
		select {
		case <-ctx.Done():
			return
		case <-c.Clock.After(c.FactsInterval):
		}
	}
}

// publishFacts publishes the facts, with the host's boot id. Their quota
// is the facts source's word, about this boot: the reporter sends it only
// until the instance loop reports its own, for only the loop sees the
// kernel refuse a start, and a Stuck it reported stands until it reports
// again, or the host reboots.
func (c Config) publishFacts(ctx context.Context, rep *report.Reporter) error {
	// A source that could read only some facts returns them with why the
	// rest are unknown: they are reported all the same, the unknown ones
	// cleared, so that the operator judges what is known now.
	facts, factsErr := c.Facts.Facts(ctx)
	if facts == nil {
		if factsErr != nil {
			return factsErr
		}
		facts = &fleetv1alpha1.ReportedFacts{}
	}
	if c.BootID != nil {
		// The operator reads a reboot from the boot id: report it with
		// every facts report, the first at start.
		if id, err := c.BootID.BootID(ctx); err != nil {
			c.Log.Error(err, "The host's boot id is unknown; the facts are reported without it")
		} else {
			facts.BootID = id
		}
	}
	if facts.Quota != nil {
		// The facts source's word is about the boot it was read in.
		facts.Quota.BootID = facts.BootID
	} else {
		// No refusal seen in this boot.
		facts.Quota = &fleetv1alpha1.QuotaReport{State: fleetv1alpha1.QuotaOK, BootID: facts.BootID}
	}
	rep.Facts(facts)
	return factsErr
}

func ptrTrue() *bool { t := true; return &t }

// WithTokenFile makes cfg read its bearer token from file, which the
// agent's token renewer rewrites. The bootstrap token in cfg seeds the file
// when there is none yet; after that, the file's token is the newer one.
func WithTokenFile(cfg *rest.Config, file string) (*rest.Config, error) {
	if cfg.BearerToken != "" {
		if _, err := os.Stat(file); errors.Is(err, fs.ErrNotExist) {
			if err := os.MkdirAll(filepath.Dir(file), 0o700); err != nil {
				return nil, fmt.Errorf("creating the token's directory: %w", err)
			}
			if err := os.WriteFile(file, []byte(cfg.BearerToken), 0o600); err != nil {
				return nil, fmt.Errorf("seeding the token file: %w", err)
			}
		}
	}
	out := rest.CopyConfig(cfg)
	out.BearerToken = ""
	out.BearerTokenFile = file
	return out, nil
}

// jobLoop makes each runner VM's job loop: NewJob, or the project's own,
// which asks GitLab for one job with the runner token, here, and runs the
// job's steps in the VM through its exec channel.
func (c Config) jobLoop() jobs.NewWorkload {
	if c.NewJob != nil {
		return c.NewJob
	}
	if c.GitLabRunner != "" {
		return func(parent context.Context, vm jobs.VM, log logr.Logger) guest.Workload {
			return jobloop.NewWorkload(parent, custom.RunFunc(custom.Options{
				GitLabRunner: c.GitLabRunner, StageBinary: c.RunnerStage,
				ConfigDir: filepath.Join(c.StateDir, "gitlab-runner"),
				VM:        vm.Scripts, LoginUser: vm.LoginUser, Hostname: vm.Name, Clock: c.Clock,
			}, log), log)
		}
	}
	return func(parent context.Context, vm jobs.VM, log logr.Logger) guest.Workload {
		return jobloop.NewWorkload(parent, func(ctx context.Context, cfg jobloop.Config, onState func(jobloop.State)) (jobloop.State, error) {
			cfg.PollInterval = c.JobPoll
			return jobloop.RunOne(ctx, cfg, jobs.Executor{Scripts: vm.Scripts}, c.Clock, log, onState)
		}, log)
	}
}
