// Package index names the field indexes that the webhooks and the
// reconcilers share, so that neither lists a whole kind on a hot path.
package index

import (
	"context"
	"fmt"
	"strings"

	"sigs.k8s.io/controller-runtime/pkg/client"

	computev1alpha1 "github.com/boualleiguie/macrack-operator/api/compute/v1alpha1"
	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
	leasingv1alpha1 "github.com/boualleiguie/macrack-operator/api/leasing/v1alpha1"
)

// Index names. Values are documented beside each indexer.
const (
	// LeaseBySerial indexes MacNodeLeases by status.serial.
	LeaseBySerial = "leasing.macrack.io/lease-by-serial"
	// LeaseByClass indexes MacNodeLeases by spec.nodeClassName.
	LeaseByClass = "leasing.macrack.io/lease-by-class"
	// InstanceByLease indexes MacOSInstances by "<namespace>/<spec.leaseName>".
	InstanceByLease = "compute.macrack.io/instance-by-lease"
	// InstanceByNode indexes MacOSInstances by status.nodeName.
	InstanceByNode = "compute.macrack.io/instance-by-node"
	// MacNodeByClass indexes MacNodes by spec.nodeClassName.
	MacNodeByClass = "fleet.macrack.io/macnode-by-class"
	// MacNodeByLeaseUID indexes MacNodes by status.binding.leaseUID.
	MacNodeByLeaseUID = "fleet.macrack.io/macnode-by-lease-uid"
	// MacNodeByLease indexes MacNodes by their binding's lease, as
	// LeaseKey: the lease controller finds by it the bindings whose lease
	// is gone, which only a name still names.
	MacNodeByLease = "fleet.macrack.io/macnode-by-lease"
	// FreeMacNodeByClass indexes the MacNodes a lease may bind, Ready,
	// unbound and not being deleted, by spec.nodeClassName: a bind reads the
	// free chassis of its class, not the whole class.
	FreeMacNodeByClass = "fleet.macrack.io/free-macnode-by-class"
)

// NodeClass is a MacNode's class, the key of MacNodeByClass: the lease
// controller counts the chassis of a class by it (a Count).
func NodeClass(o client.Object) []string {
	n, ok := o.(*fleetv1alpha1.MacNode)
	if !ok {
		return nil
	}
	return nonEmpty(n.Spec.NodeClassName)
}

// VerifiedImageKey names a verified copy of a golden: its name and digest.
func VerifiedImageKey(name, digest string) string { return name + "@" + digest }

// VerifiedImages are the goldens a MacNode's agent reports a Ready copy
// of, as VerifiedImageKey(name, digest): a pull's progress changes none of
// them. The image controller counts chassis by them (a Count).
func VerifiedImages(o client.Object) []string {
	n, ok := o.(*fleetv1alpha1.MacNode)
	if !ok || n.Status.Reported == nil {
		return nil
	}
	var keys []string
	for _, i := range n.Status.Reported.Images {
		if i.Phase == fleetv1alpha1.ImageReady && i.Name != "" && i.Digest != "" {
			keys = append(keys, VerifiedImageKey(i.Name, i.Digest))
		}
	}
	return keys
}

// LeaseKey is the InstanceByLease value of a lease.
func LeaseKey(namespace, name string) string { return namespace + "/" + name }

// Definition is one field index.
type Definition struct {
	Object client.Object
	Name   string
	Value  client.IndexerFunc
}

// Register adds every index to the indexer (a manager's field indexer).
func Register(ctx context.Context, indexer client.FieldIndexer) error {
	for _, ix := range Definitions() {
		if err := indexer.IndexField(ctx, ix.Object, ix.Name, ix.Value); err != nil {
			return fmt.Errorf("registering index %s: %w", ix.Name, err)
		}
	}
	return nil
}

// Definitions lists the indexes of MacRack's kinds, for fake clients in
// tests.
func Definitions() []Definition {
	return []Definition{
		{&leasingv1alpha1.MacNodeLease{}, LeaseBySerial, func(o client.Object) []string {
			return nonEmpty(o.(*leasingv1alpha1.MacNodeLease).Status.Serial)
		}},
		{&leasingv1alpha1.MacNodeLease{}, LeaseByClass, func(o client.Object) []string {
			return nonEmpty(o.(*leasingv1alpha1.MacNodeLease).Spec.NodeClassName)
		}},
		{&computev1alpha1.MacOSInstance{}, InstanceByLease, func(o client.Object) []string {
			i := o.(*computev1alpha1.MacOSInstance)
			return nonEmpty(LeaseKey(i.Namespace, i.Spec.LeaseName))
		}},
		{&computev1alpha1.MacOSInstance{}, InstanceByNode, func(o client.Object) []string {
			return nonEmpty(o.(*computev1alpha1.MacOSInstance).Status.NodeName)
		}},
		{&fleetv1alpha1.MacNode{}, MacNodeByClass, NodeClass},
		{&fleetv1alpha1.MacNode{}, MacNodeByLeaseUID, func(o client.Object) []string {
			if b := o.(*fleetv1alpha1.MacNode).Status.Binding; b != nil {
				return nonEmpty(string(b.LeaseUID))
			}
			return nil
		}},
		{&fleetv1alpha1.MacNode{}, MacNodeByLease, func(o client.Object) []string {
			if b := o.(*fleetv1alpha1.MacNode).Status.Binding; b != nil {
				return nonEmpty(LeaseKey(b.LeaseNamespace, b.LeaseName))
			}
			return nil
		}},
		{&fleetv1alpha1.MacNode{}, FreeMacNodeByClass, func(o client.Object) []string {
			n := o.(*fleetv1alpha1.MacNode)
			if n.Status.Phase != fleetv1alpha1.MacNodeReady || n.Status.Binding != nil || !n.DeletionTimestamp.IsZero() {
				return nil
			}
			return nonEmpty(n.Spec.NodeClassName)
		}},
	}
}

func nonEmpty(s string) []string {
	if strings.TrimSpace(s) == "" || strings.HasSuffix(s, "/") {
		return nil
	}
	return []string{s}
}
