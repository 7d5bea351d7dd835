package audit

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2/event"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
	leasingv1alpha1 "github.com/boualleiguie/macrack-operator/api/leasing/v1alpha1"
	"github.com/boualleiguie/macrack-operator/internal/audit/event"
	"github.com/boualleiguie/macrack-operator/internal/audit/sink"
	"github.com/boualleiguie/macrack-operator/test/envtest/harness"
	"github.com/boualleiguie/macrack-operator/test/natsserver"
)

const (
	class  = "m4-audit"
	stream = sink.DefaultStream
	// exporterName is the sink's NATS client name, which /connz shows.
	exporterName = "macrack-audit"
)

// clockAt is where the next operator's clock starts: past every time the
// suite's operators stamped, so that no record is from the future.
var clockAt = time.Now().UTC().Truncate(time.Second)

// running are the operators a spec started and has not stopped.
var running = map[*harness.Operator]bool{}

// startOperator runs the operator, exporting into the cluster's stream at
// three replicas; o adds to the sink's options. A spec that fails leaves
// it to its cleanup to stop.
func startOperator(o sink.JetStreamOptions) *harness.Operator {
	GinkgoHelper()
	o.URL, o.Replicas = cluster.URL(), 3
	sink, err := sink.NewJetStream(ctx, o)
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(sink.Close)
	op, err := env.StartOperator(harness.OperatorOptions{
		Start: clockAt, MaxConcurrentReconciles: 4, AuditSink: sink,
		Log: zap.New(zap.WriteTo(GinkgoWriter), zap.UseDevMode(true)).WithName("operator"),
	})
	Expect(err).NotTo(HaveOccurred())
	running[op] = true
	DeferCleanup(func() {
		if running[op] {
			stopOperator(op)
		}
	})
	return op
}

func stopOperator(op *harness.Operator) {
	GinkgoHelper()
	delete(running, op)
	clockAt = op.Clock.Now().Add(time.Minute)
	Expect(op.Stop()).To(Succeed())
}

// healCluster brings back every server a failed spec left killed or
// paused, so that the next spec starts with the cluster whole.
func healCluster() {
	GinkgoHelper()
	Expect(cluster.Heal()).To(Succeed())
}

// streamLeader waits for the stream (the first record makes it) and for
// its replicas to be current, and returns its leader.
func streamLeader() *natsserver.Server {
	GinkgoHelper()
	Eventually(func() error {
		_, err := cluster.WaitStream(ctx, stream, time.Second)
		return err
	}).Should(Succeed())
	leader, err := cluster.StreamLeader(ctx, stream)
	Expect(err).NotTo(HaveOccurred())
	return leader
}

func createChassis(n int) []string {
	GinkgoHelper()
	var names []string
	for range n {
		name, err := harness.CreateChassis(ctx, admin, class, harness.GoodFacts())
		Expect(err).NotTo(HaveOccurred())
		names = append(names, name)
	}
	return names
}

func createLease(tenant string) *leasingv1alpha1.MacNodeLease {
	GinkgoHelper()
	_ = admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: tenant}})
	l := &leasingv1alpha1.MacNodeLease{
		ObjectMeta: metav1.ObjectMeta{Name: "mini", Namespace: tenant},
		Spec:       leasingv1alpha1.MacNodeLeaseSpec{NodeClassName: class, MinimumDuration: "24h"},
	}
	Expect(admin.Create(ctx, l)).To(Succeed())
	return l
}

func phaseOf(l *leasingv1alpha1.MacNodeLease) func() leasingv1alpha1.MacNodeLeasePhase {
	return func() leasingv1alpha1.MacNodeLeasePhase {
		cur := &leasingv1alpha1.MacNodeLease{}
		if err := admin.Get(ctx, client.ObjectKeyFromObject(l), cur); err != nil {
			return ""
		}
		return cur.Status.Phase
	}
}

func gone(l *leasingv1alpha1.MacNodeLease) func() bool {
	return func() bool {
		return apierrors.IsNotFound(admin.Get(ctx, client.ObjectKeyFromObject(l), &leasingv1alpha1.MacNodeLease{}))
	}
}

