// Package audit exports the audit and billing stream. One exporter per
// kind (leases, instances, chassis, images) publishes each object's
// unexported records to the sink. A journaled kind's records live in its
// object's status.audit until the sink acknowledges them, and its cursor,
// exportedSequence, says how far they are out. An instance's records are
// derived from the facts its status keeps (journal.Instance), each under
// an id of its fact, and what the sink acknowledged is remembered here.
// The audit finalizer holds a deleted object of any of these kinds until
// its last record is out.
// A failing sink closes a gate for a backoff on the injected clock; a
// retrier reopens it and enqueues everyone who waited.
package audit

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/source"

	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
	leasingv1alpha1 "github.com/boualleiguie/macrack-operator/api/leasing/v1alpha1"
	"github.com/boualleiguie/macrack-operator/internal/audit/denial"
	auditevent "github.com/boualleiguie/macrack-operator/internal/audit/event"
	auditsink "github.com/boualleiguie/macrack-operator/internal/audit/sink"
	"github.com/boualleiguie/macrack-operator/internal/conflict"
	"github.com/boualleiguie/macrack-operator/internal/finalizer"
)

// +kubebuilder:rbac:groups=leasing.macrack.io,resources=macnodeleases,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=leasing.macrack.io,resources=macnodeleases/status,verbs=patch
// +kubebuilder:rbac:groups=leasing.macrack.io,resources=macnodeleases/finalizers,verbs=update
// +kubebuilder:rbac:groups=compute.macrack.io,resources=macosinstances,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=compute.macrack.io,resources=macosinstances/status,verbs=patch
// +kubebuilder:rbac:groups=compute.macrack.io,resources=macosinstances/finalizers,verbs=update
// +kubebuilder:rbac:groups=fleet.macrack.io,resources=macnodes,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=fleet.macrack.io,resources=macnodes/status,verbs=patch
// +kubebuilder:rbac:groups=fleet.macrack.io,resources=macnodes/finalizers,verbs=update
// +kubebuilder:rbac:groups=fleet.macrack.io,resources=macosimages,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=fleet.macrack.io,resources=macosimages/status,verbs=patch
// +kubebuilder:rbac:groups=fleet.macrack.io,resources=macosimages/finalizers,verbs=update

// FieldOwner is the audit exporter's field manager. Each controller writes
// under its own, so that managedFields, and the writes suite's one-writer
// test, tell a status' owners apart.
const FieldOwner = "macrack-audit"

// Exporter exports every journaled kind, and the denials' buffer.
type Exporter struct {
	Client client.Client
	Clock  clock.Clock
	Sink   auditsink.Sink
	Origin auditevent.Origin
	// Denials, if set, is drained to the sink as well.
	Denials *denial.Buffer
	Metrics *Metrics
	// MaxConcurrentReconciles bounds each kind's parallel exports, each of
	// one object: an object's records still go out in order.
	MaxConcurrentReconciles int

	gate  *gate
	kinds []*kind
	// exporters are the kinds' reconcilers, by kind, whose memory of what
	// they sent the backlog's readers share.
	exporters map[string]*kindReconciler
	// retry reaches each kind's controller: the retrier sends it the
	// objects that waited for the sink.
	retry map[string]chan event.GenericEvent
}

// SetupWithManager registers one controller per kind, the retrier and the
// denials' drain. All of them run on the leader only.
func (e *Exporter) SetupWithManager(mgr ctrl.Manager) error {
	if e.Sink == nil {
		return errors.New("audit exporter: a sink is required")
	}
	if e.Metrics == nil {
		e.Metrics = NewMetrics()
	}
	e.gate = newGate(e.Clock)
	e.kinds = kinds()
	e.retry = map[string]chan event.GenericEvent{}
	for _, k := range e.kinds {
		ch := make(chan event.GenericEvent, 1024)
		e.retry[k.name] = ch
		r := &kindReconciler{e: e, k: k}
		if e.exporters == nil {
			e.exporters = map[string]*kindReconciler{}
		}
		e.exporters[k.name] = r
		if err := ctrl.NewControllerManagedBy(mgr).
			For(k.newObject()).
			Named("audit-" + k.name).
			WithOptions(controller.Options{MaxConcurrentReconciles: max(1, e.MaxConcurrentReconciles)}).
			WatchesRawSource(source.Channel(ch, &handler.EnqueueRequestForObject{})).
			Complete(conflict.Quiet(r)); err != nil {
			return fmt.Errorf("setting up the %s exporter: %w", k.name, err)
		}
	}
	e.Metrics.collector = &backlogCollector{client: mgr.GetClient(), clock: e.Clock, kinds: e.kinds, denials: e.Denials, billed: &e.Metrics.billed, waiting: e.waiting}
	if err := mgr.Add(manager.RunnableFunc(e.retrier)); err != nil {
		return err
	}
	if e.Denials != nil {
		// Every replica serves webhooks, and so drains its own refusals.
		return mgr.Add(everyReplica(e.drainDenials))
	}
	return nil
}

