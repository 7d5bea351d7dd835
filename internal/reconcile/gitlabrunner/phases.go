package gitlabrunner

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	computev1alpha1 "github.com/boualleiguie/macrack-operator/api/compute/v1alpha1"
	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
	leasingv1alpha1 "github.com/boualleiguie/macrack-operator/api/leasing/v1alpha1"
	workloadsv1alpha1 "github.com/boualleiguie/macrack-operator/api/workloads/v1alpha1"
	"github.com/boualleiguie/macrack-operator/internal/gitlab"
)

// reconcileNormal keeps the pool: it ends the VMs whose job is over, and
// fills every empty slot with a fresh one when the runner is registered and
// its chassis can take one.
func (r *Reconciler) reconcileNormal(ctx context.Context, s *scope) (ctrl.Result, error) {
	runner := s.runner
	var next requeue
	if s.tenantErr != nil {
		return ctrl.Result{}, s.tenantErr
	}
	owned, orphans, err := r.ownedInstances(ctx, runner)
	if err != nil {
		return ctrl.Result{}, err
	}
	var errs []error
	for _, inst := range orphans {
		if err := r.end(ctx, s, inst, "its runner of that name is gone"); err != nil {
			errs = append(errs, err)
		}
	}

	gl, ok := r.connect(s)
	if ok && r.readToken(ctx, s) {
		next.after(r.verify(ctx, s, gl))
	}
	if !s.registered.ok {
		// No watch announces a fixed Secret or a new RoleBinding: look
		// again.
		next.after(waitRetry)
	}

	r.observeLease(ctx, s)

	// The pool: each owned VM is judged, and the finished, failed and
	// overdue ones are ended.
	bySlot := map[int32][]*computev1alpha1.MacOSInstance{}
	for _, inst := range owned {
		bySlot[slotOf(inst)] = append(bySlot[slotOf(inst)], inst)
	}
	maxJob := runner.Spec.MaxJobDuration.Duration
	// Slot MaxConcurrency gathers VMs whose slot label is not a slot's.
	for slot := int32(0); slot <= workloadsv1alpha1.MaxConcurrency; slot++ {
		ps := workloadsv1alpha1.PoolSlot{Index: slot, SystemID: SystemID(string(runner.UID), slot), Generation: generation(runner, slot, bySlot[slot])}
		var current *computev1alpha1.MacOSInstance
		var cur verdict
		// The newest VM that is not going is the slot's; a VM still going
		// holds the slot until its disk is wiped, when placement frees its
		// place on the chassis.
		held := false
		for _, inst := range bySlot[slot] {
			v := r.judge(s, inst, maxJob)
			if v.record != nil && r.recordJob(s, *v.record) {
				// The record is written, on the status it was read
				// with, before the VM goes: a pass on a stale read
				// would lose it, and the VM with it.
				s.lockStatus = true
				v.end, v.state = "", workloadsv1alpha1.SlotDraining
			}
			next.after(v.retryAt)
			if v.end == "" && v.state != workloadsv1alpha1.SlotDraining && current != nil && cur.state != workloadsv1alpha1.SlotBusy {
				// Two VMs in one slot (a lost race): the older idle one goes.
				if err := r.end(ctx, s, current, "a newer VM fills its slot"); err != nil {
					errs = append(errs, err)
				}
				held = held || unwiped(current)
				current = nil
			}
			if v.end != "" {
				if err := r.end(ctx, s, inst, v.end); err != nil {
					errs = append(errs, err)
				}
				v.state = workloadsv1alpha1.SlotDraining
			}
			if v.state == workloadsv1alpha1.SlotDraining {
				held = held || unwiped(inst)
				continue
			}
			current, cur = inst, v
		}
		if current != nil {
			ps.Instance, ps.State, ps.JobID = current.Name, cur.state, cur.jobID
		}
		switch {
		case current != nil && slot >= s.capacity && cur.state != workloadsv1alpha1.SlotBusy:
			// The pool shrank: a VM of a slot beyond it goes unless busy.
			if err := r.end(ctx, s, current, "the pool shrank"); err != nil {
				errs = append(errs, err)
			}
			ps.State = workloadsv1alpha1.SlotDraining
		case current != nil || slot >= s.capacity:
		case held:
			ps.State = workloadsv1alpha1.SlotDraining
		default:
			created, err := r.fill(ctx, s, &ps)
			if err != nil {
				errs = append(errs, err)
			}
			if !created {
				ps.State = workloadsv1alpha1.SlotWaiting
				next.after(waitRetry)
			}
		}
		switch ps.State {
		case workloadsv1alpha1.SlotIdle:
			s.idle++
		case workloadsv1alpha1.SlotBusy:
			s.busy++
		}
		if slot < workloadsv1alpha1.MaxConcurrency && (slot < s.capacity || ps.Instance != "") {
			s.slots = append(s.slots, ps)
		}
	}
	return next.result(), errors.Join(errs...)
}