// gauge reads one series of the operator's registry.
func gauge(op *harness.Operator, name string, labels map[string]string) float64 {
	GinkgoHelper()
	fams, err := op.Registry.Gather()
	Expect(err).NotTo(HaveOccurred())
	return series(fams, name, labels)
}

// series is one series of a scrape.
func series(fams []*dto.MetricFamily, name string, labels map[string]string) float64 {
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
	metric:
		for _, m := range f.GetMetric() {
			for _, lp := range m.GetLabel() {
				if v, ok := labels[lp.GetName()]; ok && v != lp.GetValue() {
					continue metric
				}
			}
			return value(m)
		}
	}
	return math.NaN()
}

func value(m *dto.Metric) float64 {
	switch {
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	case m.Counter != nil:
		return m.Counter.GetValue()
	}
	return math.NaN()
}

func backlog(op *harness.Operator) float64 {
	GinkgoHelper()
	return gauge(op, "macrack_audit_backlog_records", map[string]string{"source": "journal"})
}

func failures(op *harness.Operator) float64 {
	GinkgoHelper()
	return gauge(op, "macrack_audit_publish_failures_total", nil)
}

// drained steps the operator's clock past the exporter's backoff until its
// backlog is empty and the lag, in the same scrape, is 0. The two are read
// together: a transition journaled between two scrapes (a chassis wiped
// after its lease went) would set one and not the other.
func drained(op *harness.Operator) {
	GinkgoHelper()
	Eventually(func(g Gomega) {
		op.Step(61 * time.Second)
		fams, err := op.Registry.Gather()
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(series(fams, "macrack_audit_backlog_records", map[string]string{"source": "journal"})).To(BeZero(), "the exporter's backlog drains")
		g.Expect(series(fams, "macrack_audit_export_lag_seconds", nil)).To(BeZero(), "the lag returns to 0")
	}).WithTimeout(90 * time.Second).WithPolling(time.Second).Should(Succeed())
}

// releaseHeld waits for held, deleted before its earliestReleaseAt, to be
// Held and for bound to be Bound, steps the operator's clock past the
// release, and waits for held to go: it is released and its records go
// out, past any backoff the exporter is in on that clock. Then the rest of
// the backlog drains.
func releaseHeld(op *harness.Operator, held, bound *leasingv1alpha1.MacNodeLease, others ...client.Object) {
	GinkgoHelper()
	Eventually(phaseOf(held)).Should(Equal(leasingv1alpha1.LeaseHeld))
	op.Step(24*time.Hour, append(others, held, bound)...)
	Eventually(phaseOf(bound)).Should(Equal(leasingv1alpha1.LeaseBound))
	Eventually(func() bool {
		op.Step(61 * time.Second)
		return gone(held)()
	}).WithTimeout(90*time.Second).WithPolling(time.Second).Should(BeTrue(), "the held lease is released, its records go out, and it goes")
	drained(op)
}

// restart starts s again, and waits until the stream's every replica is
// current.
func restart(s *natsserver.Server) {
	GinkgoHelper()
	Expect(s.Start()).To(Succeed())
	_, err := cluster.WaitStream(ctx, stream, time.Minute)
	Expect(err).NotTo(HaveOccurred())
}

// readStream is every record the stream holds, in order, as its leader
// answers once it has one.
func readStream() []cloudevents.Event {
	GinkgoHelper()
	var events []cloudevents.Event
	Eventually(func() error {
		r, err := sink.OpenReader(ctx, cluster.URL(), stream)
		if err != nil {
			return err
		}
		defer r.Close()
		events, err = r.All(ctx)
		return err
	}).WithTimeout(30 * time.Second).WithPolling(200 * time.Millisecond).Should(Succeed())
	return events
}

// journal is what the stream says of each object: its numbered records'
// sequences, sorted, and its records' types.
type journal struct {
	seqs  map[string][]int64
	types map[string][]string
}

