package instances

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	computev1alpha1 "github.com/boualleiguie/macrack-operator/api/compute/v1alpha1"
	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
	leasingv1alpha1 "github.com/boualleiguie/macrack-operator/api/leasing/v1alpha1"
	"github.com/boualleiguie/macrack-operator/test/envtest/harness"
)

const class = "m4-sim"

var agents = map[string]*harness.Agent{}

func startAgent(serial, stateDir string) *harness.Agent {
	GinkgoHelper()
	a, err := env.StartAgent(harness.AgentOptions{Serial: serial, Class: class, StateDir: stateDir, HelperPath: helperPath,
		Heartbeat: 2 * time.Second, Log: zap.New(zap.WriteTo(GinkgoWriter), zap.UseDevMode(true)).WithName(serial)})
	Expect(err).NotTo(HaveOccurred())
	agents[a.Node] = a
	return a
}

func instance(ns, name, lease string) *computev1alpha1.MacOSInstance {
	return &computev1alpha1.MacOSInstance{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: computev1alpha1.MacOSInstanceSpec{LeaseName: lease, ImageName: "sequoia-15.5-xcode-16.4", CPU: 4,
			Memory: resource.MustParse("8Gi"), Disk: resource.MustParse("200Gi")}}
}

func get(key client.Object) *computev1alpha1.MacOSInstance {
	GinkgoHelper()
	i := &computev1alpha1.MacOSInstance{}
	Expect(admin.Get(ctx, client.ObjectKeyFromObject(key), i)).To(Succeed())
	return i
}

func phase(i *computev1alpha1.MacOSInstance) func() computev1alpha1.VMPhase {
	return func() computev1alpha1.VMPhase {
		got := &computev1alpha1.MacOSInstance{}
		if err := admin.Get(ctx, client.ObjectKeyFromObject(i), got); err != nil || got.Status.Runtime == nil {
			return ""
		}
		return got.Status.Runtime.Phase
	}
}

// lease leases a chassis for a new tenant and returns the tenant and the
// bound lease.
func lease() (*harness.Tenant, *leasingv1alpha1.MacNodeLease) {
	GinkgoHelper()
	t, err := env.NewTenant(ctx, "dev")
	Expect(err).NotTo(HaveOccurred())
	l := &leasingv1alpha1.MacNodeLease{ObjectMeta: metav1.ObjectMeta{Name: "build", Namespace: t.Namespace},
		Spec: leasingv1alpha1.MacNodeLeaseSpec{NodeClassName: class, MinimumDuration: "24h"}}
	Expect(t.Client.Create(ctx, l)).To(Succeed())
	Eventually(func() leasingv1alpha1.MacNodeLeasePhase {
		Expect(admin.Get(ctx, client.ObjectKeyFromObject(l), l)).To(Succeed())
		return l.Status.Phase
	}).Should(Equal(leasingv1alpha1.LeaseBound))
	return t, l
}

// withoutInstanceWebhook removes the instance webhook for the duration of
// f: admission is bypassed, and only the operator and the agent stand.
func withoutInstanceWebhook(f func()) {
	GinkgoHelper()
	list := &admissionregistrationv1.ValidatingWebhookConfigurationList{}
	Expect(admin.List(ctx, list)).To(Succeed())
	Expect(list.Items).To(HaveLen(1))
	saved := list.Items[0].DeepCopy()
	vwc := list.Items[0].DeepCopy()
	var kept []admissionregistrationv1.ValidatingWebhook
	for _, w := range vwc.Webhooks {
		if w.Name != "vmacosinstance.macrack.io" {
			kept = append(kept, w)
		}
	}
	Expect(kept).To(HaveLen(len(vwc.Webhooks) - 1))
	vwc.Webhooks = kept
	Expect(admin.Update(ctx, vwc)).To(Succeed())
	defer func() {
		cur := &admissionregistrationv1.ValidatingWebhookConfiguration{}
		Expect(admin.Get(ctx, client.ObjectKeyFromObject(saved), cur)).To(Succeed())
		cur.Webhooks = saved.Webhooks
		Expect(admin.Update(ctx, cur)).To(Succeed())
	}()
	time.Sleep(time.Second) // the API server reloads webhook configurations asynchronously
	f()
}

