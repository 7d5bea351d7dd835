package operator

import (
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
	leasingv1alpha1 "github.com/boualleiguie/macrack-operator/api/leasing/v1alpha1"
	workloadsv1alpha1 "github.com/boualleiguie/macrack-operator/api/workloads/v1alpha1"
)

// The cache keeps an object's every field but managedFields.
func TestTheCacheDropsManagedFieldsAndNothingElse(t *testing.T) {
	mn := &fleetv1alpha1.MacNode{ObjectMeta: metav1.ObjectMeta{Name: "c02", ResourceVersion: "7",
		ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "macrack-agent", Operation: metav1.ManagedFieldsOperationUpdate}}},
		Spec:   fleetv1alpha1.MacNodeSpec{Serial: "C02"},
		Status: fleetv1alpha1.MacNodeStatus{Phase: fleetv1alpha1.MacNodeReady}}
	out, err := CacheOptions().DefaultTransform(mn.DeepCopy())
	if err != nil {
		t.Fatal(err)
	}
	got := out.(*fleetv1alpha1.MacNode)
	if len(got.ManagedFields) != 0 {
		t.Errorf("managedFields %v kept", got.ManagedFields)
	}
	if got.Name != mn.Name || got.ResourceVersion != mn.ResourceVersion || got.Spec.Serial != mn.Spec.Serial || got.Status.Phase != mn.Status.Phase {
		t.Errorf("the cached object %+v lost more than its managedFields", got)
	}
}

// kubectl's last-applied copy goes from the cache with managedFields; the
// other annotations stay, and a runner, which the operator updates whole,
// keeps the copy, so that its update does not erase it.
func TestTheCacheDropsKubectlsLastAppliedCopy(t *testing.T) {
	annotated := metav1.ObjectMeta{Name: "l", Namespace: "tenant-a",
		Annotations: map[string]string{lastApplied: `{"spec":{}}`, "team": "ios"}}
	out, err := CacheOptions().DefaultTransform(&leasingv1alpha1.MacNodeLease{ObjectMeta: *annotated.DeepCopy()})
	if err != nil {
		t.Fatal(err)
	}
	if got := out.(*leasingv1alpha1.MacNodeLease).Annotations; len(got) != 1 || got["team"] != "ios" {
		t.Errorf("the cached lease's annotations are %v, want only team=ios", got)
	}
	onlyApplied := metav1.ObjectMeta{Name: "c", Annotations: map[string]string{lastApplied: `{}`}}
	out, err = CacheOptions().DefaultTransform(&fleetv1alpha1.MacNodeClass{ObjectMeta: onlyApplied})
	if err != nil {
		t.Fatal(err)
	}
	if got := out.(*fleetv1alpha1.MacNodeClass).Annotations; got != nil {
		t.Errorf("the cached class's annotations are %v, want none", got)
	}
	// Positive control: the kind updated whole keeps it.
	out, err = CacheOptions().DefaultTransform(&workloadsv1alpha1.GitLabRunner{ObjectMeta: *annotated.DeepCopy()})
	if err != nil {
		t.Fatal(err)
	}
	if got := out.(*workloadsv1alpha1.GitLabRunner).Annotations; got[lastApplied] == "" || got["team"] != "ios" {
		t.Errorf("the cached runner's annotations are %v, want both kept", got)
	}
}

// Of an instance's Pod the cache keeps what the Pod controller reads: its
// metadata, Node and status; not the spec's containers and tolerations.
func TestTheCacheKeepsOfAPodWhatThePodControllerReads(t *testing.T) {
	started := metav1.NewTime(time.Date(2026, 12, 7, 0, 0, 0, 0, time.UTC))
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "i1", Namespace: "tenant-a", UID: "p1", ResourceVersion: "9",
			Labels:          map[string]string{fleetv1alpha1.InstancePodLabel: "true"},
			OwnerReferences: []metav1.OwnerReference{{Kind: "MacOSInstance", Name: "i1", UID: "i1"}},
			ManagedFields:   []metav1.ManagedFieldsEntry{{Manager: "macrack-pod"}}},
		Spec: corev1.PodSpec{NodeName: "c02f00000001", Containers: []corev1.Container{{Name: "vm", Image: "macrack.io/vm"}},
			Tolerations: []corev1.Toleration{{Key: corev1.TaintNodeNotReady, Operator: corev1.TolerationOpExists}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, StartTime: &started, QOSClass: corev1.PodQOSBestEffort,
			Conditions:        []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}},
			ContainerStatuses: []corev1.ContainerStatus{{Name: "vm", Ready: true}}},
	}
	want := pod.DeepCopy()
	out, err := transformOf(t, isPod)(pod)
	if err != nil {
		t.Fatal(err)
	}
	got := out.(*corev1.Pod)
	if len(got.Spec.Containers) != 0 || len(got.Spec.Tolerations) != 0 || len(got.ManagedFields) != 0 {
		t.Errorf("the cached Pod kept its containers %v, tolerations %v or managedFields", got.Spec.Containers, got.Spec.Tolerations)
	}
	if got.Spec.NodeName != want.Spec.NodeName || !equality.Semantic.DeepEqual(got.Status, want.Status) ||
		!equality.Semantic.DeepEqual(got.Labels, want.Labels) || !equality.Semantic.DeepEqual(got.OwnerReferences, want.OwnerReferences) ||
		got.ResourceVersion != want.ResourceVersion || got.UID != want.UID {
		t.Errorf("the cached Pod %+v lost what the Pod controller reads of %+v", got, want)
	}
}

