package instances

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	computev1alpha1 "github.com/boualleiguie/macrack-operator/api/compute/v1alpha1"
	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
	leasingv1alpha1 "github.com/boualleiguie/macrack-operator/api/leasing/v1alpha1"
	"github.com/boualleiguie/macrack-operator/internal/nodeready"
	"github.com/boualleiguie/macrack-operator/internal/reconcile/pod"
	"github.com/boualleiguie/macrack-operator/test/envtest/harness"
)

// Each placed instance is a Pod in its tenant's namespace, which the
// operator makes and mirrors, and which no one else's write changes the VM
// through. The container has its own class, image and chassis, and runs
// first (SpecPriority), for the reason the quantities container does: the
// main container moves the operator's fake clock a day on.
var _ = Describe("Instances' Pods", Ordered, SpecPriority(1), func() {
	const (
		pClass = "m4-sim-pods"
		pImage = "sequoia-15.5-xcode-16.4-pods"
		pLease = "pods"
	)
	var (
		tenant        *harness.Tenant
		agent         *harness.Agent
		ci1, ci2      *computev1alpha1.MacOSInstance
		podOf         func(i *computev1alpha1.MacOSInstance) *corev1.Pod
		readyOf       func(p *corev1.Pod) corev1.ConditionStatus
		instanceReady func(i *computev1alpha1.MacOSInstance) func() bool
	)
	podOf = func(i *computev1alpha1.MacOSInstance) *corev1.Pod {
		p := &corev1.Pod{}
		if err := admin.Get(ctx, client.ObjectKeyFromObject(i), p); err != nil {
			return nil
		}
		return p
	}
	readyOf = func(p *corev1.Pod) corev1.ConditionStatus {
		if p == nil {
			return ""
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodReady {
				return c.Status
			}
		}
		return ""
	}
	instanceReady = func(i *computev1alpha1.MacOSInstance) func() bool {
		return func() bool {
			rt := get(i).Status.Runtime
			return rt != nil && rt.Phase == computev1alpha1.VMRunning && rt.ReadyForWork
		}
	}

	BeforeAll(func() {
		_, err := harness.CreateClass(ctx, admin, pClass, 2)
		Expect(err).NotTo(HaveOccurred())
		Expect(env.CreateImage(ctx, admin, pImage, "60Gi")).To(Succeed())
		// Not in the suite's agents: the main container picks its silent
		// chassis among those.
		agent, err = env.StartAgent(harness.AgentOptions{Serial: harness.NewSerial(), Class: pClass, HelperPath: helperPath,
			Heartbeat: 2 * time.Second, Log: zap.New(zap.WriteTo(GinkgoWriter), zap.UseDevMode(true)).WithName("pods")})
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(func() {
			_ = agent.Stop()
			agent.KillHelpers()
			_ = os.RemoveAll(agent.StateDir)
		})
		Eventually(func() fleetv1alpha1.MacNodePhase {
			mn := &fleetv1alpha1.MacNode{}
			if admin.Get(ctx, client.ObjectKey{Name: agent.Node}, mn) != nil {
				return ""
			}
			return mn.Status.Phase
		}).Should(Equal(fleetv1alpha1.MacNodeReady))
		tenant, err = env.NewTenant(ctx, "pods")
		Expect(err).NotTo(HaveOccurred())
		// The namespace enforces the restricted Pod Security level.
		ns := &corev1.Namespace{}
		Expect(admin.Get(ctx, client.ObjectKey{Name: tenant.Namespace}, ns)).To(Succeed())
		ns.Labels["pod-security.kubernetes.io/enforce"] = "restricted"
		Expect(admin.Update(ctx, ns)).To(Succeed())
		l := &leasingv1alpha1.MacNodeLease{ObjectMeta: metav1.ObjectMeta{Name: pLease, Namespace: tenant.Namespace},
			Spec: leasingv1alpha1.MacNodeLeaseSpec{NodeClassName: pClass, MinimumDuration: "24h"}}
		Expect(tenant.Client.Create(ctx, l)).To(Succeed())
		Eventually(func() leasingv1alpha1.MacNodeLeasePhase {
			Expect(admin.Get(ctx, client.ObjectKeyFromObject(l), l)).To(Succeed())
			return l.Status.Phase
		}).Should(Equal(leasingv1alpha1.LeaseBound))
		Expect(l.Status.NodeName).To(Equal(agent.Node))

		ci1, ci2 = instance(tenant.Namespace, "ci-1", pLease), instance(tenant.Namespace, "ci-2", pLease)
		ci1.Spec.ImageName, ci2.Spec.ImageName = pImage, pImage
		Expect(tenant.Client.Create(ctx, ci1)).To(Succeed())
		Expect(tenant.Client.Create(ctx, ci2)).To(Succeed())
		for _, i := range []*computev1alpha1.MacOSInstance{ci1, ci2} {
			Eventually(instanceReady(i), "60s").Should(BeTrue(), "%s never ran ready for work; the agent's log says why", i.Name)
		}
	})

	It("shows each placed instance as a Pod in its namespace: controlled by it, on its chassis' Node, mirrored", func() {
		for _, i := range []*computev1alpha1.MacOSInstance{ci1, ci2} {
			inst := get(i)
			Eventually(func() corev1.ConditionStatus { return readyOf(podOf(i)) }).Should(Equal(corev1.ConditionTrue),
				"the Pod of %s is Ready: the guest is ready for work and the chassis heartbeats", i.Name)
			p := podOf(i)
			ref := metav1.GetControllerOf(p)
			Expect(ref).NotTo(BeNil())
			Expect(ref.UID).To(Equal(inst.UID))
			Expect(ref.Kind).To(Equal("MacOSInstance"))
			Expect(p.Spec.NodeName).To(Equal(agent.Node))
			Expect(p.Spec.Containers).To(HaveLen(1))
			Expect(p.Spec.Containers[0].Name).To(Equal(fleetv1alpha1.InstanceContainer))
			Expect(p.Spec.Containers[0].Resources.Requests).To(HaveKeyWithValue(fleetv1alpha1.VMResource, resource.MustParse("1")))
			Expect(p.Status.Phase).To(Equal(corev1.PodRunning))
			Expect(p.Status.PodIP).To(BeEmpty(), "NAT addresses repeat on every chassis")
			Expect(p.Status.ContainerStatuses).To(ConsistOf(And(HaveField("Name", fleetv1alpha1.InstanceContainer),
				HaveField("Ready", true), HaveField("State.Running", Not(BeNil())))))
			Expect(meta.IsStatusConditionTrue(inst.Status.Conditions, computev1alpha1.ConditionPod)).To(BeTrue())
		}
		By("no Pod stands for an instance in the operator's namespace any more")
		pods := &corev1.PodList{}
		Expect(admin.List(ctx, pods, client.InNamespace(harness.OperatorNamespace))).To(Succeed())
		Expect(pods.Items).To(BeEmpty())

		By("docs/tenant.md's `kubectl get pods -n my-team -o wide`, run as the tenant, shows the VMs")
		dir := GinkgoT().TempDir()
		kubeconfig, err := env.AdminKubeconfig(dir)
		Expect(err).NotTo(HaveOccurred())
		kubectl := exec.Command(filepath.Join(harness.RepoRoot(), "bin", "k8s", "kubectl"), "--kubeconfig", kubeconfig, "--as", tenant.User,
			"get", "pods", "-n", tenant.Namespace, "-o", "wide")
		out, err := kubectl.CombinedOutput()
		Expect(err).NotTo(HaveOccurred(), "%s", out)
		Expect(string(out)).To(MatchRegexp(`(?m)^ci-1\s+1/1\s+Running\s+0\s+\S+\s+<none>\s+` + agent.Node + `\s`))
		Expect(string(out)).To(MatchRegexp(`(?m)^ci-2\s+1/1\s+Running\s`))

		By("the tenant's edit role reads the Pods, and creates or changes none")
		list := &corev1.PodList{}
		Expect(tenant.Client.List(ctx, list, client.InNamespace(tenant.Namespace))).To(Succeed())
		Expect(list.Items).To(HaveLen(2))
		own := podOf(ci1)
		own.Labels["x"] = "y"
		harness.ExpectRBACDenial(tenant.Client.Update(ctx, own), "update", "pods")
		harness.ExpectRBACDenial(tenant.Client.Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "mine", Namespace: tenant.Namespace},
			Spec: corev1.PodSpec{NodeName: agent.Node, Containers: []corev1.Container{{Name: "c", Image: "x"}}}}), "create", "pods")
	})

	It("passes the restricted Pod Security level, which refuses a Pod that does not meet it", func() {
		// The instances' Pods above were admitted in this namespace, which
		// enforces restricted. The control: the same namespace refuses a
		// plain Pod.
		err := admin.Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "plain", Namespace: tenant.Namespace},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: fleetv1alpha1.InstancePodImage}}}})
		Expect(err).To(HaveOccurred())
		Expect(apierrors.IsForbidden(err)).To(BeTrue(), "%v", err)
		Expect(err.Error()).To(ContainSubstring(`violates PodSecurity "restricted:latest"`))
	})

	It("the agent reads and writes no Pod", func() {
		sa, err := env.ClientAsServiceAccount(harness.AgentsNamespace, fleetv1alpha1.AgentServiceAccountPrefix+agent.Node)
		Expect(err).NotTo(HaveOccurred())
		// Positive control: the identity works, on its own MacNode.
		Expect(sa.Get(ctx, client.ObjectKey{Name: agent.Node}, &fleetv1alpha1.MacNode{})).To(Succeed())
		p := podOf(ci1)
		harness.ExpectRBACDenial(sa.Get(ctx, client.ObjectKeyFromObject(p), &corev1.Pod{}), "get", "pods")
		harness.ExpectRBACDenial(sa.Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "agent-pod", Namespace: tenant.Namespace},
			Spec: corev1.PodSpec{NodeName: agent.Node, Containers: []corev1.Container{{Name: "c", Image: "x"}}}}), "create", "pods")
		harness.ExpectRBACDenial(sa.Status().Patch(ctx, p, client.RawPatch(types.MergePatchType, []byte(`{"status":{"phase":"Failed"}}`))), "patch", "pods/status")
		harness.ExpectRBACDenial(sa.Delete(ctx, p), "delete", "pods")
	})

	It("makes a deleted Pod again and leaves the VM running, whether it went at once or gracefully", func() {
		uid := string(get(ci1).UID)
		pid := agent.HelperPID(uid)
		Expect(pid).NotTo(BeZero())
		for _, grace := range []*int64{nil, ptr.To(int64(30))} {
			before := podOf(ci1)
			opts := []client.DeleteOption{}
			if grace != nil {
				opts = append(opts, client.GracePeriodSeconds(*grace))
			}
			Expect(admin.Delete(ctx, before, opts...)).To(Succeed())
			Eventually(func() types.UID {
				p := podOf(ci1)
				if p == nil || p.DeletionTimestamp != nil {
					return before.UID
				}
				return p.UID
			}).ShouldNot(Equal(before.UID), "the Pod comes back (grace %v)", grace)
			Eventually(func() corev1.ConditionStatus { return readyOf(podOf(ci1)) }).Should(Equal(corev1.ConditionTrue))
			Expect(agent.HelperPID(uid)).To(Equal(pid), "the VM was restarted")
			Expect(phase(ci1)()).To(Equal(computev1alpha1.VMRunning))
		}
	})

	It("makes a relabelled Pod again, and leaves the VM running", func() {
		uid := string(get(ci1).UID)
		pid := agent.HelperPID(uid)
		for _, labels := range []string{
			// Out of the operator's cache.
			`{"metadata":{"labels":{"` + fleetv1alpha1.InstancePodLabel + `":null}}}`,
			// Naming another instance.
			`{"metadata":{"labels":{"` + fleetv1alpha1.InstanceUIDLabel + `":"` + string(get(ci2).UID) + `"}}}`,
		} {
			before := podOf(ci1)
			Expect(admin.Patch(ctx, before, mergePatch(labels))).To(Succeed())
			Eventually(func() types.UID {
				if p := podOf(ci1); p != nil && p.DeletionTimestamp == nil {
					return p.UID
				}
				return before.UID
			}).ShouldNot(Equal(before.UID), "the Pod is made again after %s", labels)
			// Its status is a write of its own, after the create: the next
			// spec counts the real Pods' writes from a quiet start.
			Eventually(func() corev1.ConditionStatus { return readyOf(podOf(ci1)) }).Should(Equal(corev1.ConditionTrue))
			Expect(podOf(ci1).Labels).To(And(HaveKeyWithValue(fleetv1alpha1.InstancePodLabel, "true"), HaveKeyWithValue(fleetv1alpha1.InstanceUIDLabel, uid)))
			Expect(agent.HelperPID(uid)).To(Equal(pid), "the VM was restarted")
		}
		Expect(phase(ci1)()).To(Equal(computev1alpha1.VMRunning))
		Expect(phase(ci2)()).To(Equal(computev1alpha1.VMRunning))
	})

	It("changes nothing for a Pod that forges another instance's UID in its labels, owner reference and name", func() {
		two := get(ci2)
		real1, real2 := podOf(ci1), podOf(ci2)
		forge := func(name string, refs []metav1.OwnerReference) *corev1.Pod {
			GinkgoHelper()
			p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: tenant.Namespace,
				Labels:          map[string]string{fleetv1alpha1.InstancePodLabel: "true", fleetv1alpha1.InstanceUIDLabel: string(two.UID)},
				OwnerReferences: refs},
				Spec: *real2.Spec.DeepCopy()}
			Expect(admin.Create(ctx, p)).To(Succeed())
			DeferCleanup(func() {
				Expect(client.IgnoreNotFound(admin.Delete(ctx, p, client.GracePeriodSeconds(0)))).To(Succeed())
			})
			return p
		}
		// ci-2's UID in the labels and the name, and no owner.
		byLabels := forge("vm-"+string(two.UID), nil)
		// ci-1's name with ci-2's UID in the controller reference: an owner
		// the API server cannot check. kube-controller-manager's garbage
		// collector finds no such owner and may delete it: its doing, not
		// the operator's.
		byOwner := forge("forged-owner", []metav1.OwnerReference{{APIVersion: computev1alpha1.GroupVersion.String(), Kind: "MacOSInstance",
			Name: ci1.Name, UID: two.UID, Controller: ptr.To(true)}})
		Consistently(func(g Gomega) {
			f := &corev1.Pod{}
			g.Expect(admin.Get(ctx, client.ObjectKeyFromObject(byLabels), f)).To(Succeed(), "the Pod forged by its labels was deleted")
			g.Expect(f.ResourceVersion).To(Equal(byLabels.ResourceVersion), "the Pod forged by its labels was written")
			// The collector's delete of a Pod bound to a Node is graceful:
			// it marks the Pod deleted, which is a write too, and its own.
			if err := admin.Get(ctx, client.ObjectKeyFromObject(byOwner), f); !apierrors.IsNotFound(err) {
				g.Expect(err).NotTo(HaveOccurred())
				if f.DeletionTimestamp == nil {
					g.Expect(f.ResourceVersion).To(Equal(byOwner.ResourceVersion), "the Pod forged by its owner was written")
				}
			}
			for _, real := range []*corev1.Pod{real1, real2} {
				p := &corev1.Pod{}
				g.Expect(admin.Get(ctx, client.ObjectKeyFromObject(real), p)).To(Succeed())
				g.Expect(p.UID).To(Equal(real.UID), "the real Pod %s was made again", real.Name)
				g.Expect(p.ResourceVersion).To(Equal(real.ResourceVersion), "the real Pod %s was written", real.Name)
			}
		}, "4s", "250ms").Should(Succeed())
		Expect(phase(ci1)()).To(Equal(computev1alpha1.VMRunning))
		Expect(phase(ci2)()).To(Equal(computev1alpha1.VMRunning))
		Expect(meta.IsStatusConditionTrue(get(ci1).Status.Conditions, computev1alpha1.ConditionPod)).To(BeTrue())
		Expect(meta.IsStatusConditionTrue(get(ci2).Status.Conditions, computev1alpha1.ConditionPod)).To(BeTrue())
	})

	It("says on the instance that a ResourceQuota refused its Pod, and leaves the VM running", func() {
		uid := string(get(ci2).UID)
		pid := agent.HelperPID(uid)
		// No quota controller runs here: the quota's status is written as it
		// would write it.
		q := &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: "no-pods", Namespace: tenant.Namespace},
			Spec: corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{corev1.ResourcePods: resource.MustParse("0")}}}
		Expect(admin.Create(ctx, q)).To(Succeed())
		DeferCleanup(func() { Expect(client.IgnoreNotFound(admin.Delete(ctx, q))).To(Succeed()) })
		q.Status = corev1.ResourceQuotaStatus{Hard: q.Spec.Hard, Used: corev1.ResourceList{corev1.ResourcePods: resource.MustParse("0")}}
		Expect(admin.Status().Update(ctx, q)).To(Succeed())
		Expect(admin.Delete(ctx, podOf(ci2))).To(Succeed())
		Eventually(func() *metav1.Condition {
			return meta.FindStatusCondition(get(ci2).Status.Conditions, computev1alpha1.ConditionPod)
		}).Should(And(HaveField("Status", metav1.ConditionFalse), HaveField("Reason", computev1alpha1.ReasonPodRefused),
			HaveField("Message", ContainSubstring("exceeded quota: no-pods"))))
		Expect(podOf(ci2)).To(BeNil())
		Consistently(func() int { return agent.HelperPID(uid) }, "2s").Should(Equal(pid), "the VM was touched")
		Expect(phase(ci2)()).To(Equal(computev1alpha1.VMRunning))
		Expect(meta.IsStatusConditionTrue(get(ci1).Status.Conditions, computev1alpha1.ConditionPod)).To(BeTrue(),
			"positive control: the instance whose Pod exists says so")
		// The quota lifts; the Pod comes on the retry.
		Expect(admin.Delete(ctx, q)).To(Succeed())
		Eventually(func() *corev1.Pod { return podOf(ci2) }, pod.RefusedRetry+30*time.Second).ShouldNot(BeNil())
	})

	It("agrees with kube-controller-manager on Ready when the chassis falls silent: no ping-pong", func() {
		Eventually(func() corev1.ConditionStatus { return readyOf(podOf(ci1)) }).Should(Equal(corev1.ConditionTrue))
		w, err := env.WatchClient().Watch(ctx, &corev1.PodList{}, client.InNamespace(tenant.Namespace))
		Expect(err).NotTo(HaveOccurred())
		var mu sync.Mutex
		var seen []string // ci-1's Pod's Ready, each time a write changed it
		writes := 0
		done := make(chan struct{})
		go func() {
			defer close(done)
			last := ""
			for ev := range w.ResultChan() {
				p, ok := ev.Object.(*corev1.Pod)
				if !ok || p.Name != ci1.Name || ev.Type != watch.Modified {
					continue
				}
				mu.Lock()
				writes++
				if r := string(readyOf(p)); r != last {
					seen = append(seen, r)
					last = r
				}
				mu.Unlock()
			}
		}()
		// And the Node's Ready condition, each time a write changed it: the
		// operator's clock, frozen at the suite's start, still calls the
		// silent agent's heartbeat fresh, so the operator would write True
		// over kube-controller-manager's Unknown at each of its passes if
		// it did not wait for a renewal after it.
		nodeName := agent.Node
		readyKey := func(n *corev1.Node) string {
			r := nodeready.Find(n.Status.Conditions)
			if r == nil {
				return ""
			}
			return fmt.Sprintf("%s/%s/%s/%s", r.Status, r.Reason, r.LastTransitionTime.UTC(), r.LastHeartbeatTime.UTC())
		}
		n := &corev1.Node{}
		Expect(admin.Get(ctx, client.ObjectKey{Name: nodeName}, n)).To(Succeed())
		Expect(nodeready.IsTrue(n.Status.Conditions)).To(BeTrue())
		nw, err := env.WatchClient().Watch(ctx, &corev1.NodeList{})
		Expect(err).NotTo(HaveOccurred())
		var nodeSeen []string // the Node's Ready, status/reason, each time a write changed it
		nodeWrites := 0       // writes that changed the Node's Ready condition
		nodeDone := make(chan struct{})
		go func() {
			defer close(nodeDone)
			last := readyKey(n)
			for ev := range nw.ResultChan() {
				n, ok := ev.Object.(*corev1.Node)
				if !ok || n.Name != nodeName {
					continue
				}
				r := nodeready.Find(n.Status.Conditions)
				if r == nil {
					continue
				}
				mu.Lock()
				if key := readyKey(n); key != last {
					nodeWrites++
					nodeSeen = append(nodeSeen, string(r.Status)+"/"+r.Reason)
					last = key
				}
				mu.Unlock()
			}
		}()
		Expect(agent.Stop()).To(Succeed())
		nodeReady := func() corev1.ConditionStatus {
			n := &corev1.Node{}
			Expect(admin.Get(ctx, client.ObjectKey{Name: agent.Node}, n)).To(Succeed())
			for _, c := range n.Status.Conditions {
				if c.Type == corev1.NodeReady {
					return c.Status
				}
			}
			return ""
		}
		Eventually(nodeReady, "40s").Should(Equal(corev1.ConditionUnknown), "kube-controller-manager marks the silent Node")
		Eventually(func() corev1.ConditionStatus { return readyOf(podOf(ci1)) }).Should(Equal(corev1.ConditionFalse))
		// Both writers agree: Ready stays False, and the writes stop.
		Consistently(func() corev1.ConditionStatus { return readyOf(podOf(ci1)) }, "10s", "100ms").Should(Equal(corev1.ConditionFalse))
		mu.Lock()
		settled, nodeSettled := writes, nodeWrites
		mu.Unlock()
		Consistently(func(g Gomega) {
			mu.Lock()
			defer mu.Unlock()
			g.Expect(writes).To(Equal(settled), "the Pod is still being written")
			g.Expect(nodeWrites).To(Equal(nodeSettled), "the Node's Ready is still being written: %v", nodeSeen)
		}, "5s").Should(Succeed())
		mu.Lock()
		Expect(nodeSeen).NotTo(ContainElement(HavePrefix(string(corev1.ConditionTrue))), "the silent Node was made Ready")
		Expect(nodeSeen).To(HaveLen(nodeSettled))
		Expect(nodeSettled).To(BeNumerically(">=", 1), "kube-controller-manager's Unknown was not seen")
		Expect(nodeSettled).To(BeNumerically("<=", 2), "%v", nodeSeen)
		silentWrites := nodeSettled
		mu.Unlock()

		// The agent comes back: the Node is Ready again, and so is the Pod.
		agent, err = env.StartAgent(harness.AgentOptions{Serial: agent.Serial, Class: pClass, StateDir: agent.StateDir, HelperPath: helperPath,
			Heartbeat: 2 * time.Second, Log: zap.New(zap.WriteTo(GinkgoWriter), zap.UseDevMode(true)).WithName("pods")})
		Expect(err).NotTo(HaveOccurred())
		Eventually(func() corev1.ConditionStatus { return readyOf(podOf(ci1)) }, "30s").Should(Equal(corev1.ConditionTrue))
		// The positive control: a renewal after kube-controller-manager's
		// Unknown, which stood until then, makes the Node Ready again: the
		// operator's True.
		nodeSeenSoFar := func() []string { mu.Lock(); defer mu.Unlock(); return slices.Clone(nodeSeen) }
		Eventually(nodeSeenSoFar).Should(HaveLen(silentWrites + 1))
		Expect(nodeSeenSoFar()[silentWrites-1]).To(HavePrefix(string(corev1.ConditionUnknown)+"/"), "%v", nodeSeenSoFar())
		Expect(nodeSeenSoFar()[silentWrites]).To(Equal(string(corev1.ConditionTrue) + "/" + fleetv1alpha1.ReasonHeartbeatCurrent))
		seenSoFar := func() []string { mu.Lock(); defer mu.Unlock(); return slices.Clone(seen) }
		// The watch may deliver the last write a moment after the read.
		Eventually(seenSoFar).Should(HaveLen(2))
		Consistently(seenSoFar, "3s").Should(Equal([]string{"False", "True"}), "Ready flipped back and forth")
		Expect(nodeSeenSoFar()).To(HaveLen(silentWrites+1), "the Node's Ready flipped again")
		w.Stop()
		<-done
		nw.Stop()
		<-nodeDone
		GinkgoWriter.Printf("ci-1's Pod: Ready %s over %d writes\n", strings.Join(seen, " -> "), writes)
		GinkgoWriter.Printf("Node %s: Ready %s, %d writes of it while silent and 5s settled\n", nodeName, strings.Join(nodeSeen, " -> "), silentWrites)
		Expect(writes).To(BeNumerically("<=", 6))
	})
})
