package admission

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	computev1alpha1 "github.com/boualleiguie/macrack-operator/api/compute/v1alpha1"
	leasingv1alpha1 "github.com/boualleiguie/macrack-operator/api/leasing/v1alpha1"
	"github.com/boualleiguie/macrack-operator/internal/inventory"
	"github.com/boualleiguie/macrack-operator/internal/policy"
)

// Reservations make instance.cap exact at admission, as ResourceQuota's
// admission plugin makes a quota exact: the webhook decides a new instance
// on the lease and its instances read live, counting the instances it has
// admitted that are not stored yet (the lease's status.reservations), and
// records its own admission there, with the lease's resourceVersion, before
// it answers. Two concurrent admissions cannot both count the same room: the
// second write conflicts, and decides again on what the first wrote.
//
// This is the one writer of status.reservations.
type Reservations struct {
	// Live reads the lease and its instances from the API server, never a
	// cache (and the rest of the inventory before a refusal); Writer writes
	// the lease's status.
	Live   client.Reader
	Writer client.StatusClient
	// TTL is how long a reservation whose instance was never stored
	// counts (leasingv1alpha1.ReservationTTL).
	TTL time.Duration
	// Attempts bounds the writes tried for one admission; each conflict
	// means another admission or a status write went first.
	Attempts int

	turns turns
}

// NewReservations returns the ledger of the operator's webhook.
func NewReservations(live client.Reader, w client.Client) *Reservations {
	return &Reservations{Live: live, Writer: w, TTL: leasingv1alpha1.ReservationTTL, Attempts: 32}
}

// isInstanceCreate is a request the reservations decide.
func isInstanceCreate(req admission.Request) bool {
	return req.Operation == "CREATE" && req.SubResource == "" &&
		req.Kind.Group == computev1alpha1.GroupVersion.Group && req.Kind.Kind == "MacOSInstance"
}

// admitInstance decides a new instance on the lease and its instances read
// live, counting the lease's reservations, and, unless the request is a dry
// run, reserves its room on the lease before it answers. The class, the
// image and the MacNode come from the cache, and are read live only when
// the decision refuses on another rule than instance.cap.
func (v *PolicyValidator) admitInstance(ctx context.Context, req admission.Request, in policy.Input) policy.Decision {
	log := ctrl.LoggerFrom(ctx)
	r := v.Reservations
	kind := schema.GroupKind{Group: req.Kind.Group, Kind: req.Kind.Kind}
	dryRun := req.DryRun != nil && *req.DryRun
	uid, _, _ := unstructured.NestedString(in.Object, "metadata", "uid")
	name, _, _ := unstructured.NestedString(in.Object, "metadata", "name")
	leaseName, _, _ := unstructured.NestedString(in.Object, "spec", "leaseName")
	key := client.ObjectKey{Namespace: req.Namespace, Name: leaseName}
	if key.Name == "" {
		// The schema requires leaseName; without it instance.tenant
		// refuses, and there is no lease to count on.
		return v.decideOn(ctx, kind, in, nil, nil, nil, r.Live)
	}
	release, err := r.turns.take(ctx, key)
	if err != nil {
		return failed(fmt.Errorf("waiting for the other admissions on lease %s: %w", key, err))
	}
	defer release()
	for attempt := 1; ; attempt++ {
		lease := &leasingv1alpha1.MacNodeLease{}
		if err := r.Live.Get(ctx, key, lease); err != nil {
			if apierrors.IsNotFound(err) {
				return v.decideOn(ctx, kind, in, nil, nil, nil, r.Live) // instance.tenant refuses it
			}
			return failed(fmt.Errorf("reading lease %s: %w", key, err))
		}
		instances, listVersion, err := r.instances(ctx, lease)
		if err != nil {
			return failed(err)
		}
		now := v.Clock.Now()
		kept := withoutName(pending(lease.Status.Reservations, instances, now, r.TTL), name)
		d := v.decideOn(ctx, kind, in, lease, instances, reservationMaps(kept), nil)
		if !d.Allowed() && !onlyCap(d) {
			// The cache may lag behind what the tenant saw (an image just
			// resolved): decide again on live reads before refusing.
			d = v.decideOn(ctx, kind, in, lease, instances, reservationMaps(kept), r.Live)
		}
		if !d.Allowed() || dryRun || uid == "" {
			return d
		}
		if nameTaken(instances, name, uid) {
			// The API server refuses the name after admission: a
			// reservation would only count against the next create.
			return d
		}
		err = r.record(ctx, lease, append(kept, leasingv1alpha1.InstanceReservation{UID: uid, Name: name, At: metav1.NewTime(now)}), listVersion)
		switch {
		case err == nil:
			log.V(1).Info("Reserved room for the instance", "lease", key, "reserved", len(kept)+1, "attempt", attempt)
			return d
		case apierrors.IsConflict(err) && attempt < r.Attempts:
			// Another admission, or the operator, wrote the lease first:
			// decide again on what it wrote.
			time.Sleep(time.Duration(rand.Int64N(int64(5 * time.Millisecond))))
			continue
		default:
			return failed(fmt.Errorf("recording the admission on lease %s after %d attempts: %w", key, attempt, err))
		}
	}
}

