package audit

import (
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	leasingv1alpha1 "github.com/boualleiguie/macrack-operator/api/leasing/v1alpha1"
	"github.com/boualleiguie/macrack-operator/internal/audit/sink"
)

// Each fault strikes mid-wave: leases are being bound, held and released,
// and their records are on their way to the stream. The duplicate window is
// JetStream's 10 minutes, longer than each outage.
var _ = Describe("The audit stream on a three-node JetStream, the stream at three replicas", func() {
	AfterEach(healCluster)

	It("stores every record once with a follower killed and restarted mid-wave", func() {
		createChassis(3)
		op := startOperator(sink.JetStreamOptions{})
		deletions := watchDeletions()
		a, b := createLease("follower-a"), createLease("follower-b")
		follower := others(streamLeader())[0]

		By("killing a follower while the wave's records go out")
		Expect(follower.Kill()).To(Succeed())
		Eventually(phaseOf(a)).Should(Equal(leasingv1alpha1.LeaseBound))
		Eventually(phaseOf(b)).Should(Equal(leasingv1alpha1.LeaseBound))
		c := createLease("follower-c")
		Expect(admin.Delete(ctx, a)).To(Succeed()) // before earliestReleaseAt: Held
		By("two replicas of three acknowledge: the backlog drains and the held lease goes")
		releaseHeld(op, a, c, b)

		By("restarting the follower: it catches up, and leads the stream with every record")
		restart(follower)
		before := expectWhole(deletions, 1)
		Expect(cluster.MoveStreamLeader(ctx, stream, follower)).To(Succeed())
		after := expectWhole(deletions, 1)
		Expect(after).To(Equal(before), "the restarted follower holds what its peers hold")
		Expect(before.types["lease/"+string(a.UID)]).To(ContainElements("lease.created", "lease.bound", "lease.held", "lease.released", "lease.deleted"))
		stopOperator(op)
	})

	It("stores every record once with the stream's leader killed mid-wave", func() {
		createChassis(3)
		op := startOperator(sink.JetStreamOptions{})
		deletions := watchDeletions()
		a, b := createLease("leader-a"), createLease("leader-b")
		Eventually(phaseOf(a)).Should(Equal(leasingv1alpha1.LeaseBound))
		leader := streamLeader()

		By("killing the stream's leader while the wave's records go out")
		Expect(admin.Delete(ctx, a)).To(Succeed())
		c := createLease("leader-c")
		Expect(leader.Kill()).To(Succeed())
		By("the followers elect a leader: the backlog drains and the released lease goes")
		releaseHeld(op, a, c, b)

		By("restarting the old leader")
		restart(leader)
		j := expectWhole(deletions, 1)
		Expect(j.types["lease/"+string(c.UID)]).To(ContainElements("lease.created", "lease.bound"))
		stopOperator(op)
	})

	It("stores a record once when the leader dies after proposing it and before its PubAck, and the exporter re-sends it", func() {
		createChassis(2)
		op := startOperator(sink.JetStreamOptions{})
		deletions := watchDeletions()
		a := createLease("inflight-a")
		Eventually(phaseOf(a)).Should(Equal(leasingv1alpha1.LeaseBound))
		drained(op)
		streamLeader()
		failed := failures(op)

		By("catching the records of a new lease between their proposal and their PubAck")
		var b *leasingv1alpha1.MacNodeLease
		c := catchProposal(func() { b = createLease("inflight-b") })
		By("killing the frozen leader: its proposal lives on in the followers' logs")
		Expect(c.leader.Kill()).To(Succeed())
		Eventually(func() float64 { return failures(op) }).Should(BeNumerically(">", failed), "the exporter's publish goes unanswered")

		By("the exporter re-sends to the new leader, which committed the proposal: stored once")
		op.Step(time.Minute)
		Eventually(phaseOf(b)).Should(Equal(leasingv1alpha1.LeaseBound))
		drained(op)
		Expect(admin.Delete(ctx, a)).To(Succeed())
		op.Step(24*time.Hour, a, b)
		Eventually(gone(a)).Should(BeTrue())
		drained(op)
		for _, f := range c.followers {
			g, err := f.Raft(c.group)
			Expect(err).NotTo(HaveOccurred())
			Expect(g.Committed).To(BeNumerically(">=", c.index), "follower %s committed the proposal the old leader made", f.Name)
		}
		restart(c.leader)
		j := expectWhole(deletions, 1)
		Expect(j.types["lease/"+string(b.UID)]).To(ContainElements("lease.created", "lease.bound"))
		stopOperator(op)
	})
})