// everyReplica is a runnable that runs whether or not its replica leads.
type everyReplica func(context.Context) error

func (f everyReplica) Start(ctx context.Context) error { return f(ctx) }
func (everyReplica) NeedLeaderElection() bool          { return false }

// kindReconciler exports one kind.
type kindReconciler struct {
	e *Exporter
	k *kind

	// sent remembers, per object, the last sequence a sink acknowledged,
	// so that a pass on a cache that has not seen the cursor move yet, or
	// on an object whose cursor waits (kind.lazyCursor), does not send
	// those records again. A restart starts from the cursor in status, and
	// sends again what followed it.
	mu   sync.Mutex
	sent map[types.UID]int64
	// facts is, per object of a derived kind, what the sink acknowledged
	// and what was derived and is not out yet. The latter is kept so that
	// a fact its owner overwrites (the next run's start) before the sink
	// took its record (an outage) still goes out. A restart derives again
	// from status, and sends again what it finds there.
	facts map[types.UID]*facts
}

// facts are one object's derived records, as far as this exporter knows.
type facts struct {
	acked   map[string]bool
	pending []fleetv1alpha1.AuditRecord
}

// waiting is how many of o's records k's exporter knows no sink has
// acknowledged, and the time of the oldest.
func (e *Exporter) waiting(k *kind, o client.Object) (int64, time.Time) {
	if r := e.exporters[k.name]; r != nil {
		return r.waiting(o)
	}
	return (&kindReconciler{e: e, k: k}).waiting(o)
}

func (r *kindReconciler) lastSent(uid types.UID) int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.sent[uid]
}

func (r *kindReconciler) setSent(uid types.UID, seq int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.sent == nil {
		r.sent = map[types.UID]int64{}
	}
	if seq == 0 {
		delete(r.sent, uid)
		return
	}
	r.sent[uid] = max(r.sent[uid], seq)
}

// Reconcile reads like the export: journal what was observed, hold the
// object with the finalizer, publish what is unexported, advance the
// cursor, and let a deleted object go once its last record is out.
func (r *kindReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	e, k := r.e, r.k
	obj := k.newObject()
	if err := e.Client.Get(ctx, req.NamespacedName, obj); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if k.finalized && obj.GetDeletionTimestamp().IsZero() && !controllerutil.ContainsFinalizer(obj, fleetv1alpha1.AuditFinalizer) {
		// Tested on the finalizers alone: the object's other writers, its
		// status's among them, do not refuse it.
		if err := finalizer.Add(ctx, e.Client, obj, fleetv1alpha1.AuditFinalizer); err != nil {
			return ctrl.Result{}, fmt.Errorf("adding the audit finalizer to %s %s: %w", k.name, req, err)
		}
	}
	if !e.gate.open() {
		return ctrl.Result{}, nil // the retrier brings it back
	}
	if k.derive != nil {
		if !r.publishFacts(ctx, obj) {
			return ctrl.Result{}, nil // the gate closed; the retrier brings it back
		}
		return ctrl.Result{}, r.finalize(ctx, obj)
	}
	j := *k.journal(obj)
	if j == nil {
		j = &fleetv1alpha1.AuditJournal{} // its writer has not journaled it yet
	}
	sent := max(j.ExportedSequence, r.lastSent(obj.GetUID()))
	var recs []fleetv1alpha1.AuditRecord
	for _, rec := range j.Unexported() {
		if rec.Sequence > sent {
			recs = append(recs, rec)
		}
	}
	if len(recs) > 0 || sent > j.ExportedSequence {
		exported, err := r.publish(ctx, obj, recs)
		exported = max(exported, sent)
		// An object on its way out with its last record journaled keeps
		// its cursor: the finalizer's removal, moments later, says the
		// same, that every record is out, in one write rather than two. A
		// lease or an instance keeps it until its journal needs the room:
		// its records are few, and go out before its audit finalizer
		// does. A restart in between sends those records again, which a
		// sink takes as it takes any repeat (JetStream stores a record
		// once, on its own subject).
		if k.cursorDue(obj, j, exported) {
			if perr := r.advance(ctx, obj, exported); perr != nil {
				return ctrl.Result{}, errors.Join(err, perr)
			}
		}
		if err != nil {
			d := e.gate.fail()
			ctrl.LoggerFrom(ctx).Info("The audit sink refused a record; backing off", "kind", k.name, "backoff", d, "error", err.Error())
			return ctrl.Result{}, nil
		}
	}
	return ctrl.Result{}, r.finalize(ctx, obj)
}