// decideOn decides with the lease, its instances and its reservations given
// (read live), and the rest of the inventory as the request's input read it
// from the cache, or read again through getter when set.
func (v *PolicyValidator) decideOn(ctx context.Context, kind schema.GroupKind, in policy.Input,
	lease *leasingv1alpha1.MacNodeLease, instances, reservations []any, getter client.Reader) policy.Decision {
	inv := maps.Clone(in.Inventory)
	if getter != nil {
		var err error
		if inv, err = (inventory.Builder{Reader: v.Inventory.Reader, Getter: getter}).For(ctx, kind, in.Object, nil); err != nil {
			return failed(fmt.Errorf("reading the inventory: %w", err))
		}
	}
	if inv == nil {
		inv = map[string]any{}
	}
	if lease != nil {
		m, err := inventory.ToMap(lease)
		if err != nil {
			return failed(err)
		}
		inv["lease"] = m
		inv["leaseInstances"] = instances
		inv["leaseReservations"] = reservations
	}
	in.Inventory = inv
	d, err := v.Engine.Decide(ctx, in)
	if err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Policy input refused")
	}
	return d
}

func onlyCap(d policy.Decision) bool {
	for _, viol := range d.Violations {
		if viol.Code != "instance.cap" {
			return false
		}
	}
	return true
}

// instances lists the lease's instances from the API server's watch cache,
// at least as new as the list the reservations were last decided on: a
// reservation dropped because its instance was listed is never counted by
// a list that misses the instance, on any API server. (A quorum read would
// wait for the watch cache to catch up with every other write: 80 ms here.)
func (r *Reservations) instances(ctx context.Context, lease *leasingv1alpha1.MacNodeLease) ([]any, string, error) {
	version := lease.Status.ReservationsListVersion
	if version == "" {
		version = "0"
	}
	list := &computev1alpha1.MacOSInstanceList{}
	if err := r.Live.List(ctx, list, client.InNamespace(lease.Namespace), client.MatchingFields{LeaseNameField: lease.Name},
		&client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: version, ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan}}); err != nil {
		return nil, "", fmt.Errorf("listing the instances of lease %s/%s: %w", lease.Namespace, lease.Name, err)
	}
	out := make([]any, 0, len(list.Items))
	for i := range list.Items {
		m, err := inventory.ToMap(&list.Items[i])
		if err != nil {
			return nil, "", err
		}
		out = append(out, m)
	}
	return out, list.ResourceVersion, nil
}

// LeaseNameField is MacOSInstance's selectable field for its lease.
const LeaseNameField = "spec.leaseName"

// record writes the lease's reservations, with its resourceVersion, under
// the one field manager. It is an update of the lease as read live, not a
// patch: the resourceVersion makes both exact, and the verb is what puts
// the write in the webhook's own priority level (AdmissionFlowSchema),
// apart from the controllers' status patches.
func (r *Reservations) record(ctx context.Context, lease *leasingv1alpha1.MacNodeLease, entries []leasingv1alpha1.InstanceReservation, listVersion string) error {
	lease.Status.Reservations = entries
	lease.Status.ReservationsListVersion = listVersion
	return r.Writer.Status().Update(ctx, lease, client.FieldOwner(leasingv1alpha1.ReservationFieldManager))
}

