package admission

import (
	authorizationv1 "k8s.io/api/authorization/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	flowcontrolv1 "k8s.io/api/flowcontrol/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authentication/serviceaccount"
	"k8s.io/utils/ptr"

	computev1alpha1 "github.com/boualleiguie/macrack-operator/api/compute/v1alpha1"
	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
	leasingv1alpha1 "github.com/boualleiguie/macrack-operator/api/leasing/v1alpha1"
)

// +kubebuilder:rbac:groups=flowcontrol.apiserver.k8s.io,resources=flowschemas,verbs=get;list;watch;create;update;patch

// HeartbeatFlowSchemaName names the FlowSchema that gives the agents'
// heartbeats the kubelets' priority level.
const HeartbeatFlowSchemaName = "macrack-agent-heartbeats"

// HeartbeatPriorityLevel is the API server's own priority level for the
// kubelets' node heartbeats, one of its suggested configurations.
const HeartbeatPriorityLevel = "node-high"

// heartbeatPrecedence orders the FlowSchema before the API server's
// suggested kube-system-service-accounts (900) and service-accounts
// (9000), which would otherwise take an agent's requests, and after
// system-nodes (500).
const heartbeatPrecedence = 600

// HeartbeatFlowSchema classifies the agents' heartbeat Lease requests into
// the priority level of the kubelets' own. Without it they are
// ServiceAccount requests, in workload-low behind every agent's status
// writes and reports, which a burst of leases queues for seconds
// (BENCHMARKS.md), so a beat arrives late. Only the Leases of
// kube-node-lease are matched, so that nothing else an agent sends jumps
// the queue. The group matches every ServiceAccount of the agents'
// namespace, as the agents' roles do; what one that is not an enrolled
// agent may write there agent.scope refuses, after classification.
func HeartbeatFlowSchema(agentsNamespace string) *flowcontrolv1.FlowSchema {
	return &flowcontrolv1.FlowSchema{
		TypeMeta: metav1.TypeMeta{APIVersion: flowcontrolv1.SchemeGroupVersion.String(), Kind: "FlowSchema"},
		ObjectMeta: metav1.ObjectMeta{Name: HeartbeatFlowSchemaName,
			Labels: map[string]string{partOf: "macrack"}},
		Spec: flowcontrolv1.FlowSchemaSpec{
			PriorityLevelConfiguration: flowcontrolv1.PriorityLevelConfigurationReference{Name: HeartbeatPriorityLevel},
			MatchingPrecedence:         heartbeatPrecedence,
			DistinguisherMethod:        &flowcontrolv1.FlowDistinguisherMethod{Type: flowcontrolv1.FlowDistinguisherMethodByUserType},
			Rules: []flowcontrolv1.PolicyRulesWithSubjects{{
				Subjects: []flowcontrolv1.Subject{{Kind: flowcontrolv1.SubjectKindGroup,
					Group: &flowcontrolv1.GroupSubject{Name: serviceaccount.MakeNamespaceGroupName(agentsNamespace)}}},
				ResourceRules: []flowcontrolv1.ResourcePolicyRule{{
					Verbs:      []string{"get", "create", "update"},
					APIGroups:  []string{coordinationv1.GroupName},
					Resources:  []string{"leases"},
					Namespaces: []string{fleetv1alpha1.HeartbeatNamespace},
				}},
			}},
		},
	}
}

// OperatorFlowSchemaName names the FlowSchema that gives the operator's own
// requests the priority level of the cluster's controllers.
const OperatorFlowSchemaName = "macrack-operator"

// OperatorPriorityLevel is the API server's suggested priority level of
// kube-controller-manager and kube-scheduler.
const OperatorPriorityLevel = "workload-high"

// operatorPrecedence is that of the suggested kube-controller-manager
// FlowSchema: after system-nodes (500) and the heartbeats (600), before
// service-accounts (9000), which would otherwise take the operator's
// requests.
const operatorPrecedence = 800

// OperatorFlowSchema classifies every request of the operator's identity
// into workload-high. Without it the operator is an ordinary ServiceAccount
// in workload-low, in the same queues as a thousand agents' writes, which
// waited 2.9 s on average in a cold wave of 1,000 leases (BENCHMARKS.md).
// It matches the operator's username
// alone; the flow is distinguished by user, so within workload-high fair
// queuing holds the operator to its share beside the cluster's own
// controllers, whatever it sends.
func OperatorFlowSchema(operatorUsername string) *flowcontrolv1.FlowSchema {
	return &flowcontrolv1.FlowSchema{
		TypeMeta: metav1.TypeMeta{APIVersion: flowcontrolv1.SchemeGroupVersion.String(), Kind: "FlowSchema"},
		ObjectMeta: metav1.ObjectMeta{Name: OperatorFlowSchemaName,
			Labels: map[string]string{partOf: "macrack"}},
		Spec: flowcontrolv1.FlowSchemaSpec{
			PriorityLevelConfiguration: flowcontrolv1.PriorityLevelConfigurationReference{Name: OperatorPriorityLevel},
			MatchingPrecedence:         operatorPrecedence,
			DistinguisherMethod:        &flowcontrolv1.FlowDistinguisherMethod{Type: flowcontrolv1.FlowDistinguisherMethodByUserType},
			Rules: []flowcontrolv1.PolicyRulesWithSubjects{{
				Subjects: []flowcontrolv1.Subject{{Kind: flowcontrolv1.SubjectKindUser,
					User: &flowcontrolv1.UserSubject{Name: operatorUsername}}},
				ResourceRules: []flowcontrolv1.ResourcePolicyRule{{
					Verbs:        []string{flowcontrolv1.VerbAll},
					APIGroups:    []string{flowcontrolv1.APIGroupAll},
					Resources:    []string{flowcontrolv1.ResourceAll},
					ClusterScope: true,
					Namespaces:   []string{flowcontrolv1.NamespaceEvery},
				}},
			}},
		},
	}
}

