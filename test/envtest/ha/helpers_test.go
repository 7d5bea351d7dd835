package ha

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	flowcontrolv1 "k8s.io/api/flowcontrol/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
	"github.com/boualleiguie/macrack-operator/internal/admission"
	"github.com/boualleiguie/macrack-operator/internal/audit/sink"
	"github.com/boualleiguie/macrack-operator/internal/policy"
	"github.com/boualleiguie/macrack-operator/test/envtest/harness"
)

// leaderLease is the leader election Lease, as the API server holds it now.
func leaderLease() *coordinationv1.Lease {
	GinkgoHelper()
	l := &coordinationv1.Lease{}
	Expect(admin.Get(ctx, client.ObjectKey{Namespace: harness.OperatorNamespace, Name: harness.LeaderElectionID}, l)).To(Succeed())
	return l
}

// currentHolder is the leader election Lease's holder now, for Eventually:
// an error while the Lease does not exist.
func currentHolder() (string, error) {
	l := &coordinationv1.Lease{}
	if err := admin.Get(ctx, client.ObjectKey{Namespace: harness.OperatorNamespace, Name: harness.LeaderElectionID}, l); err != nil {
		return "", err
	}
	return holder(l), nil
}

// holder is the Lease's holder identity; empty when released.
func holder(l *coordinationv1.Lease) string {
	if l.Spec.HolderIdentity == nil {
		return ""
	}
	return *l.Spec.HolderIdentity
}

func macNode(name string) *fleetv1alpha1.MacNode {
	GinkgoHelper()
	n := &fleetv1alpha1.MacNode{}
	Expect(admin.Get(ctx, client.ObjectKey{Name: name}, n)).To(Succeed())
	return n
}

// policyObject is one object the policy applier keeps.
type policyObject struct {
	key string
	obj client.Object
}

// policyObjects are the params ConfigMap, every ValidatingAdmissionPolicy
// and binding, the three FlowSchemas and the priority level the replicas
// apply, named as `kind/name`.
func policyObjects() []policyObject {
	GinkgoHelper()
	aps, err := engine.AdmissionPolicies(params)
	Expect(err).NotTo(HaveOccurred())
	Expect(aps).NotTo(BeEmpty())
	objs := []policyObject{{"ConfigMap/" + policy.ParamsConfigMapName,
		&corev1.ConfigMap{ObjectMeta: policy.ParamsConfigMap(harness.OperatorNamespace, params).ObjectMeta}}}
	for _, ap := range aps {
		objs = append(objs,
			policyObject{"ValidatingAdmissionPolicy/" + ap.Policy.Name, &admissionregistrationv1.ValidatingAdmissionPolicy{ObjectMeta: ap.Policy.ObjectMeta}},
			policyObject{"ValidatingAdmissionPolicyBinding/" + ap.Binding.Name, &admissionregistrationv1.ValidatingAdmissionPolicyBinding{ObjectMeta: ap.Binding.ObjectMeta}})
	}
	for _, fs := range []*flowcontrolv1.FlowSchema{admission.HeartbeatFlowSchema(params.AgentsNamespace), admission.OperatorFlowSchema(params.OperatorUsername),
		admission.AdmissionFlowSchema(params.OperatorUsername)} {
		objs = append(objs, policyObject{"FlowSchema/" + fs.Name, &flowcontrolv1.FlowSchema{ObjectMeta: fs.ObjectMeta}})
	}
	pl := admission.AdmissionPriorityLevelConfiguration()
	objs = append(objs, policyObject{"PriorityLevelConfiguration/" + pl.Name, &flowcontrolv1.PriorityLevelConfiguration{ObjectMeta: pl.ObjectMeta}})
	return objs
}

// allPolicyObjects names every object the replicas apply.
func allPolicyObjects() []string {
	GinkgoHelper()
	var keys []string
	for _, o := range policyObjects() {
		keys = append(keys, o.key)
	}
	return keys
}

// presentPolicyObjects names those of them that exist.
func presentPolicyObjects() []string {
	GinkgoHelper()
	var present []string
	for _, o := range policyObjects() {
		err := admin.Get(ctx, client.ObjectKeyFromObject(o.obj), o.obj)
		if apierrors.IsNotFound(err) {
			continue
		}
		Expect(err).NotTo(HaveOccurred())
		present = append(present, o.key)
	}
	return present
}

// bindings maps each lease UID to the MacNodes of class whose binding
// names it.
func bindings(class string) map[types.UID][]string {
	GinkgoHelper()
	nodes := &fleetv1alpha1.MacNodeList{}
	Expect(admin.List(ctx, nodes)).To(Succeed())
	out := map[types.UID][]string{}
	for _, n := range nodes.Items {
		if n.Spec.NodeClassName == class && n.Status.Binding != nil {
			out[n.Status.Binding.LeaseUID] = append(out[n.Status.Binding.LeaseUID], n.Name)
		}
	}
	return out
}

// kill is when a replica was killed, and how many chassis of the class the
// trigger had seen bound then.
type kill struct {
	at    time.Time
	bound int
	err   error
}

// killWhenBound watches the MacNodes of class through the API server and
// SIGKILLs r as soon as at least n of them are bound. The watch is
// established when it returns.
func killWhenBound(r *harness.OperatorProcess, class string, n int) <-chan kill {
	GinkgoHelper()
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	w, err := env.WatchClient().Watch(wctx, &fleetv1alpha1.MacNodeList{})
	Expect(err).NotTo(HaveOccurred())
	out := make(chan kill, 1)
	go func() {
		defer GinkgoRecover()
		defer cancel()
		defer w.Stop()
		bound := map[string]bool{}
		for ev := range w.ResultChan() {
			mn, ok := ev.Object.(*fleetv1alpha1.MacNode)
			if !ok || mn.Spec.NodeClassName != class {
				continue
			}
			bound[mn.Name] = ev.Type != watch.Deleted && mn.Status.Binding != nil
			count := 0
			for _, b := range bound {
				if b {
					count++
				}
			}
			if count >= n {
				at := time.Now()
				out <- kill{at: at, bound: count, err: r.Kill()}
				return
			}
		}
		out <- kill{err: fmt.Errorf("the MacNode watch ended before %d chassis were bound", n)}
	}()
	return out
}

// streamRecords reads the whole audit stream: each object's records, by
// sequence number, each id once (a redelivered id is the same record).
func streamRecords() map[string]map[int64]string {
	GinkgoHelper()
	r, err := sink.OpenReader(ctx, stream.URL(), "")
	Expect(err).NotTo(HaveOccurred())
	defer r.Close()
	events, err := r.All(ctx)
	Expect(err).NotTo(HaveOccurred())
	out := map[string]map[int64]string{}
	for _, ev := range events {
		parts := strings.Split(ev.ID(), "/")
		if len(parts) != 3 {
			continue // a denial's id
		}
		seq, err := strconv.ParseInt(parts[2], 10, 64)
		if err != nil {
			continue // an object's deleted record
		}
		key := parts[0] + "/" + parts[1]
		if out[key] == nil {
			out[key] = map[int64]string{}
		}
		if typ, seen := out[key][seq]; seen {
			Expect(typ).To(Equal(ev.Type()), "%s carries two records", ev.ID())
		}
		out[key][seq] = ev.Type()
	}
	return out
}