// pending are the reservations that still count: those whose instance is
// not stored (a stored one counts as itself), made less than ttl ago.
func pending(entries []leasingv1alpha1.InstanceReservation, instances []any, now time.Time, ttl time.Duration) []leasingv1alpha1.InstanceReservation {
	return pendingSeen(entries, instances, nil, now, ttl)
}

// pendingSeen is pending, dropping too the reservations of instances seen
// stored since, listed or not: one deleted before the list no longer counts.
func pendingSeen(entries []leasingv1alpha1.InstanceReservation, instances []any, seen map[types.UID]bool, now time.Time, ttl time.Duration) []leasingv1alpha1.InstanceReservation {
	stored := uids(instances)
	var out []leasingv1alpha1.InstanceReservation
	for _, e := range entries {
		if stored[e.UID] || seen[types.UID(e.UID)] || !now.Before(e.At.Add(ttl)) {
			continue
		}
		out = append(out, e)
	}
	return out
}

// withoutName drops the reservation of an earlier create of the same name:
// the same create retried (the first timed out, or a later admission step
// refused it) replaces its own reservation: a name is stored at most once,
// so the two never both run. Were the earlier one stored after all, it
// counts as itself, and the retry's reservation over-counts until the TTL,
// never under.
func withoutName(entries []leasingv1alpha1.InstanceReservation, name string) []leasingv1alpha1.InstanceReservation {
	if name == "" {
		return entries
	}
	out := entries[:0:0]
	for _, e := range entries {
		if e.Name != name {
			out = append(out, e)
		}
	}
	return out
}

func uids(instances []any) map[string]bool {
	stored := map[string]bool{}
	for _, i := range instances {
		if m, ok := i.(map[string]any); ok {
			uid, _, _ := unstructured.NestedString(m, "metadata", "uid")
			stored[uid] = true
		}
	}
	return stored
}

// nameTaken is whether a stored instance that is not being deleted holds
// the name: the API server will refuse the create as AlreadyExists, and a
// reservation would only count against the next create. (One deleted, with
// no finalizer yet, in the instant between this read and the store lets the
// create through unreserved; it is counted live from then on, and
// placement's slot claim stays the authority on what runs.)
func nameTaken(instances []any, name, uid string) bool {
	for _, i := range instances {
		m, _ := i.(map[string]any)
		meta, _ := m["metadata"].(map[string]any)
		if meta == nil || meta["name"] != name || meta["uid"] == uid {
			continue
		}
		if meta["deletionTimestamp"] == nil {
			return true
		}
	}
	return false
}

func reservationMaps(entries []leasingv1alpha1.InstanceReservation) []any {
	out := make([]any, 0, len(entries))
	for _, e := range entries {
		out = append(out, map[string]any{"uid": e.UID, "name": e.Name, "at": e.At.UTC().Format(time.RFC3339)})
	}
	return out
}

// failed refuses, as the engine refuses what it cannot decide: closed.
func failed(err error) policy.Decision {
	return policy.Decision{Violations: []policy.Violation{{
		Rule: "instance.cap", Code: policy.CodeError,
		Message: fmt.Sprintf("policy.error: instance.cap could not be decided exactly: %v", err),
	}}}
}

// prune drops the lease's reservations that no longer count, read live, as
// the same writer: those whose instance is listed or was seen stored, and
// those past the TTL. It reports a conflict, which the caller retries.
func (r *Reservations) prune(ctx context.Context, key client.ObjectKey, seen map[types.UID]bool, now time.Time) error {
	lease := &leasingv1alpha1.MacNodeLease{}
	if err := r.Live.Get(ctx, key, lease); err != nil {
		return client.IgnoreNotFound(err)
	}
	if len(lease.Status.Reservations) == 0 {
		return nil
	}
	instances, listVersion, err := r.instances(ctx, lease)
	if err != nil {
		return err
	}
	kept := pendingSeen(lease.Status.Reservations, instances, seen, now, r.TTL)
	if len(kept) == len(lease.Status.Reservations) {
		return nil
	}
	if err := r.record(ctx, lease, kept, listVersion); err != nil {
		return fmt.Errorf("pruning the reservations of lease %s: %w", key, err)
	}
	return nil
}

