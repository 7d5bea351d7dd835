// Package gitlabrunner reconciles GitLabRunners: it keeps a warm pool of
// macOS VMs in the runner's lease, one GitLab CI job per VM, and replaces
// each VM with a fresh clone when its job ends.
//
// It acts as a tenant. Every MacOSInstance it creates or deletes, and the
// token Secret it reads, goes through the API server as the namespace's
// macrack-gitlab-runner ServiceAccount, so MacRack's policies refuse it
// what they refuse any tenant (it holds none of the operator's
// exemptions). It imports no policy, inventory or index code (a boundary
// test says so). Only its own object's finalizer and status, and its
// Events, are written as the operator, as any controller writes its own.
package gitlabrunner

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	computev1alpha1 "github.com/boualleiguie/macrack-operator/api/compute/v1alpha1"
	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
	leasingv1alpha1 "github.com/boualleiguie/macrack-operator/api/leasing/v1alpha1"
	workloadsv1alpha1 "github.com/boualleiguie/macrack-operator/api/workloads/v1alpha1"
	"github.com/boualleiguie/macrack-operator/internal/conflict"
	"github.com/boualleiguie/macrack-operator/internal/patch"
)

// +kubebuilder:rbac:groups=workloads.macrack.io,resources=gitlabrunners,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=workloads.macrack.io,resources=gitlabrunners/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=workloads.macrack.io,resources=gitlabrunners/finalizers,verbs=update
// +kubebuilder:rbac:groups="",resources=serviceaccounts,verbs=impersonate,resourceNames=macrack-gitlab-runner

// Defaults.
const (
	// DefaultVerifyInterval is how often a registered token is verified
	// again, so that a revoked one is seen without a Secret watch (the
	// operator reads no Secrets of its own accord).
	DefaultVerifyInterval = 10 * time.Minute
	// jobGrace is how long past maxJobDuration the controller waits for the
	// guest to end the job itself before it destroys the VM.
	jobGrace = time.Minute
	// unregisterPatience bounds how long a deleted runner waits for GitLab
	// to take its managers' unregistration.
	unregisterPatience = 2 * time.Minute
	// waitRetry paces a pool that waits on something no watch announces.
	waitRetry = 10 * time.Second
)

// FieldOwner is the GitLabRunner controller's field manager. Each controller
// writes under its own, so that managedFields, and the writes suite's one-writer
// test, tell a status' owners apart.
const FieldOwner = "macrack-gitlab-runner"

// Reconciler reconciles GitLabRunners.
type Reconciler struct {
	// Client reads from the operator's cache, and writes the runner's own
	// finalizer and status.
	Client client.Client
	// Tenants gives the client that acts as a namespace's
	// macrack-gitlab-runner ServiceAccount.
	Tenants TenantClients
	// GitLab connects to a runner's GitLab.
	GitLab GitLabFactory
	Clock  clock.PassiveClock
	// Recorder writes Events about runners.
	Recorder events.EventRecorder
	// VerifyInterval is how often a token is verified again;
	// DefaultVerifyInterval if zero.
	VerifyInterval time.Duration
	// AllowedHosts, if set, are the only GitLab hosts runners may name
	// (exact, or "*.example.com"): the operator's egress is the platform's.
	AllowedHosts []string
	// MaxConcurrentReconciles bounds parallel reconciles.
	MaxConcurrentReconciles int
	// Ticks, if set, enqueues runners from outside the cluster: tests step
	// a fake clock and send the runners whose time has come.
	Ticks <-chan event.GenericEvent

	mu sync.Mutex
	// verified remembers, per runner, which token was verified when, by
	// digest only; never written anywhere.
	verified map[types.UID]verification
	// unregistering remembers when a deleted runner first tried to
	// unregister its managers.
	unregistering map[types.UID]time.Time
}

// SetupWithManager registers the controller, its index and its watches.
func (r *Reconciler) SetupWithManager(ctx context.Context, mgr ctrl.Manager) error {
	if r.Tenants == nil || r.GitLab == nil || r.Clock == nil {
		return errors.New("gitlabrunner: Tenants, GitLab and Clock are required")
	}
	if err := mgr.GetFieldIndexer().IndexField(ctx, &workloadsv1alpha1.GitLabRunner{}, runnersByLease, func(o client.Object) []string {
		return []string{o.(*workloadsv1alpha1.GitLabRunner).Spec.LeaseName}
	}); err != nil {
		return fmt.Errorf("indexing GitLabRunners by lease: %w", err)
	}
	b := ctrl.NewControllerManagedBy(mgr).
		For(&workloadsv1alpha1.GitLabRunner{}).
		Named("gitlabrunner").
		WithOptions(controller.Options{MaxConcurrentReconciles: max(1, r.MaxConcurrentReconciles)}).
		Watches(&computev1alpha1.MacOSInstance{}, handler.EnqueueRequestsFromMapFunc(runnerOfInstance)).
		Watches(&leasingv1alpha1.MacNodeLease{}, handler.EnqueueRequestsFromMapFunc(r.runnersOfLease)).
		Watches(&fleetv1alpha1.MacNode{}, handler.EnqueueRequestsFromMapFunc(r.runnersOfMacNode))
	if r.Ticks != nil {
		b = b.WatchesRawSource(source.Channel(r.Ticks, &handler.EnqueueRequestForObject{}))
	}
	return b.Complete(conflict.Quiet(r))
}