// expectOnceEach expects every record in the stream exactly once, by id,
// and every object's numbered records from 1 without a gap.
func expectOnceEach(events []cloudevents.Event) journal {
	GinkgoHelper()
	count := map[string]int{}
	for _, ev := range events {
		count[ev.ID()]++
	}
	for id, n := range count {
		Expect(n).To(Equal(1), "record %s is stored %d times", id, n)
	}
	j := journal{seqs: map[string][]int64{}, types: map[string][]string{}}
	for _, ev := range events {
		parts := strings.Split(ev.ID(), "/")
		if parts[0] == "denial" {
			continue
		}
		Expect(parts).To(HaveLen(3), ev.ID())
		key := parts[0] + "/" + parts[1]
		j.types[key] = append(j.types[key], strings.TrimPrefix(ev.Type(), "io.macrack."))
		if n, err := strconv.ParseInt(parts[2], 10, 64); err == nil {
			j.seqs[key] = append(j.seqs[key], n)
		}
	}
	for key, s := range j.seqs {
		sort.Slice(s, func(i, k int) bool { return s[i] < s[k] })
		for i, n := range s {
			Expect(n).To(Equal(int64(i+1)), "%s: records %v have a gap", key, s)
		}
	}
	return j
}

// expectWhole expects the stream whole: each record once, no gaps, each
// live lease's and chassis' journal in the stream up to its end, and every
// deletion the watch saw checked.
func expectWhole(deletions *deletionWatch, minDeletions int) journal {
	GinkgoHelper()
	events := readStream()
	j := expectOnceEach(events)
	info, err := cluster.StreamInfo(ctx, stream)
	Expect(err).NotTo(HaveOccurred())
	Expect(info.State.NumSubjects).To(Equal(info.State.Msgs), "one record per subject")
	Expect(info.State.Msgs).To(BeEquivalentTo(len(events)))
	leases := &leasingv1alpha1.MacNodeLeaseList{}
	Expect(admin.List(ctx, leases)).To(Succeed())
	for _, l := range leases.Items {
		Expect(l.Status.Audit).NotTo(BeNil())
		Expect(j.seqs["lease/"+string(l.UID)]).To(HaveLen(int(l.Status.Audit.NextSequence-1)), "lease %s", l.Namespace)
	}
	nodes := &fleetv1alpha1.MacNodeList{}
	Expect(admin.List(ctx, nodes)).To(Succeed())
	for _, mn := range nodes.Items {
		Expect(mn.Status.Audit).NotTo(BeNil())
		Expect(j.seqs["chassis/"+string(mn.UID)]).To(HaveLen(int(mn.Status.Audit.NextSequence-1)), "chassis %s", mn.Name)
		// Its cursor is written once 32 records are past it (issue 39),
		// so that its writer prunes: never further behind than that.
		Expect(mn.Status.Audit.NextSequence-1-mn.Status.Audit.ExportedSequence).To(BeNumerically("<", fleetv1alpha1.MaxAuditRecords/2), "chassis %s", mn.Name)
	}
	// Each deletion is checked against the stream as the watch delivers
	// it, which takes a read of the stream: wait for the checks to end.
	Eventually(func() int {
		checked, _ := deletions.results()
		return checked
	}).Should(BeNumerically(">=", minDeletions), "the watch saw the leases go")
	_, violations := deletions.results()
	Expect(violations).To(BeEmpty())
	return j
}

// deletionWatch checks, at the moment each lease leaves the API, that the
// stream already holds every record it journaled and its deleted record:
// the audit finalizer left only after the sink acknowledged them.
type deletionWatch struct {
	stop func()
	wg   sync.WaitGroup

	mu         sync.Mutex
	checked    int
	violations []string
}

func watchDeletions() *deletionWatch {
	GinkgoHelper()
	wctx, cancel := context.WithCancel(ctx)
	w, err := env.WatchClient().Watch(wctx, &leasingv1alpha1.MacNodeLeaseList{})
	Expect(err).NotTo(HaveOccurred())
	d := &deletionWatch{stop: cancel}
	d.wg.Add(1)
	go func() {
		defer GinkgoRecover()
		defer d.wg.Done()
		for ev := range w.ResultChan() {
			l, ok := ev.Object.(*leasingv1alpha1.MacNodeLease)
			if ev.Type != watch.Deleted || !ok {
				continue
			}
			d.check(l)
		}
	}()
	DeferCleanup(func() {
		cancel()
		w.Stop()
		d.wg.Wait()
	})
	return d
}