// requeue keeps the soonest non-zero requeue.
type requeue struct{ d time.Duration }

func (q *requeue) after(d time.Duration) {
	if d > 0 && (q.d == 0 || d < q.d) {
		q.d = d
	}
}

func (q requeue) result() ctrl.Result { return ctrl.Result{RequeueAfter: q.d} }

// ownedInstances lists the instances this runner created: labelled with its
// name, and controlled by its UID. A tenant's instance that only wears the
// label is not the runner's. Orphans are the VMs of an earlier runner of
// the same name, which a cluster without a garbage collector would keep.
func (r *Reconciler) ownedInstances(ctx context.Context, runner *workloadsv1alpha1.GitLabRunner) (owned, orphans []*computev1alpha1.MacOSInstance, err error) {
	list := &computev1alpha1.MacOSInstanceList{}
	if err := r.Client.List(ctx, list, client.InNamespace(runner.Namespace), client.MatchingLabels{workloadsv1alpha1.RunnerLabel: runner.Name}); err != nil {
		return nil, nil, fmt.Errorf("listing the instances of GitLabRunner %s/%s: %w", runner.Namespace, runner.Name, err)
	}
	for i := range list.Items {
		inst := &list.Items[i]
		ref := metav1.GetControllerOf(inst)
		switch {
		case ref == nil || ref.Kind != "GitLabRunner" || ref.APIVersion != workloadsv1alpha1.GroupVersion.String():
		case ref.UID == runner.UID:
			owned = append(owned, inst)
		case inst.DeletionTimestamp.IsZero():
			orphans = append(orphans, inst)
		}
	}
	slices.SortFunc(owned, func(a, b *computev1alpha1.MacOSInstance) int {
		return a.CreationTimestamp.Compare(b.CreationTimestamp.Time)
	})
	return owned, orphans, nil
}

// ownerRunner names the GitLabRunner controlling obj, if any.
func ownerRunner(obj client.Object) string {
	if ref := metav1.GetControllerOf(obj); ref != nil && ref.Kind == "GitLabRunner" && ref.APIVersion == workloadsv1alpha1.GroupVersion.String() {
		return ref.Name
	}
	return ""
}

func slotOf(inst *computev1alpha1.MacOSInstance) int32 {
	n, err := strconv.ParseInt(inst.Labels[workloadsv1alpha1.SlotLabel], 10, 32)
	if err != nil || n < 0 || n >= workloadsv1alpha1.MaxConcurrency {
		return workloadsv1alpha1.MaxConcurrency // beyond every pool: ended when idle
	}
	return int32(n)
}

// generation is the slot's last VM's number: the status' and, should the
// status have lost a write, the highest its instances carry.
func generation(runner *workloadsv1alpha1.GitLabRunner, slot int32, insts []*computev1alpha1.MacOSInstance) int64 {
	var g int64
	for _, ps := range runner.Status.Slots {
		if ps.Index == slot {
			g = ps.Generation
		}
	}
	for _, inst := range insts {
		if n, err := strconv.ParseInt(inst.Labels[workloadsv1alpha1.GenerationLabel], 10, 64); err == nil && n > g {
			g = n
		}
	}
	return g
}

// InstanceName is the name of a slot's generation-th VM. GitLabRunner names
// are at most 48 characters, so it stays a DNS label.
func InstanceName(runner string, slot int32, generation int64) string {
	return fmt.Sprintf("%s-%d-%d", runner, slot, generation)
}

