package gitlabrunner

import (
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	computev1alpha1 "github.com/boualleiguie/macrack-operator/api/compute/v1alpha1"
	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
	leasingv1alpha1 "github.com/boualleiguie/macrack-operator/api/leasing/v1alpha1"
	workloadsv1alpha1 "github.com/boualleiguie/macrack-operator/api/workloads/v1alpha1"
	"github.com/boualleiguie/macrack-operator/internal/gitlab"
	"github.com/boualleiguie/macrack-operator/internal/gitlab/gitlabtest"
	"github.com/boualleiguie/macrack-operator/internal/reconcile/gitlabrunner"
	"github.com/boualleiguie/macrack-operator/test/envtest/harness"
)

// tokens are every runner token the suite handed out: none may appear in
// any object, Event, log line or audit record.
var (
	tokensMu sync.Mutex
	tokens   []string
)

// startChassis enrolls a chassis of cls and runs its agent, whose sim
// guests ask GitLab for their job every 200ms.
func startChassis(cls string) *harness.Agent {
	GinkgoHelper()
	a, err := env.StartAgent(harness.AgentOptions{Serial: harness.NewSerial(), Class: cls, HelperPath: helperPath,
		Heartbeat: 2 * time.Second, Log: logger("agent"), StopGrace: 5 * time.Second,
		JobPoll: 200 * time.Millisecond})
	Expect(err).NotTo(HaveOccurred())
	agents = append(agents, a)
	Eventually(func() fleetv1alpha1.MacNodePhase {
		mn := &fleetv1alpha1.MacNode{}
		if admin.Get(ctx, client.ObjectKey{Name: a.Node}, mn) != nil {
			return ""
		}
		return mn.Status.Phase
	}).Should(Equal(fleetv1alpha1.MacNodeReady))
	return a
}

// ciTenant is a tenant whose namespace runs a GitLabRunner: its lease, its
// runner identity, and the runner token in a Secret.
type ciTenant struct {
	*harness.Tenant
	lease *leasingv1alpha1.MacNodeLease
	token string
	tag   string
}

// newCITenant leases a chassis of cls for a new tenant and, unless bare,
// sets the runner identity up as docs/tenant.md says: the ServiceAccount,
// the macrack-gitlab-runner ClusterRole bound to it, and get on the token
// Secret by name.
func newCITenant(cls string, bare bool) *ciTenant {
	GinkgoHelper()
	t, err := env.NewTenant(ctx, "ci")
	Expect(err).NotTo(HaveOccurred())
	ns := t.Namespace
	c := &ciTenant{Tenant: t, tag: ns, token: "glrt-" + strings.ReplaceAll(ns, "-", "") + "Zx9"}
	tokensMu.Lock()
	tokens = append(tokens, c.token)
	tokensMu.Unlock()
	gl.AddRunnerToken(c.token, gitlabtest.WithTags(c.tag), gitlabtest.WithRunUntagged(false))
	Expect(admin.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "runner-token", Namespace: ns},
		StringData: map[string]string{"token": c.token}})).To(Succeed())
	Expect(letTenantRead(ctx, admin, t)).To(Succeed())
	if !bare {
		grantRunnerIdentity(ns)
	}
	c.lease = &leasingv1alpha1.MacNodeLease{ObjectMeta: metav1.ObjectMeta{Name: "build", Namespace: ns},
		Spec: leasingv1alpha1.MacNodeLeaseSpec{NodeClassName: cls, MinimumDuration: "24h"}}
	Expect(t.Client.Create(ctx, c.lease)).To(Succeed())
	Eventually(func() leasingv1alpha1.MacNodeLeasePhase {
		Expect(admin.Get(ctx, client.ObjectKeyFromObject(c.lease), c.lease)).To(Succeed())
		return c.lease.Status.Phase
	}).Should(Equal(leasingv1alpha1.LeaseBound))
	return c
}

func grantRunnerIdentity(ns string) {
	GinkgoHelper()
	Expect(grant(ctx, admin, ns)).To(Succeed())
}

