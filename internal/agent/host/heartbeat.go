package host

import (
	"context"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
	"github.com/boualleiguie/macrack-operator/internal/conflict"
)

// HeartbeatNamespace holds the heartbeat Leases, as it does kubelets'.
const HeartbeatNamespace = fleetv1alpha1.HeartbeatNamespace

// Heartbeat renews the agent's own Lease in kube-node-lease, as a kubelet
// does. Heartbeats go through the Lease, never through MacNode status, so
// that they never collide with the operator's writes. The agent writes no
// Node condition: the operator sets Ready from this Lease, and
// kube-controller-manager marks it Unknown when the Lease goes stale
// (internal/nodeready).
//
// A beat is one write and, in the steady state, no read: the Lease last
// written is renewed in place (read again only after a conflict).
type Heartbeat struct {
	Client   client.Client
	NodeName string
	Interval time.Duration
	Clock    clock.WithTicker
	Log      logr.Logger

	// last is the Lease as the last beat wrote it.
	last *coordinationv1.Lease
}

// Run beats until ctx ends.
func (h *Heartbeat) Run(ctx context.Context) error {
	t := h.Clock.NewTicker(h.Interval)
	defer t.Stop()
	for {
		h.beatAndLog(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C():
		}
	}
}

// beatAndLog beats once and logs a failure. A conflict (another writer
// renewed the Lease since this agent read it) is settled by the next beat,
// which reads it afresh: it is logged at V(1), not as an error.
func (h *Heartbeat) beatAndLog(ctx context.Context) {
	err := h.Beat(ctx)
	switch {
	case err == nil:
	case conflict.Is(err):
		h.Log.V(1).Info("Heartbeat lost a race; the next beat reads the Lease afresh", "conflict", err.Error())
	default:
		h.Log.Error(err, "Heartbeat failed")
	}
}

// Beat renews the Lease once.
func (h *Heartbeat) Beat(ctx context.Context) error {
	if err := h.renew(ctx, metav1.NewMicroTime(h.Clock.Now())); err != nil {
		// Read it afresh next time: another writer, or a deletion.
		h.last = nil
		return err
	}
	return nil
}

func (h *Heartbeat) renew(ctx context.Context, now metav1.MicroTime) error {
	lease := h.last
	if lease == nil {
		lease = &coordinationv1.Lease{}
		err := h.Client.Get(ctx, client.ObjectKey{Namespace: HeartbeatNamespace, Name: h.NodeName}, lease)
		switch {
		case apierrors.IsNotFound(err):
			lease = &coordinationv1.Lease{
				ObjectMeta: metav1.ObjectMeta{Namespace: HeartbeatNamespace, Name: h.NodeName},
				Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(h.NodeName),
					LeaseDurationSeconds: ptr.To(int32(4 * h.Interval / time.Second)), RenewTime: &now},
			}
			if err := h.Client.Create(ctx, lease); err != nil {
				return fmt.Errorf("creating heartbeat Lease: %w", err)
			}
			h.last = lease
			return nil
		case err != nil:
			return fmt.Errorf("getting heartbeat Lease: %w", err)
		}
	}
	lease = lease.DeepCopy()
	lease.Spec.RenewTime = &now
	if err := h.Client.Update(ctx, lease); err != nil {
		return fmt.Errorf("renewing heartbeat Lease: %w", err)
	}
	h.last = lease
	return nil
}