// Of a Node the cache keeps its metadata, taints, conditions and addresses;
// not a kubelet's images, capacity and system info.
func TestTheCacheKeepsOfANodeWhatTheControllersRead(t *testing.T) {
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "c02f00000001", ResourceVersion: "5", Labels: map[string]string{"macrack.io/serial": "C02F00000001"}},
		Spec:       corev1.NodeSpec{Taints: []corev1.Taint{{Key: "macrack.io/unleased", Effect: corev1.TaintEffectNoSchedule}}},
		Status: corev1.NodeStatus{
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}},
			Addresses:  []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.0.0.1"}},
			Capacity:   corev1.ResourceList{corev1.ResourcePods: resource.MustParse("110")},
			Images:     []corev1.ContainerImage{{Names: []string{"registry.k8s.io/pause:3.10"}, SizeBytes: 1 << 20}},
			NodeInfo:   corev1.NodeSystemInfo{KubeletVersion: "v1.37.2"},
		},
	}
	want := node.DeepCopy()
	out, err := transformOf(t, isNode)(node)
	if err != nil {
		t.Fatal(err)
	}
	got := out.(*corev1.Node)
	if len(got.Status.Images) != 0 || len(got.Status.Capacity) != 0 || got.Status.NodeInfo.KubeletVersion != "" {
		t.Errorf("the cached Node kept images %v, capacity %v or system info %+v", got.Status.Images, got.Status.Capacity, got.Status.NodeInfo)
	}
	if !equality.Semantic.DeepEqual(got.Spec, want.Spec) || !equality.Semantic.DeepEqual(got.Status.Conditions, want.Status.Conditions) ||
		!equality.Semantic.DeepEqual(got.Status.Addresses, want.Status.Addresses) || !equality.Semantic.DeepEqual(got.Labels, want.Labels) {
		t.Errorf("the cached Node %+v lost what the node and Pod controllers read of %+v", got, want)
	}
}

// transformOf is the transform of the kind that is picks out of
// ByObject, whose keys are pointers.
func transformOf(t *testing.T, is func(client.Object) bool) toolscache.TransformFunc {
	t.Helper()
	for k, v := range CacheOptions().ByObject {
		if is(k) {
			return v.Transform
		}
	}
	t.Fatal("no such kind in the cache's options")
	return nil
}

func isPod(o client.Object) bool  { _, ok := o.(*corev1.Pod); return ok }
func isNode(o client.Object) bool { _, ok := o.(*corev1.Node); return ok }

// Of coordination Leases the cache holds the agents' heartbeats alone: the
// leader election Leases of a cluster's other controllers, renewed every
// few seconds, are no chassis'.
func TestTheCacheHoldsTheHeartbeatsLeasesAlone(t *testing.T) {
	var got cache.ByObject
	found := false
	for k, v := range CacheOptions().ByObject {
		if _, ok := k.(*coordinationv1.Lease); ok {
			got, found = v, true
		}
	}
	if !found {
		t.Fatal("the cache's options leave coordination Leases unbounded")
	}
	if len(got.Namespaces) != 1 || got.Label != nil || got.Field != nil {
		t.Fatalf("the cache's coordination Leases are bounded by %+v, want the heartbeats' namespace alone", got)
	}
	if _, ok := got.Namespaces[fleetv1alpha1.HeartbeatNamespace]; !ok {
		t.Errorf("the cache holds coordination Leases of %v, not of %s, where the node controller reads the heartbeats",
			got.Namespaces, fleetv1alpha1.HeartbeatNamespace)
	}
}
