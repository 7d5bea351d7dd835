package host

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
	"github.com/boualleiguie/macrack-operator/internal/conflict"
)

// errCacheNotStarted stands for a missing NodeReader: read through Client.
var errCacheNotStarted error = &cache.ErrCacheNotStarted{}

// HeartbeatNamespace holds the heartbeat Leases, as it does kubelets'.
const HeartbeatNamespace = fleetv1alpha1.HeartbeatNamespace

// Heartbeat renews the agent's own Lease in kube-node-lease and keeps its
// Node's Ready condition. Heartbeats go through the Lease, never through
// MacNode status, so that they never collide with the operator's writes.
//
// A beat is one write and, in the steady state, no read: the Lease last
// written is renewed in place (read again only after a conflict), and the
// Node is read from NodeReader, the agent's cache, when it has one.
type Heartbeat struct {
	Client client.Client
	// NodeReader reads the chassis' Node; Client if nil, or while the
	// cache has not started.
	NodeReader client.Reader
	NodeName   string
	Interval   time.Duration
	Clock      clock.WithTicker
	Log        logr.Logger

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

// Beat renews the Lease once and restores the Node's Ready condition if it
// is not True.
func (h *Heartbeat) Beat(ctx context.Context) error {
	now := metav1.NewMicroTime(h.Clock.Now())
	if err := h.renew(ctx, now); err != nil {
		// Read it afresh next time: another writer, or a deletion.
		h.last = nil
		return err
	}
	return h.keepReady(ctx, now.Time)
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

func (h *Heartbeat) keepReady(ctx context.Context, now time.Time) error {
	node := &corev1.Node{}
	err := errCacheNotStarted
	if h.NodeReader != nil {
		err = h.NodeReader.Get(ctx, client.ObjectKey{Name: h.NodeName}, node)
	}
	if errors.As(err, new(*cache.ErrCacheNotStarted)) {
		err = h.Client.Get(ctx, client.ObjectKey{Name: h.NodeName}, node)
	}
	if err != nil {
		return fmt.Errorf("getting Node: %w", err)
	}
	for _, c := range node.Status.Conditions {
		if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
			return nil
		}
	}
	updated := node.DeepCopy()
	ready := corev1.NodeCondition{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "AgentReady",
		Message: "MacRack host agent is heartbeating", LastHeartbeatTime: metav1.NewTime(now), LastTransitionTime: metav1.NewTime(now)}
	found := false
	for i := range updated.Status.Conditions {
		if updated.Status.Conditions[i].Type == corev1.NodeReady {
			updated.Status.Conditions[i] = ready
			found = true
		}
	}
	if !found {
		updated.Status.Conditions = append(updated.Status.Conditions, ready)
	}
	if err := h.Client.Status().Patch(ctx, updated, client.MergeFrom(node)); err != nil {
		return fmt.Errorf("marking Node ready: %w", err)
	}
	h.Log.Info("Node marked ready")
	return nil
}