// connect checks the runner's GitLab address against the operator's allowed
// hosts and connects to it.
func (r *Reconciler) connect(s *scope) (GitLab, bool) {
	g := s.runner.Spec.GitLab
	if !hostAllowed(g.URL, r.AllowedHosts) {
		s.registered.to(false, workloadsv1alpha1.ReasonHostNotAllowed,
			"GitLab at %s is not among the hosts this operator may reach (--gitlab-allowed-hosts %s); ask the platform team", g.URL, strings.Join(r.AllowedHosts, ","))
		return nil, false
	}
	gl, err := r.GitLab(g.URL, []byte(g.CABundle))
	if err != nil {
		s.registered.to(false, workloadsv1alpha1.ReasonGitLabUnreachable, "connecting to GitLab at %s: %v", g.URL, err)
		return nil, false
	}
	return gl, true
}

// readToken reads the runner authentication token as the runner's
// identity.
func (r *Reconciler) readToken(ctx context.Context, s *scope) bool {
	ref := s.runner.Spec.GitLab.TokenSecretRef
	key := ref.Key
	if key == "" {
		key = workloadsv1alpha1.RunnerTokenKey
	}
	if key != workloadsv1alpha1.RunnerTokenKey {
		// The schema refuses other keys; an object stored before it did
		// must not make the controller send another of the Secret's values.
		s.registered.to(false, workloadsv1alpha1.ReasonTokenSecretMissing, "tokenSecretRef.key is %q; only %q is read", key, workloadsv1alpha1.RunnerTokenKey)
		return false
	}
	secret := &corev1.Secret{}
	err := s.tenant.Get(ctx, types.NamespacedName{Namespace: s.runner.Namespace, Name: ref.Name}, secret)
	switch {
	case apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err):
		s.registered.to(false, workloadsv1alpha1.ReasonIdentityMissing,
			"ServiceAccount %s/%s may not read Secret %s: create it, bind the macrack-gitlab-runner ClusterRole to it and let it get the Secret (docs/tenant.md)",
			s.runner.Namespace, workloadsv1alpha1.RunnerServiceAccount, ref.Name)
		return false
	case apierrors.IsNotFound(err):
		s.registered.to(false, workloadsv1alpha1.ReasonTokenSecretMissing, "Secret %s is not found in namespace %s", ref.Name, s.runner.Namespace)
		return false
	case err != nil:
		s.registered.to(false, workloadsv1alpha1.ReasonTokenSecretMissing, "reading Secret %s: %v", ref.Name, err)
		return false
	}
	tok := strings.TrimSpace(string(secret.Data[key]))
	switch {
	case tok == "":
		s.registered.to(false, workloadsv1alpha1.ReasonTokenSecretMissing, "Secret %s has no key %q, or it is empty", ref.Name, key)
		return false
	case len(tok) > 1024 || strings.ContainsFunc(tok, func(c rune) bool { return c <= ' ' || c > '~' }):
		s.registered.to(false, workloadsv1alpha1.ReasonTokenRejected, "the value of key %q in Secret %s is not a runner token: over 1024 bytes, or not printable ASCII", key, ref.Name)
		return false
	}
	s.token = tok
	return true
}

