package kubelet

import (
	"context"
	"fmt"
	"net/http"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	computev1alpha1 "github.com/boualleiguie/macrack-operator/api/compute/v1alpha1"
	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
)

// Resolver finds the MacOSInstance a kubelet API request names. The
// request names a Pod, but no Pod is trusted: anyone who may create Pods
// in a namespace may set a Pod's nodeName to this Node, and name it after
// anything. A Resolver answers from MacRack's own objects only.
type Resolver interface {
	// Resolve returns the instance named pod in namespace if it is placed
	// on this node and holds one of its slots, or a *Refusal that says
	// why not.
	Resolve(ctx context.Context, namespace, pod string) (*computev1alpha1.MacOSInstance, error)
}

// Refusal is a request the server answers with an error: Code is the HTTP
// status, Message the text body. Messages never say more than the caller
// may know: an instance that is not this node's is "no MacRack VM", whether
// it exists elsewhere or not at all.
type Refusal struct {
	Code    int
	Message string
}

func (r *Refusal) Error() string { return r.Message }

func refusef(code int, format string, args ...any) *Refusal {
	return &Refusal{Code: code, Message: fmt.Sprintf(format, args...)}
}

// noVM is the one answer for anything that is not a VM of this node.
func noVM(namespace, pod, node string) *Refusal {
	return refusef(http.StatusNotFound, "no MacRack VM %s/%s on node %s", namespace, pod, node)
}

// CacheResolver resolves from the agent's cache, which holds this node's
// instances (by status.nodeName) and its MacNode: the instance named pod
// in namespace, whose status.nodeName is NodeName, and whose UID, name and
// namespace are one of the MacNode's status.slots. A chassis in the
// quarantine loop serves no request: its VMs are being stopped.
type CacheResolver struct {
	Reader   client.Reader
	NodeName string
}

var _ Resolver = CacheResolver{}

// Resolve implements Resolver.
func (c CacheResolver) Resolve(ctx context.Context, namespace, pod string) (*computev1alpha1.MacOSInstance, error) {
	inst := &computev1alpha1.MacOSInstance{}
	if err := c.Reader.Get(ctx, client.ObjectKey{Namespace: namespace, Name: pod}, inst); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, noVM(namespace, pod, c.NodeName)
		}
		return nil, fmt.Errorf("reading instance %s/%s: %w", namespace, pod, err)
	}
	if inst.Status.NodeName != c.NodeName {
		return nil, noVM(namespace, pod, c.NodeName)
	}
	mn := &fleetv1alpha1.MacNode{}
	if err := c.Reader.Get(ctx, client.ObjectKey{Name: c.NodeName}, mn); err != nil {
		if apierrors.IsNotFound(err) {
			// No MacNode, no slot: nothing runs here.
			return nil, noVM(namespace, pod, c.NodeName)
		}
		return nil, fmt.Errorf("reading MacNode %s: %w", c.NodeName, err)
	}
	if !holdsSlot(mn, inst) {
		return nil, noVM(namespace, pod, c.NodeName)
	}
	if why := fenced(mn); why != "" {
		return nil, refusef(http.StatusBadRequest,
			"node %s %s: its VMs are being stopped, and it serves no exec, logs or port-forward until it recovers", c.NodeName, why)
	}
	return inst, nil
}

// holdsSlot reports whether one of mn's slots is inst's: the agent starts
// a VM only for a UID named there.
func holdsSlot(mn *fleetv1alpha1.MacNode, inst *computev1alpha1.MacOSInstance) bool {
	for _, s := range mn.Status.Slots {
		if s.UID == inst.UID && s.Namespace == inst.Namespace && s.Name == inst.Name {
			return true
		}
	}
	return false
}

// fenced says how mn is in the quarantine loop, or "" when it is not:
// its phase (Quarantined, Rebooting), its quarantine still active, or its
// Quarantined condition, whichever the operator wrote first.
func fenced(mn *fleetv1alpha1.MacNode) string {
	const stuck = "to clear its stuck kernel VM quota"
	switch {
	case mn.Status.Phase == fleetv1alpha1.MacNodeRebooting:
		return "is Rebooting " + stuck
	case mn.Status.Phase.Fenced(),
		mn.Status.Quarantine.Active(),
		meta.IsStatusConditionTrue(mn.Status.Conditions, fleetv1alpha1.ConditionQuarantined):
		return "is Quarantined, its kernel VM quota stuck"
	}
	return ""
}

// resolveLimit bounds a request's resolution.
const resolveLimit = 10 * time.Second

// The operations a VM serves, for the messages that refuse them.
const (
	opExec        = "exec"
	opLogs        = "logs"
	opPortForward = "port-forward"
)

// target resolves a request for container of pod in namespace (and, if
// uid is not empty, of that UID) to a VM that can serve op now.
func (s *Server) target(ctx context.Context, namespace, pod, uid, container, op string) (*computev1alpha1.MacOSInstance, error) {
	return s.resolve(ctx, namespace, pod, uid, &container, op)
}

// targetPod resolves a request for pod in namespace (and, if uid is not
// empty, of that UID), which names no container, to a VM that can serve
// op now: as target, the container aside.
func (s *Server) targetPod(ctx context.Context, namespace, pod, uid, op string) (*computev1alpha1.MacOSInstance, error) {
	return s.resolve(ctx, namespace, pod, uid, nil, op)
}

// resolve is target, and targetPod when container is nil.
func (s *Server) resolve(ctx context.Context, namespace, pod, uid string, container *string, op string) (*computev1alpha1.MacOSInstance, error) {
	// A cache that has not synced yet blocks its reads: a request fails
	// rather than hangs.
	ctx, cancel := context.WithTimeout(ctx, resolveLimit)
	defer cancel()
	inst, err := s.Resolver.Resolve(ctx, namespace, pod)
	if err != nil {
		return nil, err
	}
	if uid != "" && types.UID(uid) != inst.UID {
		return nil, refusef(http.StatusNotFound, "no MacRack VM %s/%s with uid %s on node %s", namespace, pod, uid, s.NodeName)
	}
	if container != nil && *container != fleetv1alpha1.InstanceContainer {
		return nil, refusef(http.StatusNotFound, "container %q not found in MacRack VM %s/%s: its one container is %q",
			*container, namespace, pod, fleetv1alpha1.InstanceContainer)
	}
	return inst, serves(inst, op)
}

// serves checks that inst's VM runs, so that op is not left hanging on a
// VM that is starting or going. A state the client can do nothing about
// now is a 400: the API server passes a 400's text on to kubectl logs, and
// turns a 409's or a 503's into a generic message.
func serves(inst *computev1alpha1.MacOSInstance, op string) error {
	need := op + " needs a running VM"
	if op == opLogs {
		need = "logs need a running VM"
	}
	if !inst.DeletionTimestamp.IsZero() {
		return refusef(http.StatusBadRequest, "instance %s/%s is being deleted: %s", inst.Namespace, inst.Name, need)
	}
	phase := computev1alpha1.VMPending
	if rt := inst.Status.Runtime; rt != nil && rt.Phase != "" {
		phase = rt.Phase
	}
	if phase != computev1alpha1.VMRunning {
		return refusef(http.StatusBadRequest, "instance %s/%s is %s: %s", inst.Namespace, inst.Name, phase, need)
	}
	return nil
}