// publishFacts sends a derived kind's records that the sink has not
// acknowledged, in order, each under the id of its fact. It reports false
// when the sink refused one: the gate is closed, and the rest wait.
func (r *kindReconciler) publishFacts(ctx context.Context, obj client.Object) bool {
	for _, rec := range r.pendingFacts(obj, true) {
		ev, err := r.e.Origin.Fact(r.k.name, r.k.controller, obj, rec)
		if err == nil {
			start := time.Now()
			if err = r.e.Sink.Publish(ctx, ev); err == nil {
				r.e.Metrics.published(r.k.name, time.Since(start))
				r.e.gate.succeed()
				r.ackFact(obj.GetUID(), ev.ID())
				continue
			}
			r.e.Metrics.failures.Inc()
		}
		d := r.e.gate.fail()
		ctrl.LoggerFrom(ctx).Info("The audit sink refused a record; backing off", "kind", r.k.name, "backoff", d, "error", err.Error())
		return false
	}
	return true
}

// pendingFacts is what of obj's derived records the sink has not
// acknowledged: those kept from earlier passes, then those derived now.
// keep remembers the latter; a read for the backlog does not, so that an
// object already let go, which the cache still shows, leaves nothing
// behind.
func (r *kindReconciler) pendingFacts(obj client.Object, keep bool) []fleetv1alpha1.AuditRecord {
	r.mu.Lock()
	defer r.mu.Unlock()
	f := r.facts[obj.GetUID()]
	if f == nil {
		f = &facts{acked: map[string]bool{}}
	}
	out := slices.Clone(f.pending)
	queued := make(map[string]bool, len(out))
	for _, p := range out {
		queued[r.factID(obj.GetUID(), p)] = true
	}
	for _, rec := range r.k.derive(obj) {
		if id := r.factID(obj.GetUID(), rec); !f.acked[id] && !queued[id] {
			queued[id] = true
			out = append(out, rec)
		}
	}
	if keep {
		f.pending = slices.Clone(out)
		if r.facts == nil {
			r.facts = map[types.UID]*facts{}
		}
		r.facts[obj.GetUID()] = f
	}
	return out
}

// ackFact records that the sink acknowledged the record id of uid.
func (r *kindReconciler) ackFact(uid types.UID, id string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	f := r.facts[uid]
	if f == nil {
		return
	}
	f.acked[id] = true
	f.pending = slices.DeleteFunc(f.pending, func(p fleetv1alpha1.AuditRecord) bool {
		return r.factID(uid, p) == id
	})
}

// factID is the id of uid's derived record rec, as the sink knows it.
func (r *kindReconciler) factID(uid types.UID, rec fleetv1alpha1.AuditRecord) string {
	return auditevent.FactID(r.k.name, string(uid), rec.Type, rec.Time.Time)
}

// waiting is how many of obj's records no sink has acknowledged, as far
// as this exporter knows, and the time of the oldest.
func (r *kindReconciler) waiting(obj client.Object) (n int64, oldest time.Time) {
	if r.k.derive != nil {
		recs := r.pendingFacts(obj, false)
		for _, rec := range recs {
			if oldest.IsZero() || rec.Time.Time.Before(oldest) {
				oldest = rec.Time.Time
			}
		}
		return int64(len(recs)), oldest
	}
	j := *r.k.journal(obj)
	sent := r.lastSent(obj.GetUID())
	for _, rec := range j.Unexported() {
		if rec.Sequence > sent && (oldest.IsZero() || rec.Time.Time.Before(oldest)) {
			oldest = rec.Time.Time
		}
	}
	return unacknowledged(j, sent), oldest
}

// forget drops what this exporter remembers of an object let go.
func (r *kindReconciler) forget(uid types.UID) {
	r.setSent(uid, 0)
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.facts, uid)
}

// publish sends recs in order, and returns the last sequence number the
// sink acknowledged.
func (r *kindReconciler) publish(ctx context.Context, obj client.Object, recs []fleetv1alpha1.AuditRecord) (int64, error) {
	var acked int64
	for _, rec := range recs {
		ev, err := r.e.Origin.Event(r.k.name, r.k.controller, obj, rec)
		if err != nil {
			return acked, err
		}
		start := time.Now()
		if err := r.e.Sink.Publish(ctx, ev); err != nil {
			r.e.Metrics.failures.Inc()
			return acked, err
		}
		r.e.Metrics.published(r.k.name, time.Since(start))
		r.e.gate.succeed()
		acked = rec.Sequence
		r.setSent(obj.GetUID(), acked)
	}
	return acked, nil
}