func (d *deletionWatch) check(l *leasingv1alpha1.MacNodeLease) {
	want := []string{event.DeletedID("lease", string(l.UID))}
	if l.Status.Audit != nil {
		for seq := int64(1); seq < l.Status.Audit.NextSequence; seq++ {
			want = append(want, event.ID("lease", string(l.UID), seq))
		}
	}
	// One answer from the stream's leader is the answer: a record it
	// acknowledged is committed, and a new leader answers once it applied
	// what its predecessor committed.
	var ids []string
	deadline := time.Now().Add(30 * time.Second)
	for {
		r, err := sink.OpenReader(ctx, cluster.URL(), stream)
		if err == nil {
			var events []cloudevents.Event
			events, err = r.All(ctx)
			r.Close()
			for _, ev := range events {
				ids = append(ids, ev.ID())
			}
		}
		if err == nil || time.Now().After(deadline) {
			break
		}
		ids = nil
		time.Sleep(200 * time.Millisecond)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.checked++
	for _, id := range want {
		if !slices.Contains(ids, id) {
			d.violations = append(d.violations, fmt.Sprintf("lease %s/%s left the API before its record %s was stored", l.Namespace, l.Name, id))
		}
	}
}

func (d *deletionWatch) results() (int, []string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.checked, slices.Clone(d.violations)
}

// others is every server of the cluster but s.
func others(s *natsserver.Server) []*natsserver.Server {
	var out []*natsserver.Server
	for _, o := range cluster.Servers {
		if o != s {
			out = append(out, o)
		}
	}
	return out
}

// inFlight is a publish caught between its proposal and its PubAck.
type inFlight struct {
	leader    *natsserver.Server
	followers []*natsserver.Server
	group     string
	// index is the proposal's entry in the stream's Raft log.
	index uint64
}

// catchProposal leaves a publish of the exporter proposed by the stream's
// leader and frozen there before its PubAck. It moves the stream's
// leadership to the server the exporter is connected to, pauses the
// followers (the leader proposes, and no quorum answers), calls trigger to
// make a record, waits for the proposal in the leader's log, freezes the
// leader, and resumes the followers, which take the proposal from their
// sockets into their logs, elect a leader among themselves and commit it.
// Any PubAck for it goes to the frozen server, which holds the exporter's
// connection: the exporter never hears it. The caller kills the frozen
// leader, or the whole cluster.
func catchProposal(trigger func()) inFlight {
	GinkgoHelper()
	var leader *natsserver.Server
	Eventually(func() error {
		var err error
		leader, err = cluster.ClientServer(exporterName)
		return err
	}).Should(Succeed())
	Expect(cluster.MoveStreamLeader(ctx, stream, leader)).To(Succeed())
	info, err := cluster.StreamInfo(ctx, stream)
	Expect(err).NotTo(HaveOccurred())
	c := inFlight{leader: leader, followers: others(leader), group: info.Cluster.RaftGroup}
	before, err := leader.Raft(c.group)
	Expect(err).NotTo(HaveOccurred())
	Expect(before.PIndex).To(Equal(before.Committed), "nothing is in flight yet")

	for _, f := range c.followers {
		Expect(f.Pause()).To(Succeed())
	}
	trigger()
	Eventually(func() (bool, error) {
		g, err := leader.Raft(c.group)
		c.index = g.PIndex
		return g.PIndex > g.Committed, err
	}).WithTimeout(30*time.Second).Should(BeTrue(), "the leader proposes the exporter's publish")
	// Between the proposal and here no quorum answered: the leader did not
	// commit it, and sent no PubAck.
	Expect(leader.Pause()).To(Succeed())
	for _, f := range c.followers {
		Expect(f.Resume()).To(Succeed())
	}
	for _, f := range c.followers {
		Eventually(func() (uint64, error) {
			g, err := f.Raft(c.group)
			return g.PIndex, err
		}).Should(BeNumerically(">=", c.index), "follower %s takes the proposal into its log", f.Name)
	}
	Eventually(func() (uint64, error) {
		g, err := c.followers[0].Raft(c.group)
		return g.Committed, err
	}).Should(BeNumerically(">=", c.index), "a new leader commits the proposal its frozen predecessor made")
	return c
}