// verify asks GitLab about the token for each slot's manager, unless it
// accepted this very token for them within VerifyInterval. It returns when
// to verify again.
func (r *Reconciler) verify(ctx context.Context, s *scope, gl GitLab) time.Duration {
	uid, digest, interval := s.runner.UID, tokenDigest(s.token), r.verifyInterval()
	ids := make([]string, 0, workloadsv1alpha1.MaxConcurrency)
	for slot := int32(0); slot < max(1, s.runner.Spec.Concurrency); slot++ {
		ids = append(ids, SystemID(string(uid), slot))
	}
	r.mu.Lock()
	v, seen := r.verified[uid]
	r.mu.Unlock()
	if seen && v.digest == digest && s.now.Sub(v.at) < interval && all(v.managers, ids) {
		s.registered.to(true, workloadsv1alpha1.ReasonVerified, "GitLab accepted the runner token for managers %s", strings.Join(ids, ", "))
		return interval - s.now.Sub(v.at)
	}
	for _, id := range ids {
		err := gl.VerifyRunner(ctx, s.token, id)
		switch {
		case errors.Is(err, gitlab.ErrForbidden):
			r.forget(uid)
			s.registered.to(false, workloadsv1alpha1.ReasonTokenRejected,
				"GitLab at %s refused the runner authentication token in Secret %s: it is revoked, expired or wrong; put a valid glrt- token there",
				s.runner.Spec.GitLab.URL, s.runner.Spec.GitLab.TokenSecretRef.Name)
			return interval
		case err != nil:
			// An outage is not a verdict: a pool verified with this token
			// keeps going, and nothing is torn down.
			if seen && v.digest == digest {
				s.registered.to(true, workloadsv1alpha1.ReasonVerified, "GitLab accepted the runner token at %s; verifying it again failed: %v", v.at.UTC().Format(time.RFC3339), err)
			} else {
				s.registered.to(false, workloadsv1alpha1.ReasonGitLabUnreachable, "verifying the runner token with GitLab: %v", err)
			}
			return waitRetry
		}
	}
	managers := map[string]bool{}
	for _, id := range ids {
		managers[id] = true
	}
	r.mu.Lock()
	if r.verified == nil {
		r.verified = map[types.UID]verification{}
	}
	r.verified[uid] = verification{digest: digest, at: s.now, managers: managers}
	r.mu.Unlock()
	s.registered.to(true, workloadsv1alpha1.ReasonVerified, "GitLab accepted the runner token for managers %s", strings.Join(ids, ", "))
	return interval
}

func all(set map[string]bool, ids []string) bool {
	for _, id := range ids {
		if !set[id] {
			return false
		}
	}
	return true
}

// forget drops what the controller remembers of a runner's token, so that
// the next pass asks GitLab again.
func (r *Reconciler) forget(uid types.UID) {
	r.mu.Lock()
	delete(r.verified, uid)
	r.mu.Unlock()
}

// observeLease reads the runner's lease, its chassis and class, and the
// lease's other instances, and from them how many VMs the pool may keep.
func (r *Reconciler) observeLease(ctx context.Context, s *scope) {
	runner := s.runner
	s.capacity = min(max(1, runner.Spec.Concurrency), workloadsv1alpha1.MaxConcurrency)
	lease := &leasingv1alpha1.MacNodeLease{}
	if err := r.Client.Get(ctx, types.NamespacedName{Namespace: runner.Namespace, Name: runner.Spec.LeaseName}, lease); err != nil {
		s.blocked.to(false, workloadsv1alpha1.ReasonLeaseNotBound, "lease %s is not found in namespace %s", runner.Spec.LeaseName, runner.Namespace)
		return
	}
	s.lease = lease
	class := &fleetv1alpha1.MacNodeClass{}
	if err := r.Client.Get(ctx, types.NamespacedName{Name: lease.Spec.NodeClassName}, class); err == nil && class.Spec.VMCapacity > 0 {
		s.capacity = min(s.capacity, class.Spec.VMCapacity)
	}
	if lease.Status.Phase != leasingv1alpha1.LeaseBound || lease.Status.NodeName == "" {
		phase := string(lease.Status.Phase)
		if phase == "" {
			phase = string(leasingv1alpha1.LeasePending)
		}
		s.blocked.to(false, workloadsv1alpha1.ReasonLeaseNotBound, "lease %s is %s: only a Bound lease takes new VMs", lease.Name, phase)
		return
	}
	node := &fleetv1alpha1.MacNode{}
	if err := r.Client.Get(ctx, types.NamespacedName{Name: lease.Status.NodeName}, node); err != nil {
		s.blocked.to(false, workloadsv1alpha1.ReasonChassisUnavailable, "chassis %s of lease %s is not found", lease.Status.NodeName, lease.Name)
		return
	}
	s.node = node
	if node.Status.Phase.Fenced() {
		s.blocked.to(false, workloadsv1alpha1.ReasonChassisUnavailable,
			"chassis %s is %s (its kernel VM quota stuck, and MacRack is rebooting it): the pool waits, no job is failed for it", node.Spec.Serial, node.Status.Phase)
		return
	}
	// The lease's other instances (the tenant's own, another runner's)
	// hold VMs of the same chassis: the pool gets what is left.
	list := &computev1alpha1.MacOSInstanceList{}
	if err := r.Client.List(ctx, list, client.InNamespace(runner.Namespace)); err == nil {
		var others int32
		for i := range list.Items {
			inst := &list.Items[i]
			if inst.Spec.LeaseName == lease.Name && !ownedBy(inst, runner) && live(inst) {
				others++
			}
		}
		if free := class.Spec.VMCapacity - others; class.Spec.VMCapacity > 0 && free < s.capacity {
			s.capacity = max(0, free)
		}
	}
}

