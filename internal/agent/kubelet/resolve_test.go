package kubelet

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	computev1alpha1 "github.com/boualleiguie/macrack-operator/api/compute/v1alpha1"
	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
)

type targetReq struct {
	namespace, pod, uid, container, op string
}

func baseReq() targetReq {
	return targetReq{namespace: tenant, pod: vmA, container: fleetv1alpha1.InstanceContainer, op: opExec}
}

// TestTarget: each way a request may not reach a VM is refused with its
// message, and beside it a control that differs in that one thing only
// reaches the VM.
func TestTarget(t *testing.T) {
	now := metav1.Now()
	cases := []struct {
		name string
		// world and req make the refused request; ctlWorld and ctlReq
		// its control. Nil leaves the base as it is.
		world, ctlWorld func(*knobs)
		req, ctlReq     func(*targetReq)
		code            int
		msg             string
	}{{
		name: "forged pod name",
		req:  func(r *targetReq) { r.pod = "vm-forged" },
		code: http.StatusNotFound, msg: "no MacRack VM tenant-a/vm-forged on node mini1",
	}, {
		name: "pod named after another namespace's instance",
		req:  func(r *targetReq) { r.namespace = "tenant-b" },
		code: http.StatusNotFound, msg: "no MacRack VM tenant-b/vm-a on node mini1",
	}, {
		name:  "instance on another node",
		world: func(k *knobs) { k.instNode = "mini2" },
		code:  http.StatusNotFound, msg: "no MacRack VM tenant-a/vm-a on node mini1",
	}, {
		name:  "instance not placed",
		world: func(k *knobs) { k.instNode = "" },
		code:  http.StatusNotFound, msg: "no MacRack VM tenant-a/vm-a on node mini1",
	}, {
		name:  "UID not in the slots",
		world: func(k *knobs) { k.slotUID = "uid-other" },
		code:  http.StatusNotFound, msg: "no MacRack VM tenant-a/vm-a on node mini1",
	}, {
		name:  "slot holds the UID under another name",
		world: func(k *knobs) { k.slotName = "vm-z" },
		code:  http.StatusNotFound, msg: "no MacRack VM tenant-a/vm-a on node mini1",
	}, {
		name:  "no MacNode",
		world: func(k *knobs) { k.noMacNode = true },
		code:  http.StatusNotFound, msg: "no MacRack VM tenant-a/vm-a on node mini1",
	}, {
		name:   "wrong container",
		req:    func(r *targetReq) { r.container = "sidecar" },
		ctlReq: func(r *targetReq) { r.container = "macos" },
		code:   http.StatusNotFound, msg: `container "sidecar" not found in MacRack VM tenant-a/vm-a: its one container is "macos"`,
	}, {
		name:   "wrong uid in the path",
		req:    func(r *targetReq) { r.uid = "uid-x" },
		ctlReq: func(r *targetReq) { r.uid = string(uidA) },
		code:   http.StatusNotFound, msg: "no MacRack VM tenant-a/vm-a with uid uid-x on node mini1",
	}, {
		name:  "stopping",
		world: func(k *knobs) { k.phase = computev1alpha1.VMStopping },
		code:  http.StatusBadRequest, msg: "instance tenant-a/vm-a is Stopping: exec needs a running VM",
	}, {
		name:   "stopped, for logs",
		world:  func(k *knobs) { k.phase = computev1alpha1.VMStopped },
		req:    func(r *targetReq) { r.op = opLogs },
		ctlReq: func(r *targetReq) { r.op = opLogs },
		code:   http.StatusBadRequest, msg: "instance tenant-a/vm-a is Stopped: logs need a running VM",
	}, {
		name:  "no runtime status yet",
		world: func(k *knobs) { k.noRuntime = true },
		code:  http.StatusBadRequest, msg: "instance tenant-a/vm-a is Pending: exec needs a running VM",
	}, {
		name:  "deleting",
		world: func(k *knobs) { k.deleting = true },
		code:  http.StatusBadRequest, msg: "instance tenant-a/vm-a is being deleted: exec needs a running VM",
	}, {
		name:     "chassis Quarantined",
		world:    func(k *knobs) { k.nodePhase = fleetv1alpha1.MacNodeQuarantined },
		ctlWorld: func(k *knobs) { k.nodePhase = fleetv1alpha1.MacNodeLeased },
		code:     http.StatusBadRequest, msg: "node mini1 is Quarantined, its kernel VM quota stuck: its VMs are being stopped, and it serves no exec, logs or port-forward until it recovers",
	}, {
		name:  "chassis Rebooting",
		world: func(k *knobs) { k.nodePhase = fleetv1alpha1.MacNodeRebooting },
		code:  http.StatusBadRequest, msg: "node mini1 is Rebooting to clear its stuck kernel VM quota",
	}, {
		name:     "chassis with the Quarantined condition",
		world:    func(k *knobs) { k.condition = metav1.ConditionTrue },
		ctlWorld: func(k *knobs) { k.condition = metav1.ConditionFalse },
		code:     http.StatusBadRequest, msg: "node mini1 is Quarantined",
	}, {
		name:  "chassis with an active quarantine",
		world: func(k *knobs) { k.quarantine = &fleetv1alpha1.QuarantineStatus{BootID: "b", QuarantinedAt: now} },
		ctlWorld: func(k *knobs) {
			k.quarantine = &fleetv1alpha1.QuarantineStatus{BootID: "b", QuarantinedAt: now, RecoveredAt: &now}
		},
		code: http.StatusBadRequest, msg: "node mini1 is Quarantined",
	}}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			try := func(world func(*knobs), req func(*targetReq)) (*computev1alpha1.MacOSInstance, error) {
				k, r := baseKnobs(), baseReq()
				if world != nil {
					world(&k)
				}
				if req != nil {
					req(&r)
				}
				s := &Server{NodeName: node, Resolver: CacheResolver{Reader: k.reader(t), NodeName: node}}
				return s.target(context.Background(), r.namespace, r.pod, r.uid, r.container, r.op)
			}
			t.Run("control", func(t *testing.T) {
				inst, err := try(c.ctlWorld, c.ctlReq)
				if err != nil {
					t.Fatalf("control refused: %v", err)
				}
				if inst.UID != uidA {
					t.Fatalf("control reached %s, want %s", inst.UID, uidA)
				}
			})
			t.Run("refused", func(t *testing.T) {
				inst, err := try(c.world, c.req)
				var ref *Refusal
				if !errors.As(err, &ref) {
					t.Fatalf("got %v, %v; want a refusal", inst, err)
				}
				if ref.Code != c.code || !strings.Contains(ref.Message, c.msg) {
					t.Fatalf("got %d %q; want %d %q", ref.Code, ref.Message, c.code, c.msg)
				}
			})
		})
	}
}