// Sweeper is the operator's pass over the leases' reservations, through
// the webhook's own writer: as each instance is stored it drops its
// reservation (an instance deleted soon after would otherwise count until
// the TTL), and every Period of the business clock it drops those whose
// instance was never stored within the TTL.
type Sweeper struct {
	Reservations *Reservations
	// Cache lists the leases; only those it shows with reservations are
	// read live.
	Cache  client.Reader
	Clock  clock.Clock
	Period time.Duration

	// seen are the instances the cache saw stored, by lease, until a pass
	// drops their reservations: the instance may be deleted before the
	// pass lists it, or the lease's reservation reach the cache after the
	// instance does.
	seen seenInstances
}

// seenInstances are the uids of instances seen stored, by lease.
type seenInstances struct {
	mu      sync.Mutex
	byLease map[client.ObjectKey]map[types.UID]time.Time
}

func (s *seenInstances) add(lease client.ObjectKey, uid types.UID, at time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.byLease == nil {
		s.byLease = map[client.ObjectKey]map[types.UID]time.Time{}
	}
	if s.byLease[lease] == nil {
		s.byLease[lease] = map[types.UID]time.Time{}
	}
	s.byLease[lease][uid] = at
}

// of is a copy of the lease's seen uids.
func (s *seenInstances) of(lease client.ObjectKey) map[types.UID]bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[types.UID]bool, len(s.byLease[lease]))
	for uid := range s.byLease[lease] {
		out[uid] = true
	}
	return out
}

// forget drops the given uids of the lease: their reservations are gone.
func (s *seenInstances) forget(lease client.ObjectKey, uids map[types.UID]bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for uid := range uids {
		delete(s.byLease[lease], uid)
	}
	if len(s.byLease[lease]) == 0 {
		delete(s.byLease, lease)
	}
}

// expire drops the uids seen before cutoff: past the TTL their reservations
// count no more anyway.
func (s *seenInstances) expire(cutoff time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for lease, uids := range s.byLease {
		for uid, at := range uids {
			if at.Before(cutoff) {
				delete(uids, uid)
			}
		}
		if len(uids) == 0 {
			delete(s.byLease, lease)
		}
	}
}

// Seen records that the cache saw the instance stored on its lease.
func (s *Sweeper) Seen(lease client.ObjectKey, uid types.UID) {
	s.seen.add(lease, uid, s.Clock.Now())
}

// NeedLeaderElection implements manager.LeaderElectionRunnable: one sweeper.
func (s *Sweeper) NeedLeaderElection() bool { return true }

// Start implements manager.Runnable.
func (s *Sweeper) Start(ctx context.Context) error {
	log := ctrl.LoggerFrom(ctx).WithName("reservations")
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-s.Clock.After(s.Period):
			s.seen.expire(s.Clock.Now().Add(-s.Reservations.TTL))
			leases := &leasingv1alpha1.MacNodeLeaseList{}
			// Uncopied: only their keys are read.
			if err := s.Cache.List(ctx, leases, client.UnsafeDisableDeepCopy); err != nil {
				log.Error(err, "Listing leases failed")
				continue
			}
			for i := range leases.Items {
				key := client.ObjectKeyFromObject(&leases.Items[i])
				if _, err := s.Reconcile(ctx, ctrl.Request{NamespacedName: key}); err != nil && !apierrors.IsConflict(err) {
					log.Error(err, "Pruning reservations failed", "lease", key)
				}
			}
		}
	}
}

// Reconcile implements reconcile.Reconciler: a lease with reservations,
// or one of its instances, was written. Only a lease the cache shows with
// reservations is read live.
func (s *Sweeper) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	cached := &leasingv1alpha1.MacNodeLease{}
	if err := s.Cache.Get(ctx, req.NamespacedName, cached); err != nil {
		if apierrors.IsNotFound(err) {
			s.seen.forget(req.NamespacedName, s.seen.of(req.NamespacedName))
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if len(cached.Status.Reservations) == 0 {
		// The reservation may not have reached the cache yet: keep what
		// was seen for the lease's next event.
		return ctrl.Result{}, nil
	}
	seen := s.seen.of(req.NamespacedName)
	if err := s.Reservations.prune(ctx, req.NamespacedName, seen, s.Clock.Now()); err != nil {
		// A conflict (another admission wrote the lease first) is retried
		// quietly on what it wrote: conflict.Quiet wraps the sweeper.
		return ctrl.Result{}, err
	}
	s.seen.forget(req.NamespacedName, seen)
	return ctrl.Result{}, nil
}
