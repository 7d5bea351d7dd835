package quarantine

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	computev1alpha1 "github.com/boualleiguie/macrack-operator/api/compute/v1alpha1"
	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
	leasingv1alpha1 "github.com/boualleiguie/macrack-operator/api/leasing/v1alpha1"
	"github.com/boualleiguie/macrack-operator/internal/cli"
	"github.com/boualleiguie/macrack-operator/test/envtest/harness"
)

const (
	class = "m4-quarantine"
	image = "quarantine-golden"
)

// chassis is one sim Mac mini leased to its own tenant, one instance
// running, watched for the loop's invariants from the start.
type chassis struct {
	agent   *harness.Agent
	opts    harness.AgentOptions
	tenant  *harness.Tenant
	lease   *leasingv1alpha1.MacNodeLease
	binding fleetv1alpha1.Binding
	first   *computev1alpha1.MacOSInstance
	second  *computev1alpha1.MacOSInstance
	// stopWatch ends watch's goroutine, which watched counts.
	stopWatch context.CancelFunc
	watched   sync.WaitGroup
	mu        sync.Mutex
	// watchErr is why the watch missed states, if it did.
	watchErr error
	// strangers are the bindings seen on the MacNode that name another lease.
	strangers []fleetv1alpha1.Binding
	// phases are the MacNode's phases, in the order seen.
	phases []fleetv1alpha1.MacNodePhase
}

func agentOptions(serial, stateDir string) harness.AgentOptions {
	return harness.AgentOptions{Serial: serial, Class: class, StateDir: stateDir, HelperPath: helperPath,
		Heartbeat: time.Second, RebootTime: time.Second, StopGrace: 5 * time.Second,
		Log: zap.New(zap.WriteTo(GinkgoWriter), zap.UseDevMode(true)).WithName(serial)}
}

func startAgent(o harness.AgentOptions) *harness.Agent {
	GinkgoHelper()
	a, err := env.StartAgent(o)
	Expect(err).NotTo(HaveOccurred())
	agents[a.Node] = a
	return a
}

func macNode(node string) *fleetv1alpha1.MacNode {
	GinkgoHelper()
	mn := &fleetv1alpha1.MacNode{}
	Expect(admin.Get(ctx, client.ObjectKey{Name: node}, mn)).To(Succeed())
	return mn
}

func instance(ns, name, lease string) *computev1alpha1.MacOSInstance {
	return &computev1alpha1.MacOSInstance{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: computev1alpha1.MacOSInstanceSpec{LeaseName: lease, ImageName: image, CPU: 4,
			Memory: resource.MustParse("8Gi"), Disk: resource.MustParse("100Gi")}}
}

func runtimePhase(i *computev1alpha1.MacOSInstance) func() computev1alpha1.VMPhase {
	return func() computev1alpha1.VMPhase {
		got := &computev1alpha1.MacOSInstance{}
		if err := admin.Get(ctx, client.ObjectKeyFromObject(i), got); err != nil || got.Status.Runtime == nil {
			return ""
		}
		return got.Status.Runtime.Phase
	}
}