var _ = Describe("Instances on simulated minis", Ordered, func() {
	var tenant *harness.Tenant
	var bound *leasingv1alpha1.MacNodeLease
	var first, second *computev1alpha1.MacOSInstance

	BeforeAll(func() {
		_, err := harness.CreateClass(ctx, admin, class, 2)
		Expect(err).NotTo(HaveOccurred())
		Expect(env.CreateImage(ctx, admin, "sequoia-15.5-xcode-16.4", "60Gi")).To(Succeed())
		for i := 0; i < 2; i++ {
			a := startAgent(harness.NewSerial(), "")
			Eventually(func() fleetv1alpha1.MacNodePhase {
				mn := &fleetv1alpha1.MacNode{}
				if admin.Get(ctx, client.ObjectKey{Name: a.Node}, mn) != nil {
					return ""
				}
				return mn.Status.Phase
			}).Should(Equal(fleetv1alpha1.MacNodeReady))
		}
		tenant, bound = lease()
	})

	It("renews each agent's token with a TokenRequest for itself", func() {
		for _, a := range agents {
			b, err := os.ReadFile(filepath.Join(a.StateDir, "token"))
			Expect(err).NotTo(HaveOccurred())
			Expect(strings.Count(string(b), ".")).To(Equal(2), "a JWT")
			Expect(string(b)).NotTo(Equal(a.Bootstrap), "the agent kept its bootstrap token")
		}
	})

	It("runs two instances to Running, and refuses a third at admission", func() {
		first, second = instance(tenant.Namespace, "ci-1", "build"), instance(tenant.Namespace, "ci-2", "build")
		Expect(tenant.Client.Create(ctx, first)).To(Succeed())
		Expect(tenant.Client.Create(ctx, second)).To(Succeed())
		for _, i := range []*computev1alpha1.MacOSInstance{first, second} {
			Eventually(phase(i)).Should(Equal(computev1alpha1.VMRunning))
			Eventually(func() bool { return get(i).Status.Runtime.ReadyForWork }).Should(BeTrue(), "the guest agent reports through vsock")
			got := get(i)
			Expect(got.Status.NodeName).To(Equal(bound.Status.NodeName))
			Expect(got.Status.Runtime.XcodeVersions).To(ConsistOf("16.4"))
			Expect(got.Finalizers).To(ContainElement(fleetv1alpha1.DiskWipeFinalizer))
			Expect(agents[bound.Status.NodeName].HelperPID(string(got.UID))).NotTo(BeZero())
		}
		// kubectl describe node: 2 of 2 macOS VMs allocated.
		Eventually(func() int64 {
			pods := &corev1.PodList{}
			Expect(admin.List(ctx, pods, client.InNamespace(tenant.Namespace), client.MatchingLabels{fleetv1alpha1.InstancePodLabel: "true"})).To(Succeed())
			var n int64
			for _, p := range pods.Items {
				if p.Spec.NodeName == bound.Status.NodeName {
					q := p.Spec.Containers[0].Resources.Requests[fleetv1alpha1.VMResource]
					n += q.Value()
				}
			}
			return n
		}).Should(Equal(int64(2)))
		node := &corev1.Node{}
		Expect(admin.Get(ctx, client.ObjectKey{Name: bound.Status.NodeName}, node)).To(Succeed())
		Expect(node.Status.Capacity.Name(fleetv1alpha1.VMResource, resource.DecimalSI).Value()).To(Equal(int64(2)))

		err := tenant.Client.Create(ctx, instance(tenant.Namespace, "ci-3", "build"))
		Expect(err).To(HaveOccurred())
		Expect(err.Error()).To(ContainSubstring(`admission webhook "vmacosinstance.macrack.io" denied the request: instance.cap: `))
	})

	It("loses no running VM when the agent restarts", func() {
		a := agents[bound.Status.NodeName]
		pids := map[types.UID]int{}
		for _, i := range []*computev1alpha1.MacOSInstance{first, second} {
			pids[get(i).UID] = a.HelperPID(string(get(i).UID))
		}
		Expect(a.Stop()).To(Succeed())
		for uid, pid := range pids {
			Expect(syscall.Kill(pid, 0)).To(Succeed(), "the helper of %s died with its agent", uid)
		}
		restarted := startAgent(a.Serial, a.StateDir)
		Consistently(func() []computev1alpha1.VMPhase {
			return []computev1alpha1.VMPhase{phase(first)(), phase(second)()}
		}, "5s").Should(HaveEach(computev1alpha1.VMRunning))
		for uid, pid := range pids {
			Expect(restarted.HelperPID(string(uid))).To(Equal(pid), "the VM of %s was restarted, not reattached", uid)
		}
	})

	It("never starts an instance an administrator placed without a slot", func() {
		withoutInstanceWebhook(func() {
			sneaky := instance(tenant.Namespace, "sneaky", "build")
			Expect(admin.Create(ctx, sneaky)).To(Succeed())
			Eventually(func() error { // the placement controller writes its Placed condition meanwhile
				s := get(sneaky)
				s.Status.NodeName = bound.Status.NodeName
				return admin.Status().Update(ctx, s)
			}).Should(Succeed())
			sneaky = get(sneaky)
			Eventually(func() string {
				rt := get(sneaky).Status.Runtime
				if rt == nil {
					return ""
				}
				return rt.Message
			}).Should(ContainSubstring("no slot names the instance"))
			Consistently(func() int { return agents[bound.Status.NodeName].HelperPID(string(sneaky.UID)) }, "3s").Should(BeZero())
			Expect(phase(sneaky)()).To(Equal(computev1alpha1.VMPending))
			Expect(admin.Delete(ctx, sneaky)).To(Succeed())
		})
	})

	It("with admission bypassed, never places or starts more than two of three instances created at once", func() {
		other, otherLease := lease()
		withoutInstanceWebhook(func() {
			w, err := env.WatchClient().Watch(ctx, &computev1alpha1.MacOSInstanceList{}, client.InNamespace(other.Namespace))
			Expect(err).NotTo(HaveOccurred())
			var mu sync.Mutex
			placed, running := map[string]bool{}, map[string]bool{}
			maxPlaced, maxRunning := 0, 0
			done := make(chan struct{})
			go func() {
				defer close(done)
				for ev := range w.ResultChan() {
					i, ok := ev.Object.(*computev1alpha1.MacOSInstance)
					if !ok {
						continue
					}
					mu.Lock()
					placed[i.Name] = ev.Type != watch.Deleted && i.Status.NodeName != ""
					running[i.Name] = ev.Type != watch.Deleted && i.Status.Runtime != nil &&
						(i.Status.Runtime.Phase == computev1alpha1.VMRunning || i.Status.Runtime.Phase == computev1alpha1.VMStarting)
					maxPlaced, maxRunning = max(maxPlaced, count(placed)), max(maxRunning, count(running))
					mu.Unlock()
				}
			}()
			var wg sync.WaitGroup
			for _, n := range []string{"a", "b", "c"} {
				wg.Add(1)
				go func(n string) {
					defer wg.Done()
					Expect(other.Client.Create(ctx, instance(other.Namespace, n, "build"))).To(Succeed())
				}(n)
			}
			wg.Wait()
			Eventually(func() int {
				list := &computev1alpha1.MacOSInstanceList{}
				Expect(admin.List(ctx, list, client.InNamespace(other.Namespace))).To(Succeed())
				n := 0
				for _, i := range list.Items {
					if i.Status.Runtime != nil && i.Status.Runtime.Phase == computev1alpha1.VMRunning {
						n++
					}
				}
				return n
			}).Should(Equal(2))
			seenRunning := func() int {
				mu.Lock()
				defer mu.Unlock()
				return maxRunning
			}
			// The watch may deliver the last Running a moment after the list shows it.
			Eventually(seenRunning).Should(Equal(2))
			Consistently(seenRunning, "3s").Should(Equal(2))
			w.Stop()
			<-done
			Expect(maxPlaced).To(Equal(2), "a watch saw %d placed at once", maxPlaced)
			Expect(maxRunning).To(Equal(2), "a watch saw %d running at once", maxRunning)
			list := &computev1alpha1.MacOSInstanceList{}
			Expect(admin.List(ctx, list, client.InNamespace(other.Namespace))).To(Succeed())
			refused := 0
			for _, i := range list.Items {
				for _, c := range i.Status.Conditions {
					if c.Type == computev1alpha1.ConditionPlaced && c.Reason == computev1alpha1.ReasonCapacityExceeded {
						refused++
					}
				}
			}
			Expect(refused).To(Equal(1), "the third is told why it waits")
			_ = otherLease
		})
	})

	It("wipes the disk before the finalizer comes off", func() {
		a := agents[bound.Status.NodeName]
		uid := string(get(first).UID)
		Expect(a.DiskDir(uid)).To(BeADirectory(), "positive control: the disk exists while the VM runs")
		w, err := env.WatchClient().Watch(ctx, &computev1alpha1.MacOSInstanceList{}, client.InNamespace(tenant.Namespace))
		Expect(err).NotTo(HaveOccurred())
		defer w.Stop()
		Expect(tenant.Client.Delete(ctx, get(first))).To(Succeed())
		for ev := range w.ResultChan() {
			i, ok := ev.Object.(*computev1alpha1.MacOSInstance)
			if !ok || i.Name != first.Name {
				continue
			}
			if ev.Type == watch.Deleted || !hasFinalizer(i) {
				Expect(a.DiskDir(uid)).NotTo(BeAnExistingFile(), "the finalizer came off before the disk was wiped")
				_, statErr := os.Stat(a.DiskDir(uid))
				Expect(os.IsNotExist(statErr)).To(BeTrue())
				break
			}
		}
		Eventually(func() bool { return agents[bound.Status.NodeName].HelperPID(uid) == 0 }).Should(BeTrue(), "its helper is gone")
	})

	It("stops the VM of an instance that vanished, and wipes its disk once a live read confirms it is gone", func() {
		a := agents[bound.Status.NodeName]
		vanishing := instance(tenant.Namespace, "vanishing", "build")
		Expect(tenant.Client.Create(ctx, vanishing)).To(Succeed())
		Eventually(phase(vanishing)).Should(Equal(computev1alpha1.VMRunning))
		uid := string(get(vanishing).UID)
		Expect(a.DiskDir(uid)).To(BeADirectory())
		Eventually(func() []fleetv1alpha1.HostVM { return reportedInventory(a.Node).VMs }).Should(ContainElement(
			And(HaveField("UID", types.UID(uid)), HaveField("State", "Running"))), "the agent reports the VM it runs")

		By("the operator's identity, the only one instance.wipe lets do so, strips the finalizer, and the instance goes untorn")
		operator, err := env.ClientAs(harness.OperatorUser, "system:masters")
		Expect(err).NotTo(HaveOccurred())
		// The delete holds only for the object as stripped: a finalizer put
		// back in between (the agent's, seeing none) would make it an
		// ordinary teardown, not a vanishing, so strip and delete again.
		Eventually(func() error {
			v := get(vanishing)
			if err := operator.Patch(ctx, v, mergePatch(`{"metadata":{"finalizers":null}}`)); err != nil {
				return err
			}
			rv := v.ResourceVersion
			return operator.Delete(ctx, v, client.Preconditions{ResourceVersion: &rv})
		}).Should(Succeed())

		Eventually(func() int { return a.HelperPID(uid) }).Should(BeZero(), "the VM of the vanished instance is stopped")
		Eventually(func() bool { _, err := os.Stat(a.DiskDir(uid)); return os.IsNotExist(err) }).Should(BeTrue(),
			"its disk is wiped once the API server says the instance is gone")
		Eventually(func() *fleetv1alpha1.HostInventory { return reportedInventory(a.Node) }).Should(And(
			HaveField("VMs", Not(ContainElement(HaveField("UID", types.UID(uid))))),
			HaveField("Disks", Not(ContainElement(types.UID(uid))))))
		Eventually(func() []string {
			list := &eventsv1.EventList{}
			Expect(admin.List(ctx, list, client.InNamespace(metav1.NamespaceDefault))).To(Succeed())
			var reasons []string
			for _, e := range list.Items {
				if e.Regarding.Name == a.Node && strings.Contains(e.Note, uid) {
					reasons = append(reasons, e.Reason)
				}
			}
			return reasons
		}).Should(ContainElements(fleetv1alpha1.ReasonVMReaped, fleetv1alpha1.ReasonDiskReaped), "each reap is an Event about the agent's own MacNode")

		Expect(phase(second)()).To(Equal(computev1alpha1.VMRunning), "positive control: the VM that holds its slot runs on")
		Expect(a.DiskDir(string(get(second).UID))).To(BeADirectory(), "positive control: the disk of an instance that exists stays")
	})

	It("keeps a silent chassis' instance Pods when kube-controller-manager taints its Node unreachable:NoExecute", func() {
		a := agents[bound.Status.NodeName]
		placeholder := &corev1.Pod{}
		Eventually(func() error {
			return admin.Get(ctx, client.ObjectKeyFromObject(second), placeholder)
		}).Should(Succeed(), "the running instance has its Pod")
		Expect(placeholder.Spec.NodeName).To(Equal(a.Node))
		// Positive control: a Pod on the same Node with no tolerations of its
		// own, so only the API server's default ones (1s in this suite).
		plain := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "plain", Namespace: tenant.Namespace},
			Spec: corev1.PodSpec{NodeName: a.Node, Containers: []corev1.Container{{Name: "c", Image: fleetv1alpha1.InstancePodImage}}}}
		Expect(admin.Create(ctx, plain)).To(Succeed())
		Expect(plain.Spec.Tolerations).To(ContainElement(And(HaveField("Key", corev1.TaintNodeUnreachable),
			HaveField("TolerationSeconds", HaveValue(BeEquivalentTo(1))))), "the API server's default tolerations")

		Expect(a.Stop()).To(Succeed())
		silentSince := time.Now()
		unreachable := And(HaveField("Key", corev1.TaintNodeUnreachable), HaveField("Effect", corev1.TaintEffectNoExecute))
		nodeTaints := func() []corev1.Taint {
			n := &corev1.Node{}
			Expect(admin.Get(ctx, client.ObjectKey{Name: a.Node}, n)).To(Succeed())
			return n.Spec.Taints
		}
		Eventually(nodeTaints, "40s").Should(ContainElement(unreachable), "kube-controller-manager taints the silent Node")
		GinkgoWriter.Printf("unreachable:NoExecute %s after the agent stopped\n", time.Since(silentSince).Round(100*time.Millisecond))
		// Deleted: with no kubelet to confirm, the Pod stays, being deleted.
		Eventually(func() *metav1.Time {
			p := &corev1.Pod{}
			if err := admin.Get(ctx, client.ObjectKeyFromObject(plain), p); apierrors.IsNotFound(err) {
				return &metav1.Time{}
			}
			return p.DeletionTimestamp
		}, "20s").ShouldNot(BeNil(), "the taint-eviction controller deletes a Pod that does not tolerate the taint")
		Expect(client.IgnoreNotFound(admin.Delete(ctx, plain, client.GracePeriodSeconds(0)))).To(Succeed())
		Consistently(func(g Gomega) {
			p := &corev1.Pod{}
			g.Expect(admin.Get(ctx, client.ObjectKeyFromObject(placeholder), p)).To(Succeed())
			g.Expect(p.UID).To(Equal(placeholder.UID), "the instance's Pod was deleted and made again")
			g.Expect(p.DeletionTimestamp).To(BeNil(), "the instance's Pod is being deleted")
			g.Expect(nodeTaints()).To(ContainElement(unreachable))
		}, "3s", "250ms").Should(Succeed())

		// The agent comes back: its Node is Ready again and the taint goes.
		startAgent(a.Serial, a.StateDir)
		Eventually(nodeTaints, "30s").ShouldNot(ContainElement(HaveField("Effect", corev1.TaintEffectNoExecute)))
		Expect(phase(second)()).To(Equal(computev1alpha1.VMRunning))
	})

	It("marks a silent agent's chassis and Node NotReady", func() {
		var silent *harness.Agent
		for name, a := range agents {
			if name != bound.Status.NodeName {
				silent = a
			}
		}
		Expect(silent).NotTo(BeNil())
		Expect(silent.Stop()).To(Succeed())
		mn := &fleetv1alpha1.MacNode{}
		Expect(admin.Get(ctx, client.ObjectKey{Name: silent.Node}, mn)).To(Succeed())
		// The fake clock stands at the suite's start, behind the real one the
		// agents heartbeat on: move it a minute past the real now, so past
		// the silent agent's last heartbeat and the 20s grace.
		op.Step(time.Since(op.Clock.Now())+time.Minute, mn)
		Eventually(func() corev1.ConditionStatus {
			n := &corev1.Node{}
			Expect(admin.Get(ctx, client.ObjectKey{Name: silent.Node}, n)).To(Succeed())
			for _, c := range n.Status.Conditions {
				if c.Type == corev1.NodeReady {
					return c.Status
				}
			}
			return ""
		}).Should(Equal(corev1.ConditionFalse))
		// The Node is marked first; the MacNode's status write may lose a race
		// with another controller's and come on the retry.
		Eventually(func() []metav1.Condition {
			Expect(admin.Get(ctx, client.ObjectKey{Name: silent.Node}, mn)).To(Succeed())
			return mn.Status.Conditions
		}).Should(ContainElement(And(HaveField("Type", fleetv1alpha1.ConditionAgentReady), HaveField("Status", metav1.ConditionFalse))))
	})

	// Last: it moves the operator's clock a day on.
	It("keeps a deleted namespace Terminating while its lease is Held, until earliestReleaseAt", func() {
		ns := &corev1.Namespace{}
		Expect(admin.Get(ctx, client.ObjectKey{Name: tenant.Namespace}, ns)).To(Succeed())
		Expect(admin.Get(ctx, client.ObjectKey{Namespace: ns.Name, Name: "default"}, &corev1.ServiceAccount{})).To(Succeed(),
			"kube-controller-manager gave the tenant's namespace its default ServiceAccount")
		Expect(admin.Delete(ctx, ns)).To(Succeed())
		// The namespace controller deletes the instances at once (the agent
		// wipes their disks) and the lease, which the operator holds.
		Eventually(func() []computev1alpha1.MacOSInstance {
			list := &computev1alpha1.MacOSInstanceList{}
			Expect(admin.List(ctx, list, client.InNamespace(tenant.Namespace))).To(Succeed())
			return list.Items
		}).Should(BeEmpty())
		held := &leasingv1alpha1.MacNodeLease{}
		Eventually(func() leasingv1alpha1.MacNodeLeasePhase {
			Expect(admin.Get(ctx, client.ObjectKeyFromObject(bound), held)).To(Succeed())
			return held.Status.Phase
		}).Should(Equal(leasingv1alpha1.LeaseHeld))
		Expect(held.DeletionTimestamp).NotTo(BeNil())
		Eventually(func() []corev1.NamespaceCondition {
			Expect(admin.Get(ctx, client.ObjectKey{Name: tenant.Namespace}, ns)).To(Succeed())
			return ns.Status.Conditions
		}).Should(ContainElement(And(HaveField("Type", corev1.NamespaceFinalizersRemaining), HaveField("Status", corev1.ConditionTrue),
			HaveField("Message", ContainSubstring(fleetv1alpha1.LeaseFinalizer)))))
		Consistently(func() corev1.NamespacePhase {
			Expect(admin.Get(ctx, client.ObjectKey{Name: tenant.Namespace}, ns)).To(Succeed())
			return ns.Status.Phase
		}, "2s").Should(Equal(corev1.NamespaceTerminating), "the namespace controller retries each second")

		op.Step(25*time.Hour, held)
		Eventually(func() bool {
			return apierrors.IsNotFound(admin.Get(ctx, client.ObjectKey{Name: tenant.Namespace}, &corev1.Namespace{}))
		}).Should(BeTrue(), "the namespace goes once the lease is released")
	})
})

func reportedInventory(node string) *fleetv1alpha1.HostInventory {
	GinkgoHelper()
	mn := &fleetv1alpha1.MacNode{}
	Expect(admin.Get(ctx, client.ObjectKey{Name: node}, mn)).To(Succeed())
	if mn.Status.Reported == nil || mn.Status.Reported.Inventory == nil {
		return &fleetv1alpha1.HostInventory{}
	}
	return mn.Status.Reported.Inventory
}

func mergePatch(p string) client.Patch { return client.RawPatch(types.MergePatchType, []byte(p)) }

func count(m map[string]bool) int {
	n := 0
	for _, v := range m {
		if v {
			n++
		}
	}
	return n
}

func hasFinalizer(i *computev1alpha1.MacOSInstance) bool {
	for _, f := range i.Finalizers {
		if f == fleetv1alpha1.DiskWipeFinalizer {
			return true
		}
	}
	return false
}