func ownedBy(inst *computev1alpha1.MacOSInstance, runner *workloadsv1alpha1.GitLabRunner) bool {
	ref := metav1.GetControllerOf(inst)
	return ref != nil && ref.UID == runner.UID
}

// live mirrors instance.cap's count: an instance holds a VM until its agent
// reports it Stopped.
func live(inst *computev1alpha1.MacOSInstance) bool {
	return inst.Status.Runtime == nil || inst.Status.Runtime.Phase != computev1alpha1.VMStopped
}

// unwiped says whether an instance still holds its place on the chassis:
// placement frees it once the agent has wiped the disk.
func unwiped(inst *computev1alpha1.MacOSInstance) bool {
	return inst.Status.Runtime == nil || inst.Status.Runtime.WipedAt == nil
}

// verdict is what the controller makes of one of its VMs.
type verdict struct {
	state SlotState
	jobID int64
	// record is a job that ended, for the history.
	record *workloadsv1alpha1.JobRecord
	// end, if set, is why the VM is to be destroyed.
	end string
	// retryAt is when to look again (a job's deadline).
	retryAt time.Duration
}

// SlotState is an alias, for brevity.
type SlotState = workloadsv1alpha1.SlotState

// judge reads one VM's state from its agent's report. A VM runs one job:
// once it has taken one, it is destroyed when the job ends, whatever the
// ending, and also when it stopped under its job or ran past maxJobDuration.
func (r *Reconciler) judge(s *scope, inst *computev1alpha1.MacOSInstance, maxJob time.Duration) verdict {
	if !inst.DeletionTimestamp.IsZero() {
		return verdict{state: workloadsv1alpha1.SlotDraining}
	}
	rt := inst.Status.Runtime
	if rt == nil {
		return verdict{state: workloadsv1alpha1.SlotCreating}
	}
	fenced := s.node != nil && s.node.Status.Phase.Fenced()
	if job := rt.Job; job != nil {
		switch job.Phase {
		case computev1alpha1.JobSucceeded, computev1alpha1.JobFailed:
			if job.ID == 0 {
				// The guest gave up without a job (its token refused, say):
				// ask GitLab again, and start over.
				r.forget(s.runner.UID)
				return verdict{end: "its guest ended without a job: " + orNone(job.FailureReason)}
			}
			rec := record(inst, job, s.now)
			return verdict{record: &rec, end: fmt.Sprintf("job %d ended", job.ID)}
		case computev1alpha1.JobRunning:
			if rt.Phase != computev1alpha1.VMRunning && rt.Phase != computev1alpha1.VMStopping {
				// The VM went down under its job (a quarantine, a host
				// reboot): never a script failure, and never run again.
				rec := record(inst, &computev1alpha1.GuestJob{Phase: computev1alpha1.JobFailed, ID: job.ID, StartedAt: job.StartedAt,
					QueuedSeconds: job.QueuedSeconds, FailureReason: failureRunnerSystem}, s.now)
				return verdict{record: &rec, end: fmt.Sprintf("its VM stopped under job %d", job.ID)}
			}
			if job.StartedAt != nil && maxJob > 0 {
				deadline := job.StartedAt.Add(maxJob + jobGrace)
				if !s.now.Before(deadline) {
					rec := record(inst, &computev1alpha1.GuestJob{Phase: computev1alpha1.JobFailed, ID: job.ID, StartedAt: job.StartedAt,
						QueuedSeconds: job.QueuedSeconds, FailureReason: failureTimeout}, s.now)
					return verdict{record: &rec, end: fmt.Sprintf("job %d ran past maxJobDuration %s", job.ID, maxJob)}
				}
				return verdict{state: workloadsv1alpha1.SlotBusy, jobID: job.ID, retryAt: deadline.Sub(s.now)}
			}
			return verdict{state: workloadsv1alpha1.SlotBusy, jobID: job.ID}
		}
	}
	if gc := rt.GuestConfig; gc != nil && gc.Phase == computev1alpha1.GuestConfigUnreadable {
		return verdict{end: "its chassis could not open its guest config: " + gc.Message}
	}
	switch rt.Phase {
	case computev1alpha1.VMFailed, computev1alpha1.VMStopped:
		if fenced {
			// The quarantine loop starts it again once the chassis is back.
			return verdict{state: workloadsv1alpha1.SlotWaiting}
		}
		s.blocked.to(false, workloadsv1alpha1.ReasonVMFailed, "instance %s %s: %s", inst.Name, strings.ToLower(string(rt.Phase)), orNone(rt.Message))
		return verdict{end: fmt.Sprintf("its VM %s before it took a job: %s", strings.ToLower(string(rt.Phase)), orNone(rt.Message))}
	case computev1alpha1.VMRunning:
		if rt.ReadyForWork && rt.GuestConfig != nil && rt.GuestConfig.Phase == computev1alpha1.GuestConfigDelivered {
			return verdict{state: workloadsv1alpha1.SlotIdle}
		}
	}
	return verdict{state: workloadsv1alpha1.SlotBooting}
}