// newChassis starts a sim mini, leases it to a new tenant (the only free
// chassis of the class, so the lease binds it) and runs one instance.
func newChassis(tune ...func(*harness.AgentOptions)) *chassis {
	GinkgoHelper()
	c := &chassis{opts: agentOptions(harness.NewSerial(), "")}
	for _, f := range tune {
		f(&c.opts)
	}
	c.agent = startAgent(c.opts)
	c.opts.StateDir = c.agent.StateDir
	Eventually(func() fleetv1alpha1.MacNodePhase { return macNode(c.agent.Node).Status.Phase }).Should(Equal(fleetv1alpha1.MacNodeReady))
	var err error
	c.tenant, err = env.NewTenant(ctx, "dev")
	Expect(err).NotTo(HaveOccurred())
	c.lease = &leasingv1alpha1.MacNodeLease{ObjectMeta: metav1.ObjectMeta{Name: "build", Namespace: c.tenant.Namespace},
		Spec: leasingv1alpha1.MacNodeLeaseSpec{NodeClassName: class, MinimumDuration: "24h"}}
	Expect(c.tenant.Client.Create(ctx, c.lease)).To(Succeed())
	Eventually(func() leasingv1alpha1.MacNodeLeasePhase {
		Expect(admin.Get(ctx, client.ObjectKeyFromObject(c.lease), c.lease)).To(Succeed())
		return c.lease.Status.Phase
	}).Should(Equal(leasingv1alpha1.LeaseBound))
	Expect(c.lease.Status.NodeName).To(Equal(c.agent.Node))
	c.binding = *macNode(c.agent.Node).Status.Binding.DeepCopy()
	c.first = instance(c.tenant.Namespace, "first", c.lease.Name)
	Expect(c.tenant.Client.Create(ctx, c.first)).To(Succeed())
	Eventually(runtimePhase(c.first)).Should(Equal(computev1alpha1.VMRunning))
	Expect(admin.Get(ctx, client.ObjectKeyFromObject(c.first), c.first)).To(Succeed())
	c.watch()
	return c
}

// watch records, until stopWatching, every binding of the MacNode that
// names another lease, and the phases it goes through. It watches through
// the API server (not a cache) from a first list's resourceVersion, and
// resumes an ended watch from the last one seen, so it sees every state,
// however short, and reads nothing more than the changes.
func (c *chassis) watch() {
	GinkgoHelper()
	wc := env.WatchClient()
	wctx, cancel := context.WithCancel(ctx)
	c.stopWatch = cancel
	byName := client.MatchingFields{"metadata.name": c.agent.Node}
	list := &fleetv1alpha1.MacNodeList{}
	Expect(wc.List(wctx, list, byName)).To(Succeed())
	for i := range list.Items {
		c.see(&list.Items[i])
	}
	rv := list.ResourceVersion
	from := func() []client.ListOption {
		return []client.ListOption{byName, &client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: rv, AllowWatchBookmarks: true}}}
	}
	wi, err := wc.Watch(wctx, list, from()...)
	Expect(err).NotTo(HaveOccurred())
	c.watched.Add(1)
	go func() {
		defer c.watched.Done()
		for {
			for ev := range wi.ResultChan() {
				if ev.Type == watch.Error {
					wi.Stop()
					// Such as 410 Gone: states were missed, so "never"
					// cannot be asserted. An ended watch ends with an
					// error too.
					if wctx.Err() == nil {
						c.lost(fmt.Errorf("the MacNode's watch reported an error: %v", ev.Object))
					}
					return
				}
				mn, ok := ev.Object.(*fleetv1alpha1.MacNode)
				if !ok {
					continue
				}
				rv = mn.ResourceVersion
				if ev.Type != watch.Bookmark {
					c.see(mn)
				}
			}
			wi.Stop()
			if wctx.Err() != nil {
				return
			}
			if wi, err = wc.Watch(wctx, list, from()...); err != nil {
				if wctx.Err() == nil {
					c.lost(fmt.Errorf("the MacNode's watch ended and could not resume from %q: %w", rv, err))
				}
				return
			}
		}
	}()
}

func (c *chassis) see(mn *fleetv1alpha1.MacNode) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if b := mn.Status.Binding; b != nil && b.LeaseUID != c.binding.LeaseUID {
		c.strangers = append(c.strangers, *b)
	}
	if n := len(c.phases); n == 0 || c.phases[n-1] != mn.Status.Phase {
		c.phases = append(c.phases, mn.Status.Phase)
	}
}

func (c *chassis) lost(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.watchErr = err
}

// stopWatching ends the watch, and fails if it missed any state.
func (c *chassis) stopWatching() {
	GinkgoHelper()
	c.stopWatch()
	c.watched.Wait()
	c.mu.Lock()
	defer c.mu.Unlock()
	Expect(c.watchErr).NotTo(HaveOccurred())
}