// runner is a GitLabRunner of the tenant's lease.
func (c *ciTenant) runner(name string, concurrency int32, disk string) *workloadsv1alpha1.GitLabRunner {
	return &workloadsv1alpha1.GitLabRunner{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: c.Namespace},
		Spec: workloadsv1alpha1.GitLabRunnerSpec{
			LeaseName: c.lease.Name, ImageName: image, Concurrency: concurrency,
			Template: workloadsv1alpha1.InstanceTemplate{CPU: 4, Memory: resource.MustParse("8Gi"), Disk: resource.MustParse(disk)},
			GitLab: workloadsv1alpha1.GitLabSpec{URL: gl.URL(), CABundle: string(gl.CABundle()),
				TokenSecretRef: workloadsv1alpha1.SecretKeyRef{Name: "runner-token", Key: "token"}},
			Tags:           []string{c.tag},
			MaxJobDuration: metav1.Duration{Duration: time.Hour},
		},
	}
}

// job enqueues a job for the tenant's runner.
func (c *ciTenant) job(name string, retry gitlabtest.Retry, script ...string) int64 {
	return gl.EnqueueJob(gitlabtest.JobSpec{Name: name, Tags: []string{c.tag}, Script: script, Retry: retry})
}

func fresh(r *workloadsv1alpha1.GitLabRunner) *workloadsv1alpha1.GitLabRunner {
	GinkgoHelper()
	got := &workloadsv1alpha1.GitLabRunner{}
	Expect(admin.Get(ctx, client.ObjectKeyFromObject(r), got)).To(Succeed())
	return got
}

// condition is a runner's condition of type t, as "Status/Reason: message".
func condition(r *workloadsv1alpha1.GitLabRunner, t string) func() string {
	return func() string {
		got := &workloadsv1alpha1.GitLabRunner{}
		if err := admin.Get(ctx, client.ObjectKeyFromObject(r), got); err != nil {
			return err.Error()
		}
		c := meta.FindStatusCondition(got.Status.Conditions, t)
		if c == nil {
			return ""
		}
		return fmt.Sprintf("%s/%s: %s", c.Status, c.Reason, c.Message)
	}
}

func builds(ids ...int64) []gitlabtest.Build {
	var out []gitlabtest.Build
	for _, b := range gl.Builds() {
		if slices.Contains(ids, b.ID) {
			out = append(out, b)
		}
	}
	return out
}

func jobsOf(build int64) []gitlabtest.Job {
	var out []gitlabtest.Job
	for _, j := range gl.Jobs() {
		if j.BuildID == build {
			out = append(out, j)
		}
	}
	return out
}

// liveWatch counts, on every change the API server announces, the tenant's
// instances that hold a VM (not yet reported Stopped), and keeps the most.
type liveWatch struct {
	mu   sync.Mutex
	live map[string]bool
	most int
	stop func()
}

func watchLive(ns string) *liveWatch {
	GinkgoHelper()
	w, err := env.WatchClient().Watch(ctx, &computev1alpha1.MacOSInstanceList{}, client.InNamespace(ns))
	Expect(err).NotTo(HaveOccurred())
	lw := &liveWatch{live: map[string]bool{}, stop: w.Stop}
	go func() {
		for ev := range w.ResultChan() {
			inst, ok := ev.Object.(*computev1alpha1.MacOSInstance)
			if !ok {
				continue
			}
			lw.mu.Lock()
			stopped := inst.Status.Runtime != nil && inst.Status.Runtime.Phase == computev1alpha1.VMStopped
			lw.live[inst.Name] = ev.Type != watch.Deleted && !stopped
			n := 0
			for _, l := range lw.live {
				if l {
					n++
				}
			}
			lw.most = max(lw.most, n)
			lw.mu.Unlock()
		}
	}()
	return lw
}

func (lw *liveWatch) max() int {
	lw.mu.Lock()
	defer lw.mu.Unlock()
	return lw.most
}

