package gitlabrunner

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/go-logr/logr"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	leasingv1alpha1 "github.com/boualleiguie/macrack-operator/api/leasing/v1alpha1"
	workloadsv1alpha1 "github.com/boualleiguie/macrack-operator/api/workloads/v1alpha1"
	"github.com/boualleiguie/macrack-operator/internal/gitlab"
	"github.com/boualleiguie/macrack-operator/internal/gitlab/gitlabtest"
	"github.com/boualleiguie/macrack-operator/test/envtest/harness"
)

// benchJobs is how many jobs the throughput wave runs through one chassis.
const benchJobs = 20

// BenchmarkGitLabRunner measures, on one sim chassis with real vm-helper
// processes and a fake GitLab over TLS, each guest polling GitLab every
// 3s as gitlab-runner does by default:
//
//   - queue-to-start with a warm pool (VMs booted and waiting): p50 and max
//     of 10 jobs, one at a time;
//
//   - queue-to-start with a cold pool: the runner is created with a job
//     queued, so the VM is cloned, booted and configured first;
//
//   - jobs per hour one chassis sustains at concurrency 2, each job a 5s
//     script, each in a fresh VM (create, clone, boot, job, stop, wipe).
//
//     go test -run '^$' -bench BenchmarkGitLabRunner -benchtime=1x ./test/envtest/gitlabrunner/
func BenchmarkGitLabRunner(b *testing.B) {
	ctx := context.Background()
	log := logr.Discard()
	if os.Getenv("BENCH_LOG") != "" {
		log = zap.New(zap.WriteTo(os.Stderr))
	}
	dir := b.TempDir()
	helper, err := harness.BuildVMHelper(dir)
	must(b, err)
	e, err := harness.Start(harness.WithWebhooks)
	must(b, err)
	b.Cleanup(func() { _ = e.Stop() })
	must(b, e.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: harness.AgentsNamespace}}))
	must(b, e.ApplyYAML(ctx, "config/rbac/agent_role.yaml"))
	must(b, e.ApplyYAML(ctx, "config/rbac/tenant_roles.yaml"))
	o, err := e.StartOperator(harness.OperatorOptions{Start: time.Now(), Webhooks: true, MaxConcurrentReconciles: 4, Log: log})
	must(b, err)
	b.Cleanup(func() { _ = o.Stop() })
	must(b, harness.InstallAdmissionPolicies(ctx, e.Client, o.Engine, harness.OperatorNamespace, o.Params))
	_, err = harness.CreateClass(ctx, e.Client, class, 2)
	must(b, err)
	must(b, e.CreateImage(ctx, e.Client, image, imageMin))
	g := gitlabtest.NewServer(b)
	a, err := e.StartAgent(harness.AgentOptions{Serial: harness.NewSerial(), Class: class, HelperPath: helper,
		Heartbeat: 2 * time.Second, Log: log, StopGrace: 5 * time.Second, JobPoll: 3 * time.Second})
	must(b, err)
	b.Cleanup(func() { _ = a.Stop(); a.KillHelpers() })

	// The tenant, as docs/tenant.md sets it up.
	t, err := e.NewTenant(ctx, "bench")
	must(b, err)
	tok := "glrt-benchmarkToken000"
	g.AddRunnerToken(tok)
	must(b, e.Client.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "runner-token", Namespace: t.Namespace}, StringData: map[string]string{"token": tok}}))
	must(b, grant(ctx, e.Client, t.Namespace))
	must(b, letTenantRead(ctx, e.Client, t))
	lease := &leasingv1alpha1.MacNodeLease{ObjectMeta: metav1.ObjectMeta{Name: "build", Namespace: t.Namespace},
		Spec: leasingv1alpha1.MacNodeLeaseSpec{NodeClassName: class, MinimumDuration: "24h"}}
	must(b, t.Client.Create(ctx, lease))
	must(b, poll(ctx, time.Minute, func() bool {
		return e.Client.Get(ctx, client.ObjectKeyFromObject(lease), lease) == nil && lease.Status.Phase == leasingv1alpha1.LeaseBound
	}))
	newRunner := func(name string, concurrency int32) *workloadsv1alpha1.GitLabRunner {
		return &workloadsv1alpha1.GitLabRunner{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: t.Namespace},
			Spec: workloadsv1alpha1.GitLabRunnerSpec{LeaseName: "build", ImageName: image, Concurrency: concurrency,
				Template: workloadsv1alpha1.InstanceTemplate{CPU: 4, Memory: resource.MustParse("8Gi"), Disk: resource.MustParse("200Gi")},
				GitLab: workloadsv1alpha1.GitLabSpec{URL: g.URL(), CABundle: string(g.CABundle()),
					TokenSecretRef: workloadsv1alpha1.SecretKeyRef{Name: "runner-token", Key: "token"}},
				MaxJobDuration: metav1.Duration{Duration: time.Hour}}}
	}
	done := func(ids ...int64) func() bool {
		return func() bool {
			for _, bl := range g.Builds() {
				if slices.Contains(ids, bl.ID) && bl.State != gitlab.StateSuccess {
					return false
				}
			}
			return true
		}
	}
	queueToStart := func(build int64) time.Duration {
		for _, j := range g.Jobs() {
			if j.BuildID == build {
				return j.StartedAt.Sub(j.QueuedAt)
			}
		}
		return -1
	}

	b.ResetTimer()
	// Cold: the job waits while the runner's first VM is made.
	cold := g.EnqueueJob(gitlabtest.JobSpec{Script: []string{"echo cold"}})
	r := newRunner("bench", 1)
	must(b, t.Client.Create(ctx, r))
	must(b, poll(ctx, 5*time.Minute, done(cold)))
	coldQ := queueToStart(cold)

	// Warm: one job at a time into a booted, waiting VM.
	var warm []time.Duration
	for i := range 10 {
		must(b, poll(ctx, 5*time.Minute, func() bool { return ready(ctx, e.Client, r) }))
		id := g.EnqueueJob(gitlabtest.JobSpec{Script: []string{fmt.Sprintf("echo warm %d", i)}})
		must(b, poll(ctx, 5*time.Minute, done(id)))
		warm = append(warm, queueToStart(id))
	}
	slices.Sort(warm)
	must(b, t.Client.Delete(ctx, r))
	must(b, poll(ctx, 5*time.Minute, func() bool { return e.Client.Get(ctx, client.ObjectKeyFromObject(r), r) != nil }))

	// Throughput: benchJobs jobs of 5s through a pool of 2.
	r2 := newRunner("bench2", 2)
	must(b, t.Client.Create(ctx, r2))
	must(b, poll(ctx, 5*time.Minute, func() bool { return ready(ctx, e.Client, r2) }))
	var ids []int64
	start := time.Now()
	for i := range benchJobs {
		ids = append(ids, g.EnqueueJob(gitlabtest.JobSpec{Script: []string{fmt.Sprintf("echo job %d", i), "sleep 5s"}}))
	}
	must(b, poll(ctx, 20*time.Minute, done(ids...)))
	took := time.Since(start)
	b.StopTimer()

	b.ReportMetric(coldQ.Seconds(), "cold-queue-to-start-s")
	b.ReportMetric(warm[len(warm)/2].Seconds(), "warm-queue-to-start-p50-s")
	b.ReportMetric(warm[len(warm)-1].Seconds(), "warm-queue-to-start-max-s")
	b.ReportMetric(float64(benchJobs)/took.Hours(), "jobs/hour/chassis")
	b.ReportMetric(took.Seconds()/float64(benchJobs)*2-5, "vm-turnaround-s")
	b.Logf("cold %s; warm p50 %s max %s; %d jobs of 5s in %s at concurrency 2", coldQ, warm[len(warm)/2], warm[len(warm)-1], benchJobs, took)
}