// runnersByLease indexes GitLabRunners by their spec.leaseName (within
// their namespace).
const runnersByLease = "gitlabrunner.spec.leaseName"

// runnerOfInstance maps an instance to the runner that owns it.
func runnerOfInstance(_ context.Context, obj client.Object) []reconcile.Request {
	if o := ownerRunner(obj); o != "" {
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: obj.GetNamespace(), Name: o}}}
	}
	return nil
}

func (r *Reconciler) runnersOfLease(ctx context.Context, obj client.Object) []reconcile.Request {
	return r.runnersOf(ctx, obj.GetNamespace(), obj.GetName())
}

// runnersOfMacNode maps a chassis to the runners of the lease bound to it:
// its quarantine and recovery change what their pools may do.
func (r *Reconciler) runnersOfMacNode(ctx context.Context, obj client.Object) []reconcile.Request {
	b := obj.(*fleetv1alpha1.MacNode).Status.Binding
	if b == nil {
		return nil
	}
	return r.runnersOf(ctx, b.LeaseNamespace, b.LeaseName)
}

func (r *Reconciler) runnersOf(ctx context.Context, namespace, lease string) []reconcile.Request {
	list := &workloadsv1alpha1.GitLabRunnerList{}
	if err := r.Client.List(ctx, list, client.InNamespace(namespace), client.MatchingFields{runnersByLease: lease}); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Listing the runners of a lease failed", "MacNodeLease", namespace+"/"+lease)
		return nil
	}
	reqs := make([]reconcile.Request, 0, len(list.Items))
	for i := range list.Items {
		reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])})
	}
	return reqs
}

// Reconcile keeps one runner's warm pool, or tears it down.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (res ctrl.Result, retErr error) {
	runner := &workloadsv1alpha1.GitLabRunner{}
	if err := r.Client.Get(ctx, req.NamespacedName, runner); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if runner.DeletionTimestamp.IsZero() && controllerutil.AddFinalizer(runner, workloadsv1alpha1.RunnerFinalizer) {
		if err := r.Client.Update(ctx, runner); err != nil {
			return ctrl.Result{}, fmt.Errorf("adding finalizer to GitLabRunner %s: %w", req, err)
		}
	}

	s := &scope{runner: runner, now: r.Clock.Now()}
	s.tenant, s.tenantErr = r.Tenants.For(runner.Namespace)
	helper := patch.NewHelper(runner, r.Client)
	defer func() {
		r.updateStatus(s)
		// As cluster-api's machine controller: the generation is observed
		// only by a pass that succeeded.
		if retErr == nil {
			runner.Status.ObservedGeneration = runner.Generation
		}
		if s.lockStatus {
			helper.LockStatus()
		}
		if err := helper.Patch(ctx, runner); err != nil && !apierrors.IsNotFound(err) {
			retErr = errors.Join(retErr, fmt.Errorf("patching GitLabRunner %s: %w", req, err))
		}
	}()

	if !runner.DeletionTimestamp.IsZero() {
		return r.reconcileDelete(ctx, s)
	}
	return r.reconcileNormal(ctx, s)
}

// scope carries one reconcile's observations to the status computation.
type scope struct {
	runner *workloadsv1alpha1.GitLabRunner
	now    time.Time

	// tenant is the client acting as the namespace's runner identity.
	tenant    client.Client
	tenantErr error

	// token is the runner authentication token, read this pass; it lives
	// only here, in memory, and in the sealed configs.
	token string

	// registered is Registered's status, reason and message.
	registered condition
	// blocked, if set, is why the pool cannot grow: Degraded's reason and
	// message.
	blocked condition

	lease *leasingv1alpha1.MacNodeLease
	node  *fleetv1alpha1.MacNode
	// capacity is how many VMs the pool keeps: concurrency, within the
	// class's vmCapacity.
	capacity int32

	slots []workloadsv1alpha1.PoolSlot
	idle  int32
	busy  int32
	// deleted: the runner's VMs are all gone (deletion).
	deleted bool
	// lockStatus: this pass recorded a job; its status write must not
	// apply over a newer status.
	lockStatus bool
}

type condition struct {
	set             bool
	ok              bool
	reason, message string
}

func (c *condition) to(ok bool, reason, format string, args ...any) {
	*c = condition{set: true, ok: ok, reason: reason, message: fmt.Sprintf(format, args...)}
}

func (r *Reconciler) verifyInterval() time.Duration {
	if r.VerifyInterval > 0 {
		return r.VerifyInterval
	}
	return DefaultVerifyInterval
}
