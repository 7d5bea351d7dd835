// Package ha runs the operator as the Deployment does: two replicas, each
// its own cmd/operator process, against one real kube-apiserver and etcd,
// with leader election on. The leader is SIGKILLed in the middle of a burst
// of binds; the suite measures how soon the standby holds the leader
// election Lease, checks that every lease ends bound to exactly one chassis
// and that none was ever bound to two, and that only the leader applies and
// restores the ValidatingAdmissionPolicies. The leader election runs on
// short timings (4s, 3s, 1s) and the real clock.
package ha

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/boualleiguie/macrack-operator/internal/policy"
	"github.com/boualleiguie/macrack-operator/policies"
	"github.com/boualleiguie/macrack-operator/test/envtest/harness"
)

// The leader election's timings: short, so that a takeover takes seconds.
const (
	leaseDuration = 4 * time.Second
	renewDeadline = 3 * time.Second
	retryPeriod   = time.Second
)

var (
	env   *harness.Env
	admin client.Client
	ctx   = context.Background()
	// binary is cmd/operator, built once; workDir holds it and each
	// replica's directory (kubeconfig, log).
	binary, workDir string
	// engine renders the admission policies the replicas apply, so that
	// the suite knows their names; params are the replicas' settings.
	engine *policy.Engine
	params policy.Params
	// replicas are every operator process started, for their logs.
	replicas []*harness.OperatorProcess
	// stream is the replicas' audit sink, a real nats-server.
	stream *harness.NATS
	// failed keeps workDir, and the replicas' logs in it, for a look.
	failed bool
)

func TestHA(t *testing.T) {
	RegisterFailHandler(Fail)
	SetDefaultEventuallyTimeout(30 * time.Second)
	SetDefaultEventuallyPollingInterval(50 * time.Millisecond)
	RunSpecs(t, "High availability suite")
}

var _ = BeforeSuite(func() {
	var err error
	workDir, err = os.MkdirTemp("", "ha-")
	Expect(err).NotTo(HaveOccurred())
	built := make(chan error, 1)
	go func() {
		var err error
		binary, err = harness.BuildOperator(workDir)
		built <- err
	}()
	stream, err = harness.StartNATS(workDir)
	Expect(err).NotTo(HaveOccurred())
	env, err = harness.Start()
	Expect(err).NotTo(HaveOccurred())
	admin = env.Client
	engine, err = policy.Load(ctx, policies.FS, policy.WithTimeout(30*time.Second))
	Expect(err).NotTo(HaveOccurred())
	params, err = env.Params(ctx)
	Expect(err).NotTo(HaveOccurred())
	Expect(admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: harness.OperatorNamespace}})).To(Succeed())
	Expect(<-built).To(Succeed())
})

// A failed spec shows the end of every replica's log.
var _ = JustAfterEach(func() {
	if !CurrentSpecReport().Failed() {
		return
	}
	failed = true
	for _, r := range replicas {
		GinkgoWriter.Println(r.LogTail())
	}
})

var _ = AfterSuite(func() {
	var errs []error
	for _, r := range replicas {
		// A replica the suite killed or stopped already reports nothing.
		errs = append(errs, r.Stop())
	}
	if env != nil {
		errs = append(errs, env.Stop())
	}
	if stream != nil {
		errs = append(errs, stream.Kill())
	}
	if !failed && workDir != "" {
		_ = os.RemoveAll(workDir)
	}
	Expect(errors.Join(errs...)).NotTo(HaveOccurred())
})

// startReplica starts one operator process with the suite's timings.
func startReplica(name string) *harness.OperatorProcess {
	GinkgoHelper()
	r, err := env.StartOperatorProcess(ctx, harness.OperatorProcessOptions{
		Binary: binary, Name: name, Dir: workDir,
		LeaseDuration: leaseDuration, RenewDeadline: renewDeadline, RetryPeriod: retryPeriod,
		ExtraArgs: []string{"--audit-sink=" + stream.URL(), "--cluster-name=ha"},
	})
	Expect(err).NotTo(HaveOccurred())
	replicas = append(replicas, r)
	return r
}