// advance writes the cursor alone: a merge patch of one field, which the
// journal's writer never writes.
func (r *kindReconciler) advance(ctx context.Context, obj client.Object, seq int64) error {
	p := client.RawPatch(types.MergePatchType, fmt.Appendf(nil, `{"status":{"audit":{"exportedSequence":%d}}}`, seq))
	if err := r.e.Client.Status().Patch(ctx, obj, p); err != nil {
		return fmt.Errorf("advancing the audit cursor of %s %s to %d: %w", r.k.name, client.ObjectKeyFromObject(obj), seq, err)
	}
	return nil
}

// finalize lets a deleted object go, once every other finalizer is gone or
// is one the kind takes (nothing will journal on it again) and its journal
// is exported: its last record, deleted, goes out first. Those it takes
// come off with its own, in one write.
func (r *kindReconciler) finalize(ctx context.Context, obj client.Object) error {
	if !r.k.finalized || obj.GetDeletionTimestamp().IsZero() || !controllerutil.ContainsFinalizer(obj, fleetv1alpha1.AuditFinalizer) {
		return nil
	}
	off := []string{fleetv1alpha1.AuditFinalizer}
	if r.k.takes != nil {
		off = append(off, r.k.takes(obj)...)
	}
	if slices.ContainsFunc(obj.GetFinalizers(), func(f string) bool { return !slices.Contains(off, f) }) {
		return nil
	}
	if n, _ := r.waiting(obj); n > 0 {
		return nil
	}
	ev, err := r.e.Origin.Deleted(r.k.name, r.k.controller, obj, r.e.Clock.Now())
	if err != nil {
		return err
	}
	if err := r.e.Sink.Publish(ctx, ev); err != nil {
		r.e.Metrics.failures.Inc()
		d := r.e.gate.fail()
		ctrl.LoggerFrom(ctx).Info("The audit sink refused a record; backing off", "kind", r.k.name, "backoff", d, "error", err.Error())
		return nil
	}
	if l, ok := obj.(*leasingv1alpha1.MacNodeLease); ok {
		r.e.Metrics.billed.add(l, r.e.Clock.Now())
	}
	r.forget(obj.GetUID())
	if err := finalizer.Remove(ctx, r.e.Client, obj, off...); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("removing the audit finalizer of %s %s: %w", r.k.name, client.ObjectKeyFromObject(obj), err)
	}
	return nil
}

// retrier wakes when the gate's backoff ends, on the injected clock, and
// enqueues every object that has records waiting or is held for them.
func (e *Exporter) retrier(ctx context.Context) error {
	for {
		at, waiting := e.gate.next()
		if !waiting {
			select {
			case <-e.gate.wake:
				continue
			case <-ctx.Done():
				return nil
			}
		}
		if d := at.Sub(e.Clock.Now()); d > 0 {
			select {
			case <-e.Clock.After(d):
			case <-e.gate.wake:
				continue
			case <-ctx.Done():
				return nil
			}
		}
		e.gate.retried()
		if err := e.enqueueWaiting(ctx); err != nil {
			ctrl.LoggerFrom(ctx).Error(err, "Listing the objects that wait for the audit sink failed")
		}
	}
}

func (e *Exporter) enqueueWaiting(ctx context.Context) error {
	for _, k := range e.kinds {
		// Uncopied: each object is only read, and its key enqueued; a
		// copy of every object of the kind per retry was a fleet's worth.
		list := k.newList()
		if err := e.Client.List(ctx, list, client.UnsafeDisableDeepCopy); err != nil {
			return err
		}
		for _, o := range objects(list) {
			if n, _ := e.waiting(k, o); n > 0 || !o.GetDeletionTimestamp().IsZero() {
				select {
				case e.retry[k.name] <- event.GenericEvent{Object: o}:
				case <-ctx.Done():
					return nil
				}
			}
		}
	}
	return nil
}

// drainDenials publishes the refusals' buffer, one at a time, waiting out
// the gate like everyone else.
func (e *Exporter) drainDenials(ctx context.Context) error {
	for {
		d, ok := e.Denials.Next(ctx)
		if !ok {
			return nil
		}
		ev, err := e.Origin.Denial(d)
		if err != nil {
			ctrl.LoggerFrom(ctx).Error(err, "A denial could not be made a record", "rule", d.Rule)
			e.Metrics.dropped.WithLabelValues(reasonUnencodable).Inc()
			continue
		}
		for {
			if e.gate.open() {
				if err := e.Sink.Publish(ctx, ev); err == nil {
					e.Metrics.published(fleetv1alpha1.AuditKindDenial, 0)
					e.gate.succeed()
					break
				}
				e.Metrics.failures.Inc()
				e.gate.fail()
			}
			at, _ := e.gate.next()
			select {
			case <-e.Clock.After(max(at.Sub(e.Clock.Now()), minBackoff)):
			case <-ctx.Done():
				return nil
			}
		}
	}
}