// +kubebuilder:rbac:groups=flowcontrol.apiserver.k8s.io,resources=prioritylevelconfigurations,verbs=get;list;watch;create;update;patch

// AdmissionFlowSchemaName names the FlowSchema, and AdmissionPriorityLevel
// the priority level, of the requests the webhook sends the API server
// while it answers one: its live reads and its reservation writes.
const (
	AdmissionFlowSchemaName = "macrack-admission"
	AdmissionPriorityLevel  = "macrack-admission"
)

// admissionPrecedence orders the FlowSchema before the operator's own
// (800), which would otherwise take these requests.
const admissionPrecedence = 700

// admissionShares is the level's share of the API server's seats, as
// leader-election's; it lends none of it, so a burst elsewhere cannot take
// the seats a webhook call waits on. With the suggested levels' 245 shares
// and the default 600 seats, that is about 24 seats.
const admissionShares = 10

// AdmissionPriorityLevelConfiguration is the webhook's own priority level.
// A webhook's request to the API server is made while the request it admits
// holds a seat; the API server's documentation (API Priority and Fairness,
// "recursive server scenarios") asks that such auxiliary requests go to
// another priority level, else they can deadlock: in the operator's
// workload-high flow they would queue behind the operator's own writes,
// each of which waits on the webhook. At 1,000 leases they wait under a
// millisecond here (BENCHMARKS.md, "the webhook's own priority").
func AdmissionPriorityLevelConfiguration() *flowcontrolv1.PriorityLevelConfiguration {
	return &flowcontrolv1.PriorityLevelConfiguration{
		TypeMeta: metav1.TypeMeta{APIVersion: flowcontrolv1.SchemeGroupVersion.String(), Kind: "PriorityLevelConfiguration"},
		ObjectMeta: metav1.ObjectMeta{Name: AdmissionPriorityLevel,
			Labels: map[string]string{partOf: "macrack"}},
		Spec: flowcontrolv1.PriorityLevelConfigurationSpec{
			Type: flowcontrolv1.PriorityLevelEnablementLimited,
			Limited: &flowcontrolv1.LimitedPriorityLevelConfiguration{
				NominalConcurrencyShares: ptr.To[int32](admissionShares),
				LendablePercent:          ptr.To[int32](0),
				LimitResponse: flowcontrolv1.LimitResponse{
					Type:    flowcontrolv1.LimitResponseTypeQueue,
					Queuing: &flowcontrolv1.QueuingConfiguration{Queues: 16, HandSize: 4, QueueLengthLimit: 50},
				},
			},
		},
	}
}

// AdmissionFlowSchema classifies the webhook's auxiliary requests into its
// priority level. A FlowSchema sees the user, the verb and the resource, not
// which part of the operator sends a request, so it names what only the
// webhook sends: single-object reads of what the inventory reads, a list
// of one namespace's instances (the controllers list all namespaces, from
// their caches), the reservations' status updates (the controllers patch),
// and SubjectAccessReviews. The controllers' few uncached reads are of
// Leases, Pods and Secrets, which it does not name; the reservations'
// sweeper, the same writer as the webhook's, matches too.
func AdmissionFlowSchema(operatorUsername string) *flowcontrolv1.FlowSchema {
	rule := func(verb, group string, clusterScope bool, resources ...string) flowcontrolv1.ResourcePolicyRule {
		r := flowcontrolv1.ResourcePolicyRule{Verbs: []string{verb}, APIGroups: []string{group}, Resources: resources, ClusterScope: clusterScope}
		if !clusterScope {
			r.Namespaces = []string{flowcontrolv1.NamespaceEvery}
		}
		return r
	}
	return &flowcontrolv1.FlowSchema{
		TypeMeta: metav1.TypeMeta{APIVersion: flowcontrolv1.SchemeGroupVersion.String(), Kind: "FlowSchema"},
		ObjectMeta: metav1.ObjectMeta{Name: AdmissionFlowSchemaName,
			Labels: map[string]string{partOf: "macrack"}},
		Spec: flowcontrolv1.FlowSchemaSpec{
			PriorityLevelConfiguration: flowcontrolv1.PriorityLevelConfigurationReference{Name: AdmissionPriorityLevel},
			MatchingPrecedence:         admissionPrecedence,
			DistinguisherMethod:        &flowcontrolv1.FlowDistinguisherMethod{Type: flowcontrolv1.FlowDistinguisherMethodByUserType},
			Rules: []flowcontrolv1.PolicyRulesWithSubjects{{
				Subjects: []flowcontrolv1.Subject{{Kind: flowcontrolv1.SubjectKindUser,
					User: &flowcontrolv1.UserSubject{Name: operatorUsername}}},
				ResourceRules: []flowcontrolv1.ResourcePolicyRule{
					rule("get", leasingv1alpha1.GroupVersion.Group, false, "macnodeleases"),
					rule("get", fleetv1alpha1.GroupVersion.Group, true, "macnodes", "macnodeclasses", "macosimages"),
					rule("list", computev1alpha1.GroupVersion.Group, false, "macosinstances"),
					rule("update", leasingv1alpha1.GroupVersion.Group, false, "macnodeleases/status"),
					rule("create", authorizationv1.GroupName, true, "subjectaccessreviews"),
				},
			}},
		},
	}
}