// GitLab's failure reasons that MacRack sets itself.
const (
	failureRunnerSystem = "runner_system_failure"
	// failureInterrupted is the runner told to stop under the job, not the
	// tenant's failure: counted with system failures.
	failureInterrupted = "runner_interrupted"
	failureTimeout     = "job_execution_timeout"
	failureScript      = "script_failure"
)

// record turns a guest's job report into a history record.
func record(inst *computev1alpha1.MacOSInstance, job *computev1alpha1.GuestJob, now time.Time) workloadsv1alpha1.JobRecord {
	rec := workloadsv1alpha1.JobRecord{ID: job.ID, Instance: inst.Name, Slot: slotOf(inst), FailureReason: job.FailureReason, FinishedAt: metav1.NewTime(now)}
	if job.FinishedAt != nil {
		rec.FinishedAt = *job.FinishedAt
	}
	switch {
	case job.Phase == computev1alpha1.JobSucceeded:
		rec.Result = workloadsv1alpha1.JobSucceeded
	case job.FailureReason == failureRunnerSystem || job.FailureReason == failureInterrupted:
		rec.Result = workloadsv1alpha1.JobSystemFailure
	case job.FailureReason == failureTimeout:
		rec.Result = workloadsv1alpha1.JobTimedOut
	default:
		rec.Result = workloadsv1alpha1.JobFailed
	}
	if job.QueuedSeconds != nil {
		rec.QueueToStart = &metav1.Duration{Duration: time.Duration(*job.QueuedSeconds) * time.Second}
	}
	if job.StartedAt != nil && !rec.FinishedAt.Before(job.StartedAt) {
		rec.Duration = &metav1.Duration{Duration: rec.FinishedAt.Sub(job.StartedAt.Time).Round(time.Second)}
	}
	return rec
}

func orNone(s string) string {
	if s == "" {
		return "no reason given"
	}
	return s
}

// recordJob adds a finished job to the history once, with an Event. It
// reports whether the job was new to the history.
func (r *Reconciler) recordJob(s *scope, rec workloadsv1alpha1.JobRecord) bool {
	st := &s.runner.Status
	for _, j := range st.Jobs {
		if j.ID == rec.ID && j.Instance == rec.Instance {
			return false
		}
	}
	st.Jobs = append(st.Jobs, rec)
	if n := len(st.Jobs) - workloadsv1alpha1.MaxJobHistory; n > 0 {
		st.Jobs = slices.Delete(st.Jobs, 0, n)
	}
	st.JobsTotal++
	typ, reason := corev1.EventTypeNormal, workloadsv1alpha1.ReasonJobFinished
	if rec.Result == workloadsv1alpha1.JobSystemFailure || rec.Result == workloadsv1alpha1.JobTimedOut {
		typ = corev1.EventTypeWarning
	}
	if rec.Result == workloadsv1alpha1.JobTimedOut {
		reason = workloadsv1alpha1.ReasonJobTimedOut
	}
	var took string
	if rec.Duration != nil {
		took = " after " + rec.Duration.Duration.String()
	}
	r.Recorder.Eventf(s.runner, nil, typ, reason, "RunJob", "job %d %s%s on instance %s (slot %d)", rec.ID, strings.ToLower(string(rec.Result)), took, rec.Instance, rec.Slot)
	return true
}