// stick makes the host's kernel counter stick, then asks for a second VM:
// its start is refused with code 6 while one VM runs, which is the bug.
func (c *chassis) stick() {
	GinkgoHelper()
	stuck, err := c.agent.StickQuota()
	Expect(err).NotTo(HaveOccurred())
	Expect(stuck).To(BeNumerically(">", 0))
	c.second = instance(c.tenant.Namespace, "second", c.lease.Name)
	Expect(c.tenant.Client.Create(ctx, c.second)).To(Succeed())
}

// stickByAnnotation asks the sim agent, as macrackctl sim quota-stick
// does, to stick its counter and try a start of its own.
func (c *chassis) stickByAnnotation() {
	GinkgoHelper()
	mn := &fleetv1alpha1.MacNode{}
	mn.Name = c.agent.Node
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, fleetv1alpha1.SimQuotaStickAnnotation, time.Now().Format(time.RFC3339Nano))
	Expect(admin.Patch(ctx, mn, client.RawPatch(types.MergePatchType, []byte(patch)))).To(Succeed())
	c.second = c.first
}

// retire takes a chassis that is back in the pool out of service.
func (c *chassis) retire() {
	GinkgoHelper()
	mn := &fleetv1alpha1.MacNode{}
	mn.Name = c.agent.Node
	Expect(admin.Patch(ctx, mn, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"retired":true}}`)))).To(Succeed())
	Eventually(func() fleetv1alpha1.MacNodePhase { return macNode(c.agent.Node).Status.Phase }).Should(Equal(fleetv1alpha1.MacNodeRetired))
}

func (c *chassis) quarantine() *fleetv1alpha1.QuarantineStatus {
	return macNode(c.agent.Node).Status.Quarantine
}

// recovered waits for the loop to finish, and asserts every invariant.
func (c *chassis) recovered() {
	GinkgoHelper()
	Eventually(func(g Gomega) {
		mn := macNode(c.agent.Node)
		g.Expect(mn.Status.Quarantine).NotTo(BeNil())
		g.Expect(mn.Status.Quarantine.RecoveredAt).NotTo(BeNil(), "%+v", mn.Status.Quarantine)
		g.Expect(mn.Status.Phase).To(Equal(fleetv1alpha1.MacNodeLeased))
	}, 90*time.Second).Should(Succeed())
	c.stopWatching()

	mn := macNode(c.agent.Node)
	q := mn.Status.Quarantine
	Expect(q.QuarantinedAt.IsZero()).To(BeFalse())
	Expect(q.RebootRequestedAt).NotTo(BeNil())
	Expect(q.RebootedAt).NotTo(BeNil())
	Expect(mn.Status.Reported.BootID).NotTo(Equal(q.BootID), "recovered without a new boot")
	Expect(equality.Semantic.DeepEqual(mn.Status.Binding, &c.binding)).To(BeTrue(),
		"the same lease holds the chassis, with the same earliestReleaseAt: %+v, was %+v", mn.Status.Binding, c.binding)
	lease := &leasingv1alpha1.MacNodeLease{}
	Expect(admin.Get(ctx, client.ObjectKeyFromObject(c.lease), lease)).To(Succeed())
	Expect(lease.Status.EarliestReleaseAt.Equal(c.lease.Status.EarliestReleaseAt)).To(BeTrue())
	Expect(lease.Status.NodeName).To(Equal(c.agent.Node))
	c.mu.Lock()
	Expect(c.strangers).To(BeEmpty(), "another lease was bound to the chassis")
	Expect(c.phases).To(ContainElements(fleetv1alpha1.MacNodeQuarantined, fleetv1alpha1.MacNodeRebooting))
	Expect(c.phases).NotTo(ContainElement(fleetv1alpha1.MacNodeReady), "the chassis went back to the pool")
	c.mu.Unlock()

	// No instance is lost: both run, the first again after its stop.
	for _, i := range []*computev1alpha1.MacOSInstance{c.first, c.second} {
		Eventually(runtimePhase(i), 60*time.Second).Should(Equal(computev1alpha1.VMRunning), "instance %s", i.Name)
	}
	first := &computev1alpha1.MacOSInstance{}
	Expect(admin.Get(ctx, client.ObjectKeyFromObject(c.first), first)).To(Succeed())
	Expect(first.UID).To(Equal(c.first.UID))
	Expect(first.Status.Runtime.LastStop).NotTo(BeNil(), "the stop is on record")
	Expect(first.Status.Runtime.LastStop.Reason).To(Equal("ChassisQuarantined"))

	maxVMs, err := c.agent.MaxActiveVMs()
	Expect(err).NotTo(HaveOccurred())
	Expect(maxVMs).To(BeNumerically("<=", fleetv1alpha1.KernelVMLimit), "a third VM existed")
	Eventually(func() metav1.ConditionStatus {
		l := &leasingv1alpha1.MacNodeLease{}
		Expect(admin.Get(ctx, client.ObjectKeyFromObject(c.lease), l)).To(Succeed())
		if cond := apimeta.FindStatusCondition(l.Status.Conditions, leasingv1alpha1.ConditionChassisAvailable); cond != nil {
			return cond.Status
		}
		return ""
	}).Should(Equal(metav1.ConditionTrue))
}

func eventReasons(ns, name string) []string {
	GinkgoHelper()
	list := &eventsv1.EventList{}
	Expect(admin.List(ctx, list, client.InNamespace(ns))).To(Succeed())
	var out []string
	for _, e := range list.Items {
		if e.Regarding.Name == name {
			out = append(out, e.Reason)
		}
	}
	return out
}

// quarantineSteps are the lease's Events of the quarantine loop, the
// Quarantine action's, oldest first.
func quarantineSteps(ns, name string) []string {
	GinkgoHelper()
	list := &eventsv1.EventList{}
	Expect(admin.List(ctx, list, client.InNamespace(ns))).To(Succeed())
	slices.SortStableFunc(list.Items, func(a, b eventsv1.Event) int { return a.EventTime.Compare(b.EventTime.Time) })
	var out []string
	for _, e := range list.Items {
		if e.Regarding.Name == name && e.Action == "Quarantine" {
			out = append(out, e.Reason)
		}
	}
	return out
}

var _ = Describe("The quota-stuck loop", func() {

	It("goes round from macrackctl sim quota-stick to the same tenant, its VM stopped cleanly, visible on the lease", func() {
		c := newChassis()
		kubeconfig, err := env.AdminKubeconfig(GinkgoT().TempDir())
		Expect(err).NotTo(HaveOccurred())
		var out, errOut bytes.Buffer
		Expect(cli.Main([]string{"sim", "quota-stick", c.agent.Serial, "--kubeconfig", kubeconfig}, &out, &errOut)).To(Equal(0), errOut.String())
		Expect(out.String()).To(ContainSubstring("watch: kubectl get mn"))

		Eventually(func() fleetv1alpha1.MacNodePhase { return macNode(c.agent.Node).Status.Phase }).Should(Equal(fleetv1alpha1.MacNodeQuarantined))
		q := c.quarantine()
		Expect(q.Evidence).To(ContainSubstring("code 6"))
		Expect(q.Evidence).To(ContainSubstring("1 of 2 VMs"))

		// The fence: admission refuses a new instance with its own rule,
		// and a healthy chassis, the control, admits (the first instance).
		err = c.tenant.Client.Create(ctx, instance(c.tenant.Namespace, "during", c.lease.Name))
		Expect(err).To(MatchError(ContainSubstring("quarantine.fence")))
		node := &corev1.Node{}
		Expect(admin.Get(ctx, client.ObjectKey{Name: c.agent.Node}, node)).To(Succeed())
		Expect(node.Spec.Taints).To(ContainElement(HaveField("Key", fleetv1alpha1.QuarantinedTaint)))
		Eventually(func() []string { return eventReasons(c.tenant.Namespace, c.lease.Name) }).Should(ContainElement(leasingv1alpha1.ReasonChassisQuarantined))

		// Stopped, before the reboot: the sim's record of the disk's close.
		Eventually(runtimePhase(c.first)).Should(Equal(computev1alpha1.VMStopped))
		clean, err := c.agent.DiskClosedCleanly(string(c.first.UID))
		Expect(err).NotTo(HaveOccurred())
		Expect(clean).To(BeTrue(), "the quarantine's stop closed the tenant's disk uncleanly")

		c.second = c.first // the annotation's start is the agent's own probe
		c.recovered()
		first := &computev1alpha1.MacOSInstance{}
		Expect(admin.Get(ctx, client.ObjectKeyFromObject(c.first), first)).To(Succeed())
		Expect(first.Status.Runtime.LastStop.Method).NotTo(Equal(computev1alpha1.StopForced))
		Expect(c.agent.Reboots()).To(Equal(1))
		// The tenant reads each step on its lease, in order, the reboot
		// included.
		Eventually(func() []string {
			return quarantineSteps(c.tenant.Namespace, c.lease.Name)
		}).Should(Equal([]string{leasingv1alpha1.ReasonChassisQuarantined, leasingv1alpha1.ReasonChassisRebooting, leasingv1alpha1.ReasonChassisRecovered}))
		Expect(eventReasons(metav1.NamespaceDefault, c.agent.Node)).To(ContainElements(
			fleetv1alpha1.ReasonQuarantineStarted, fleetv1alpha1.ReasonRebootRequested, fleetv1alpha1.ReasonRebooted, fleetv1alpha1.ReasonRecovered))
	})

	// The chaos table: at each step, the operator, the agent or both die and
	// come back, and the loop completes with every invariant.
	type step struct {
		name string
		// reached reports whether the loop stands at the step.
		reached func(c *chassis) bool
	}
	steps := []step{
		{"after detect", func(c *chassis) bool {
			r := macNode(c.agent.Node).Status.Reported
			return r != nil && r.Quota != nil && r.Quota.State == fleetv1alpha1.QuotaStuck
		}},
		{"after fence", func(c *chassis) bool {
			return macNode(c.agent.Node).Status.Phase == fleetv1alpha1.MacNodeQuarantined
		}},
		{"mid-stop", func(c *chassis) bool {
			return runtimePhase(c.first)() == computev1alpha1.VMStopping
		}},
		{"mid-reboot", func(c *chassis) bool { return c.agent.Reboots() > 0 }},
		{"after reattach", func(c *chassis) bool {
			q := c.quarantine()
			return q != nil && q.RebootedAt != nil
		}},
	}
	kills := []string{"operator", "agent", "both"}
	for _, s := range steps {
		for _, kill := range kills {
			It(fmt.Sprintf("completes when the %s is killed %s", kill, s.name), func() {
				var tune []func(*harness.AgentOptions)
				if s.name == "mid-stop" {
					// A guest slow to shut down keeps the VM Stopping long
					// enough to kill someone there.
					tune = append(tune, func(o *harness.AgentOptions) { o.HelperArgs = []string{"--sim-shutdown-time=3s"} })
				}
				c := newChassis(tune...)
				early := s.name == "after detect" && kill != "agent"
				if early {
					// Down before the detection, so that it is the
					// restarted operator that fences; the agent, which
					// detects, goes down after. With no controller to
					// place a second instance, the sim's fault makes the
					// agent try the start itself.
					c.down("operator")
					c.stickByAnnotation()
				} else {
					c.stick()
				}
				Eventually(func() bool { return s.reached(c) }, 60*time.Second, 10*time.Millisecond).Should(BeTrue(), "the loop never reached %s", s.name)
				if early {
					if kill == "both" {
						c.down("agent")
					}
					Consistently(func() *fleetv1alpha1.QuarantineStatus { return c.quarantine() }, time.Second).Should(BeNil(), "fenced with the operator down")
				} else {
					c.down(kill)
					time.Sleep(time.Second) // dead for a moment: the others carry on without it
				}
				c.up(kill)
				c.recovered()
			})
		}
	}

	// clocksAt sets the operator's clocks, the controllers' and the
	// webhooks', to at, and enqueues objs: a day later for a floor to pass,
	// then back at the real now, so that the specs after compare the
	// agents' clocks with a true one.
	clocksAt := func(at time.Time, objs ...client.Object) {
		hooks.Clock.SetTime(at)
		op.Clock.SetTime(at)
		op.Step(0, objs...)
	}

	It("releases a lease whose floor passed during the outage only after the chassis is back, then normally", func() {
		// A reboot slow enough for the floor to pass during it.
		c := newChassis(func(o *harness.AgentOptions) { o.RebootTime = 8 * time.Second })
		Expect(c.tenant.Client.Delete(ctx, c.lease)).To(Succeed())
		Eventually(func() leasingv1alpha1.MacNodeLeasePhase {
			l := &leasingv1alpha1.MacNodeLease{}
			Expect(admin.Get(ctx, client.ObjectKeyFromObject(c.lease), l)).To(Succeed())
			return l.Status.Phase
		}).Should(Equal(leasingv1alpha1.LeaseHeld))
		c.stickByAnnotation() // a Held lease takes no new instance
		Eventually(func() bool { return c.agent.Reboots() > 0 }).Should(BeTrue())

		clocksAt(time.Now().Add(25*time.Hour), c.lease)
		defer clocksAt(time.Now())
		Eventually(func() string {
			l := &leasingv1alpha1.MacNodeLease{}
			Expect(admin.Get(ctx, client.ObjectKeyFromObject(c.lease), l)).To(Succeed())
			if cond := apimeta.FindStatusCondition(l.Status.Conditions, leasingv1alpha1.ConditionReleased); cond != nil {
				return cond.Reason
			}
			return ""
		}).Should(Equal(leasingv1alpha1.ReasonChassisQuarantined), "the release waits for the chassis")
		Expect(admin.Get(ctx, client.ObjectKeyFromObject(c.first), &computev1alpha1.MacOSInstance{})).To(Succeed(),
			"an instance was deleted before its chassis came back")

		// Back: the same lease held it, then the normal release.
		Eventually(func(g Gomega) {
			mn := macNode(c.agent.Node)
			g.Expect(mn.Status.Quarantine.RecoveredAt).NotTo(BeNil())
			g.Expect(mn.Status.Binding).To(BeNil())
			g.Expect(mn.Status.Phase).To(Equal(fleetv1alpha1.MacNodeReady))
			h := mn.Status.History
			g.Expect(h).NotTo(BeEmpty())
			g.Expect(h[len(h)-1].LeaseUID).To(Equal(c.lease.UID))
			g.Expect(h[len(h)-1].Wipes).To(ContainElement(HaveField("UID", c.first.UID)), "the disk was wiped on the way out")
		}, 90*time.Second).Should(Succeed())
		c.stopWatching()
		Expect(c.strangers).To(BeEmpty())
		// The lease goes after its chassis, on its own write.
		Eventually(func() bool {
			return apierrors.IsNotFound(admin.Get(ctx, client.ObjectKeyFromObject(c.lease), &leasingv1alpha1.MacNodeLease{}))
		}).Should(BeTrue())
		// Back in the pool, the chassis would race the next spec's own for
		// its lease: newChassis binds the only free chassis of the class.
		c.retire()
	})

	It("gives up after more than 3 quarantines in 24 hours: the chassis stays Quarantined, is not rebooted, and goes to no one", func() {
		c := newChassis()
		for round := 1; round <= fleetv1alpha1.MaxQuarantinesPerDay; round++ {
			c.stickByAnnotation()
			Eventually(func(g Gomega) {
				mn := macNode(c.agent.Node)
				g.Expect(mn.Status.RecentQuarantines).To(HaveLen(round))
				g.Expect(mn.Status.Quarantine.RecoveredAt).NotTo(BeNil())
				g.Expect(mn.Status.Phase).To(Equal(fleetv1alpha1.MacNodeLeased))
			}, 90*time.Second).Should(Succeed(), "round %d", round)
			Eventually(runtimePhase(c.first), 60*time.Second).Should(Equal(computev1alpha1.VMRunning), "round %d", round)
		}
		c.stickByAnnotation()
		Eventually(func(g Gomega) {
			mn := macNode(c.agent.Node)
			g.Expect(mn.Status.Quarantine.NeedsAttention).To(BeTrue())
			g.Expect(apimeta.IsStatusConditionTrue(mn.Status.Conditions, fleetv1alpha1.ConditionNeedsAttention)).To(BeTrue())
		}).Should(Succeed())
		Eventually(runtimePhase(c.first)).Should(Equal(computev1alpha1.VMStopped), "its VMs stop all the same")
		Consistently(func(g Gomega) {
			mn := macNode(c.agent.Node)
			g.Expect(mn.Status.Phase).To(Equal(fleetv1alpha1.MacNodeQuarantined))
			g.Expect(mn.Status.Quarantine.RebootRequestedAt).To(BeNil())
		}, 3*time.Second).Should(Succeed())
		Expect(c.agent.Reboots()).To(Equal(fleetv1alpha1.MaxQuarantinesPerDay), "rebooted a chassis that needs a person")
		Eventually(func() string {
			l := &leasingv1alpha1.MacNodeLease{}
			Expect(admin.Get(ctx, client.ObjectKeyFromObject(c.lease), l)).To(Succeed())
			if cond := apimeta.FindStatusCondition(l.Status.Conditions, leasingv1alpha1.ConditionChassisAvailable); cond != nil {
				return cond.Reason
			}
			return ""
		}).Should(Equal(leasingv1alpha1.ReasonChassisNeedsAttention))
		Expect(eventReasons(metav1.NamespaceDefault, c.agent.Node)).To(ContainElement(fleetv1alpha1.ReasonTooManyQuarantines))

		// Its lease ends: the chassis is let go, wiped, and stays fenced.
		Expect(c.tenant.Client.Delete(ctx, c.lease)).To(Succeed())
		clocksAt(time.Now().Add(25*time.Hour), c.lease)
		defer clocksAt(time.Now())
		Eventually(func() bool {
			return apierrors.IsNotFound(admin.Get(ctx, client.ObjectKeyFromObject(c.lease), &leasingv1alpha1.MacNodeLease{}))
		}, 60*time.Second).Should(BeTrue(), "the lease of a chassis that needs a person is still released")
		other, err := env.NewTenant(ctx, "next")
		Expect(err).NotTo(HaveOccurred())
		next := &leasingv1alpha1.MacNodeLease{ObjectMeta: metav1.ObjectMeta{Name: "next", Namespace: other.Namespace},
			Spec: leasingv1alpha1.MacNodeLeaseSpec{NodeClassName: class, MinimumDuration: "24h"}}
		Expect(other.Client.Create(ctx, next)).To(Succeed())
		Consistently(func(g Gomega) {
			mn := macNode(c.agent.Node)
			g.Expect(mn.Status.Phase).To(Equal(fleetv1alpha1.MacNodeQuarantined))
			g.Expect(mn.Status.Binding).To(BeNil())
		}, 3*time.Second).Should(Succeed())
		c.stopWatching()
		Expect(c.strangers).To(BeEmpty(), "another tenant got the chassis")
		Expect(c.phases).NotTo(ContainElement(fleetv1alpha1.MacNodeReady))
		Expect(other.Client.Delete(ctx, next)).To(Succeed())
	})
})

// down stops the operator, the agent or both.
func (c *chassis) down(who string) {
	GinkgoHelper()
	if who == "operator" || who == "both" {
		stopped := op
		op = nil // AfterSuite stops only a running operator
		Expect(stopped.Stop()).To(Succeed())
	}
	if who == "agent" || who == "both" {
		Expect(c.agent.Stop()).To(Succeed())
	}
}

// up starts them again: the agent with its state directory, in the same
// boot (or in the new one, when it was killed mid-reboot).
func (c *chassis) up(who string) {
	GinkgoHelper()
	if who == "operator" || who == "both" {
		var err error
		op, err = env.StartOperator(operatorOptions())
		Expect(err).NotTo(HaveOccurred())
	}
	if who == "agent" || who == "both" {
		c.agent = startAgent(c.opts)
	}
}
