package admission

import (
	coordinationv1 "k8s.io/api/coordination/v1"
	flowcontrolv1 "k8s.io/api/flowcontrol/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authentication/serviceaccount"

	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
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