var _ = Describe("A GitLabRunner", Ordered, func() {
	It("runs a queue of 20 jobs on one lease with at most 2 VMs at any moment, one job per VM, every job succeeding", func() {
		a := startChassis(class)
		t := newCITenant(class, false)
		lw := watchLive(t.Namespace)
		defer lw.stop()
		r := t.runner("ios", 2, "200Gi")
		Expect(t.Client.Create(ctx, r)).To(Succeed())
		Eventually(condition(r, workloadsv1alpha1.ConditionReady)).Should(HavePrefix("True/PoolFull"))
		Expect(condition(r, workloadsv1alpha1.ConditionRegistered)()).To(HavePrefix("True/Verified"))

		var ids []int64
		for i := range 20 {
			// Each job prints its whole environment: the runner token, which
			// stays on the host, must not be in it.
			ids = append(ids, t.job(fmt.Sprintf("build-%02d", i), gitlabtest.Retry{}, fmt.Sprintf("echo job %d", i), "sleep 0.1", "env"))
		}
		Eventually(func() []gitlab.JobState {
			var states []gitlab.JobState
			for _, b := range builds(ids...) {
				if b.State != gitlab.StateSuccess {
					states = append(states, b.State)
				}
			}
			return states
		}, 4*time.Minute).Should(BeEmpty(), "every build succeeds")

		r = fresh(r)
		slotIDs := []string{gitlabrunner.SystemID(string(r.UID), 0), gitlabrunner.SystemID(string(r.UID), 1)}
		for _, id := range ids {
			js := jobsOf(id)
			Expect(js).To(HaveLen(1), "build %d ran once", id)
			Expect(js[0].Attempt).To(Equal(1))
			Expect(js[0].Trace).To(ContainSubstring("$ echo job"))
			Expect(js[0].Trace).To(ContainSubstring("CI_JOB_ID=%d", js[0].ID), "the job's environment is in its trace")
			Expect(js[0].Trace).NotTo(ContainSubstring(t.token), "the runner token is not in the job's environment")
			Expect(js[0].TraceChecksumOK).To(BeTrue())
			Expect(slotIDs).To(ContainElement(js[0].SystemID), "a slot's stable system_id took job %d", js[0].ID)
		}
		// One job per VM: the history names 20 instances, none twice.
		Eventually(func() int64 { return fresh(r).Status.JobsTotal }).Should(BeNumerically(">=", 20))
		r = fresh(r)
		Expect(r.Status.Jobs).To(HaveLen(workloadsv1alpha1.MaxJobHistory))
		seen := map[string]bool{}
		for _, j := range r.Status.Jobs {
			Expect(j.Result).To(Equal(workloadsv1alpha1.JobSucceeded))
			Expect(seen[j.Instance]).To(BeFalse(), "instance %s ran a second job", j.Instance)
			seen[j.Instance] = true
			Expect(j.QueueToStart).NotTo(BeNil())
			Expect(j.Duration).NotTo(BeNil())
		}
		// Each VM that ran a job is gone, its disk wiped.
		Eventually(func() []string {
			var left []string
			for name := range seen {
				if err := admin.Get(ctx, client.ObjectKey{Namespace: t.Namespace, Name: name}, &computev1alpha1.MacOSInstance{}); !apierrors.IsNotFound(err) {
					left = append(left, name)
				}
			}
			return left
		}).Should(BeEmpty())
		// Never a third VM: not in the API, not in the kernel.
		Expect(lw.max()).To(BeNumerically("<=", 2))
		most, err := a.MaxActiveVMs()
		Expect(err).NotTo(HaveOccurred())
		Expect(most).To(BeNumerically("<=", 2))
		// And the pool is full again, waiting for the next job.
		Eventually(func() int32 { return fresh(r).Status.Idle }).Should(Equal(int32(2)))
		Expect(t.Client.Delete(ctx, r)).To(Succeed())
		Eventually(func() bool {
			return apierrors.IsNotFound(admin.Get(ctx, client.ObjectKeyFromObject(r), &workloadsv1alpha1.GitLabRunner{}))
		}).Should(BeTrue())
	})

	It("reports a job that a quarantine stops as a runner system failure, never the script's, and GitLab's retry runs it again", func() {
		a := startChassis(class)
		t := newCITenant(class, false)
		// One VM of two: the chassis has room for the start that finds the
		// stuck quota.
		r := t.runner("quarantined", 1, "200Gi")
		Expect(t.Client.Create(ctx, r)).To(Succeed())
		Eventually(condition(r, workloadsv1alpha1.ConditionReady)).Should(HavePrefix("True/PoolFull"))
		build := t.job("long", gitlabtest.Retry{Max: 1, When: []string{"runner_system_failure"}}, "echo start", "sleep 6s", "echo done")
		Eventually(func() gitlab.JobState {
			js := jobsOf(build)
			if len(js) == 0 {
				return ""
			}
			return js[0].State
		}).Should(Equal(gitlab.StateRunning))

		// The agent's start after the stuck quota fails with code 6: the
		// chassis is fenced, its VMs stopped through their guests.
		stick := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, fleetv1alpha1.SimQuotaStickAnnotation, time.Now().Format(time.RFC3339Nano))
		Expect(admin.Patch(ctx, &fleetv1alpha1.MacNode{ObjectMeta: metav1.ObjectMeta{Name: a.Node}}, client.RawPatch("application/merge-patch+json", []byte(stick)))).To(Succeed())
		Eventually(condition(r, workloadsv1alpha1.ConditionDegraded)).Should(HavePrefix("True/ChassisUnavailable"))
		Eventually(func() gitlab.FailureReason { return jobsOf(build)[0].FailureReason }).Should(Equal(gitlab.FailureRunnerSystem))
		Expect(jobsOf(build)[0].State).To(Equal(gitlab.StateFailed))

		// While the chassis reboots, no VM asks GitLab for a job.
		Eventually(func() fleetv1alpha1.MacNodePhase {
			mn := &fleetv1alpha1.MacNode{}
			Expect(admin.Get(ctx, client.ObjectKey{Name: a.Node}, mn)).To(Succeed())
			return mn.Status.Phase
		}).Should(Equal(fleetv1alpha1.MacNodeRebooting))
		requests := gl.Requests("jobs/request")
		Eventually(func() fleetv1alpha1.MacNodePhase {
			mn := &fleetv1alpha1.MacNode{}
			Expect(admin.Get(ctx, client.ObjectKey{Name: a.Node}, mn)).To(Succeed())
			return mn.Status.Phase
		}).Should(Equal(fleetv1alpha1.MacNodeLeased))
		Expect(gl.Requests("jobs/request")).To(Equal(requests), "a VM asked for a job while its chassis rebooted")

		// Back on the same lease: GitLab's retry runs the job again, on a
		// fresh VM, and it passes.
		Eventually(func() gitlab.JobState { return builds(build)[0].State }, 2*time.Minute).Should(Equal(gitlab.StateSuccess))
		js := jobsOf(build)
		Expect(js).To(HaveLen(2))
		Expect(js[1].Attempt).To(Equal(2))
		Eventually(func() []workloadsv1alpha1.JobResult {
			var res []workloadsv1alpha1.JobResult
			for _, j := range fresh(r).Status.Jobs {
				res = append(res, j.Result)
			}
			return res
		}).Should(Equal([]workloadsv1alpha1.JobResult{workloadsv1alpha1.JobSystemFailure, workloadsv1alpha1.JobSucceeded}))
		Eventually(condition(r, workloadsv1alpha1.ConditionDegraded)).Should(HavePrefix("False/AsExpected"))
		Expect(t.Client.Delete(ctx, r)).To(Succeed())
	})

	It("says Registered=False with GitLab's refusal when the token is revoked, and replaces no VM", func() {
		startChassis(class)
		t := newCITenant(class, false)
		r := t.runner("revoked", 1, "200Gi")
		Expect(t.Client.Create(ctx, r)).To(Succeed())
		// The positive control: the valid token is verified.
		Eventually(condition(r, workloadsv1alpha1.ConditionRegistered)).Should(HavePrefix("True/Verified"))
		Eventually(condition(r, workloadsv1alpha1.ConditionReady)).Should(HavePrefix("True/PoolFull"))
		gl.RevokeRunnerToken(t.token)
		Eventually(condition(r, workloadsv1alpha1.ConditionRegistered)).Should(And(
			HavePrefix("False/TokenRejected"), ContainSubstring("revoked, expired or wrong"), ContainSubstring("runner-token")))
		Eventually(func() []computev1alpha1.MacOSInstance {
			list := &computev1alpha1.MacOSInstanceList{}
			Expect(admin.List(ctx, list, client.InNamespace(t.Namespace))).To(Succeed())
			return list.Items
		}).Should(BeEmpty(), "the idle VM goes, and none replaces it")
		Consistently(func() int32 { return fresh(r).Status.Idle }, 2*time.Second).Should(BeZero())
		Expect(t.Client.Delete(ctx, r)).To(Succeed())
	})

	It("ends cleanly when deleted mid-job: the job is interrupted, the VM wiped, the managers unregistered", func() {
		startChassis(class)
		t := newCITenant(class, false)
		r := t.runner("deleted", 1, "200Gi")
		Expect(t.Client.Create(ctx, r)).To(Succeed())
		Eventually(condition(r, workloadsv1alpha1.ConditionReady)).Should(HavePrefix("True/PoolFull"))
		build := t.job("long", gitlabtest.Retry{}, "sleep 60s")
		Eventually(func() gitlab.JobState {
			if js := jobsOf(build); len(js) > 0 {
				return js[0].State
			}
			return ""
		}).Should(Equal(gitlab.StateRunning))
		r = fresh(r)
		Expect(t.Client.Delete(ctx, r)).To(Succeed())
		Eventually(func() bool {
			return apierrors.IsNotFound(admin.Get(ctx, client.ObjectKeyFromObject(r), &workloadsv1alpha1.GitLabRunner{}))
		}).Should(BeTrue())
		j := jobsOf(build)[0]
		Expect(j.State).To(Equal(gitlab.StateFailed))
		// runner_interrupted, sent as unknown_failure: this GitLab does not
		// list the reason in the job's features.failure_reasons.
		Expect(j.FailureReason).To(Equal(gitlab.FailureUnknown))
		list := &computev1alpha1.MacOSInstanceList{}
		Expect(admin.List(ctx, list, client.InNamespace(t.Namespace))).To(Succeed())
		Expect(list.Items).To(BeEmpty(), "the runner goes only after its VMs are wiped and gone")
		var deleted []string
		for _, m := range gl.DeletedManagers() {
			deleted = append(deleted, m.SystemID)
		}
		Expect(deleted).To(ContainElement(gitlabrunner.SystemID(string(r.UID), 0)))
	})

	It("is refused wherever its tenant is refused, and says which rule refused it", func() {
		startChassis(class)
		t := newCITenant(class, false)
		// A VM smaller than the golden: instance.image refuses the runner's
		// create as it refuses the tenant's own.
		r := t.runner("small", 1, "10Gi")
		Expect(t.Client.Create(ctx, r)).To(Succeed())
		Eventually(condition(r, workloadsv1alpha1.ConditionDegraded)).Should(And(HavePrefix("True/InstanceRefused"), ContainSubstring("instance.image"),
			ContainSubstring("system:serviceaccount:"+t.Namespace+":macrack-gitlab-runner")))
		same := &computev1alpha1.MacOSInstance{ObjectMeta: metav1.ObjectMeta{Name: "by-hand", Namespace: t.Namespace},
			Spec: computev1alpha1.MacOSInstanceSpec{LeaseName: t.lease.Name, ImageName: image, CPU: 4, Memory: resource.MustParse("8Gi"), Disk: resource.MustParse("10Gi")}}
		harness.ExpectWebhookDenial(t.Client.Create(ctx, same), "vmacosinstance.macrack.io", "instance.image")
		Expect(t.Client.Delete(ctx, r)).To(Succeed())

		// The runner's identity holds none of the operator's exemptions:
		// lease.release refuses it the lease's finalizer, which the
		// operator may take (dry runs: nothing is stored).
		tenants, err := gitlabrunner.NewImpersonation(env.Config, env.Scheme, admin.RESTMapper())
		Expect(err).NotTo(HaveOccurred())
		as, err := tenants.For(t.Namespace)
		Expect(err).NotTo(HaveOccurred())
		lease := &leasingv1alpha1.MacNodeLease{}
		Expect(admin.Get(ctx, client.ObjectKeyFromObject(t.lease), lease)).To(Succeed())
		Expect(lease.Finalizers).To(ContainElement(fleetv1alpha1.LeaseFinalizer))
		unfinalized := lease.DeepCopy()
		unfinalized.Finalizers = slices.DeleteFunc(slices.Clone(lease.Finalizers), func(f string) bool { return f == fleetv1alpha1.LeaseFinalizer })
		err = admin.Patch(ctx, unfinalized, client.MergeFrom(lease), client.DryRunAll)
		Expect(err).To(HaveOccurred(), "the admin is no operator either")
		harness.ExpectWebhookDenial(err, "vmacnodelease.macrack.io", "lease.release")
		Expect(op.Client.Patch(ctx, unfinalized.DeepCopy(), client.MergeFrom(lease), client.DryRunAll)).To(Succeed(), "the operator may")
		// The runner identity may not even write leases: RBAC refuses it
		// before any policy is asked.
		harness.ExpectRBACDenial(as.Patch(ctx, unfinalized.DeepCopy(), client.MergeFrom(lease), client.DryRunAll), "patch", "macnodeleases")
		// Nor any instance's status, as a tenant may not.
		inst := &computev1alpha1.MacOSInstance{ObjectMeta: metav1.ObjectMeta{Name: "x", Namespace: t.Namespace}}
		harness.ExpectRBACDenial(as.Status().Update(ctx, inst, client.DryRunAll), "update", "macosinstances/status")

		// Without the identity the tenant grants, the runner does nothing,
		// and says what to grant.
		startChassis(class)
		bare := newCITenant(class, true)
		rb := bare.runner("ungranted", 1, "200Gi")
		Expect(bare.Client.Create(ctx, rb)).To(Succeed())
		Eventually(condition(rb, workloadsv1alpha1.ConditionRegistered)).Should(And(HavePrefix("False/IdentityMissing"),
			ContainSubstring("macrack-gitlab-runner")))
		list := &computev1alpha1.MacOSInstanceList{}
		Expect(admin.List(ctx, list, client.InNamespace(bare.Namespace))).To(Succeed())
		Expect(list.Items).To(BeEmpty())
		// The positive control: once granted, the same runner fills its pool.
		grantRunnerIdentity(bare.Namespace)
		Eventually(condition(rb, workloadsv1alpha1.ConditionRegistered), 2*time.Minute).Should(HavePrefix("True/Verified"))
		Expect(bare.Client.Delete(ctx, rb)).To(Succeed())
	})

	It("is refused at admission with a concurrency above its lease's class, naming the rule and the numbers", func() {
		startChassis(oneVM)
		t := newCITenant(oneVM, false)
		err := t.Client.Create(ctx, t.runner("two", 2, "200Gi"))
		harness.ExpectWebhookDenial(err, "vgitlabrunner.macrack.io", "instance.cap")
		Expect(err.Error()).To(ContainSubstring("asks for concurrency 2, but lease build's class m4-sim-one runs at most 1 VMs per chassis"))
		// The positive control: one at a time is admitted.
		one := t.runner("one", 1, "200Gi")
		Expect(t.Client.Create(ctx, one)).To(Succeed())
		// And raising it later is refused the same way.
		raise := client.RawPatch("application/merge-patch+json", []byte(`{"spec":{"concurrency":2}}`))
		harness.ExpectWebhookDenial(t.Client.Patch(ctx, fresh(one), raise), "vgitlabrunner.macrack.io", "instance.cap")
		Expect(t.Client.Delete(ctx, fresh(one))).To(Succeed())
	})

	It("is refused by its schema an http GitLab, a tag with a comma and a name its VMs could not carry", func() {
		t := &ciTenant{Tenant: mustTenant(), tag: "macos", lease: &leasingv1alpha1.MacNodeLease{ObjectMeta: metav1.ObjectMeta{Name: "build"}}}
		r := t.runner("plain", 1, "200Gi")
		r.Spec.GitLab.URL = "http://gitlab.example.com"
		err := t.Client.Create(ctx, r)
		Expect(apierrors.IsInvalid(err)).To(BeTrue(), "%v", err)
		Expect(err.Error()).To(ContainSubstring("url must be an https URL"))
		comma := t.runner("comma", 1, "200Gi")
		comma.Spec.Tags = []string{"macos,linux"}
		err = t.Client.Create(ctx, comma)
		Expect(apierrors.IsInvalid(err)).To(BeTrue(), "a comma makes two tags in GitLab's tag_list: %v", err)
		long := t.runner(strings.Repeat("r", 49), 1, "200Gi")
		err = t.Client.Create(ctx, long)
		Expect(apierrors.IsInvalid(err)).To(BeTrue(), "%v", err)
		Expect(err.Error()).To(ContainSubstring("at most 48 characters"))
		// The positive control.
		ok := t.runner(strings.Repeat("r", 48), 1, "200Gi")
		ok.Spec.GitLab.URL = "https://gitlab.example.com/sub"
		Expect(t.Client.Create(ctx, ok)).To(Succeed())
		Expect(t.Client.Delete(ctx, ok)).To(Succeed())
	})

	It("never shows a runner token in an object, an Event, a log line, a file of an agent or a guest, the audit stream or the API server's audit log", func() {
		tokensMu.Lock()
		toks := slices.Clone(tokens)
		tokensMu.Unlock()
		Expect(toks).NotTo(BeEmpty())
		var where []string
		check := func(what, text string) {
			for _, tok := range toks {
				if strings.Contains(text, tok) {
					where = append(where, what)
				}
			}
		}
		for _, list := range []client.ObjectList{&computev1alpha1.MacOSInstanceList{}, &workloadsv1alpha1.GitLabRunnerList{},
			&fleetv1alpha1.MacNodeList{}, &leasingv1alpha1.MacNodeLeaseList{}, &eventsv1.EventList{}, &corev1.EventList{},
			&corev1.ConfigMapList{}, &corev1.PodList{}} {
			Expect(admin.List(ctx, list)).To(Succeed())
			b, err := json.Marshal(list)
			Expect(err).NotTo(HaveOccurred())
			check(fmt.Sprintf("%T", list), string(b))
		}
		check("the logs", logs.String())
		audit, err := os.ReadFile(auditLog)
		Expect(err).NotTo(HaveOccurred())
		Expect(string(audit)).To(ContainSubstring(`"resource":"secrets"`), "the audit log records the token Secret's reads")
		check("the API server's audit log", string(audit))
		check("the audit stream", stream.String())
		Expect(stream.String()).To(ContainSubstring("io.macrack.instance."), "the stream recorded the runners' VMs")
		for _, a := range agents {
			Expect(filepath.WalkDir(a.StateDir, func(p string, d fs.DirEntry, err error) error {
				if err != nil || d.IsDir() {
					return nil
				}
				info, err := d.Info()
				if err != nil || info.Size() > 16<<20 || !info.Mode().IsRegular() {
					return nil
				}
				b, err := os.ReadFile(p)
				if err == nil {
					check(p, string(b))
				}
				return nil
			})).To(Succeed())
		}
		// The positive control: the check finds a token where one is.
		Expect(strings.Contains(fmt.Sprintf("x%sx", toks[0]), toks[0])).To(BeTrue())
		Expect(where).To(BeEmpty(), "a runner token leaked")
	})
})

func mustTenant() *harness.Tenant {
	GinkgoHelper()
	t, err := env.NewTenant(ctx, "schema")
	Expect(err).NotTo(HaveOccurred())
	Expect(letTenantRead(ctx, admin, t)).To(Succeed())
	return t
}