// end deletes one of the runner's VMs as the runner's identity; its agent
// stops it, wipes its disk, and lets it go.
func (r *Reconciler) end(ctx context.Context, s *scope, inst *computev1alpha1.MacOSInstance, why string) error {
	ctrl.LoggerFrom(ctx).Info("Ending a VM", "MacOSInstance", inst.Name, "why", why)
	uid := inst.UID
	err := s.tenant.Delete(ctx, inst, client.Preconditions{UID: &uid})
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("deleting MacOSInstance %s/%s as %s: %w", inst.Namespace, inst.Name, Username(inst.Namespace), err)
	}
	return nil
}

// fill creates a slot's next VM as the runner's identity, with the guest's
// config sealed to the chassis' key. It reports whether a VM exists for
// the slot now.
func (r *Reconciler) fill(ctx context.Context, s *scope, ps *workloadsv1alpha1.PoolSlot) (bool, error) {
	switch {
	case !s.registered.ok:
		return false, nil
	case s.blocked.set:
		return false, nil
	case s.node.Status.Reported == nil || s.node.Status.Reported.GuestKey == nil:
		s.blocked.to(false, workloadsv1alpha1.ReasonGuestKeyMissing,
			"chassis %s publishes no guest key (status.reported.guestKey), so no secret can reach its VMs: its host agent predates GitLabRunner", s.node.Spec.Serial)
		return false, nil
	}
	runner := s.runner
	gen := ps.Generation + 1
	name := InstanceName(runner.Name, ps.Index, gen)
	sealed, err := sealConfig(s, ps, name)
	if err != nil {
		s.blocked.to(false, workloadsv1alpha1.ReasonGuestConfigInvalid, "sealing the guest config to chassis %s: %v", s.node.Spec.Serial, err)
		return false, nil
	}
	t := runner.Spec.Template
	inst := &computev1alpha1.MacOSInstance{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: runner.Namespace,
			Labels: map[string]string{
				workloadsv1alpha1.RunnerLabel:     runner.Name,
				workloadsv1alpha1.SlotLabel:       strconv.Itoa(int(ps.Index)),
				workloadsv1alpha1.GenerationLabel: strconv.FormatInt(gen, 10),
			},
		},
		Spec: computev1alpha1.MacOSInstanceSpec{
			LeaseName: runner.Spec.LeaseName, ImageName: runner.Spec.ImageName,
			CPU: t.CPU, Memory: t.Memory, Disk: t.Disk, GuestConfig: sealed,
		},
	}
	if err := controllerutil.SetControllerReference(runner, inst, r.Client.Scheme()); err != nil {
		return false, fmt.Errorf("owning MacOSInstance %s: %w", name, err)
	}
	// An owner reference that blocks the owner's deletion needs update on
	// the runner's finalizers, which the runner's identity does not hold.
	inst.OwnerReferences[0].BlockOwnerDeletion = nil
	err = s.tenant.Create(ctx, inst)
	switch {
	case err == nil:
		r.Recorder.Eventf(runner, nil, corev1.EventTypeNormal, workloadsv1alpha1.ReasonVMCreated, "Prepare", "slot %d: VM %s, a fresh clone of %s", ps.Index, name, runner.Spec.ImageName)
	case apierrors.IsAlreadyExists(err):
		// A create whose answer was lost: the VM exists, under the same name.
	default:
		s.blocked.to(false, workloadsv1alpha1.ReasonInstanceRefused, "creating VM %s for slot %d as %s: %v", name, ps.Index, Username(runner.Namespace), err)
		return false, nil
	}
	ps.Generation, ps.Instance, ps.State = gen, name, workloadsv1alpha1.SlotCreating
	return true, nil
}