func ready(ctx context.Context, c client.Client, r *workloadsv1alpha1.GitLabRunner) bool {
	got := &workloadsv1alpha1.GitLabRunner{}
	return c.Get(ctx, client.ObjectKeyFromObject(r), got) == nil &&
		meta.IsStatusConditionTrue(got.Status.Conditions, workloadsv1alpha1.ConditionReady) && got.Status.Idle == max(1, got.Spec.Concurrency)
}

// grant sets the runner identity up in ns, as docs/tenant.md says.
func grant(ctx context.Context, c client.Client, ns string) error {
	sa := workloadsv1alpha1.RunnerServiceAccount
	subject := []rbacv1.Subject{{Kind: "ServiceAccount", Name: sa, Namespace: ns}}
	return errors.Join(
		c.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa, Namespace: ns}}),
		c.Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: sa, Namespace: ns},
			RoleRef: rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "macrack-gitlab-runner"}, Subjects: subject}),
		c.Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "runner-token", Namespace: ns},
			Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"secrets"}, ResourceNames: []string{"runner-token"}, Verbs: []string{"get"}}}}),
		c.Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "runner-token", Namespace: ns},
			RoleRef: rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "runner-token"}, Subjects: subject}),
	)
}

// letTenantRead lets the tenant's person get the runner token Secret, as
// docs/tenant.md says: runner.secret admits a GitLabRunner only from a
// requester who may read the token it names.
func letTenantRead(ctx context.Context, c client.Client, t *harness.Tenant) error {
	subject := []rbacv1.Subject{{Kind: "User", APIGroup: rbacv1.GroupName, Name: t.User}}
	if err := errors.Join(
		c.Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "runner-token-owner", Namespace: t.Namespace},
			Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"secrets"}, ResourceNames: []string{"runner-token"}, Verbs: []string{"get"}}}}),
		c.Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "runner-token-owner", Namespace: t.Namespace},
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "runner-token-owner"}, Subjects: subject}),
	); err != nil {
		return err
	}
	return harness.WaitAllowed(ctx, t.Client, authorizationv1.ResourceAttributes{Namespace: t.Namespace, Verb: "get", Resource: "secrets", Name: "runner-token"})
}

func poll(ctx context.Context, timeout time.Duration, cond func() bool) error {
	return wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, timeout, true, func(context.Context) (bool, error) { return cond(), nil })
}

func must(b *testing.B, err error) {
	b.Helper()
	if err != nil {
		b.Fatal(err)
	}
}
