// Package inventory gathers the related objects a policy decision needs, by
// role ("lease", "nodeClass", "leaseInstances", ...), from a cache-backed
// reader and its field indexes. The webhooks and the reconcilers share it, so
// that both decide on the same facts. It never lists a whole kind.
package inventory

import (
	"context"
	"fmt"
	"reflect"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	computev1alpha1 "github.com/boualleiguie/macrack-operator/api/compute/v1alpha1"
	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
	leasingv1alpha1 "github.com/boualleiguie/macrack-operator/api/leasing/v1alpha1"
	workloadsv1alpha1 "github.com/boualleiguie/macrack-operator/api/workloads/v1alpha1"
	"github.com/boualleiguie/macrack-operator/internal/index"
	"github.com/boualleiguie/macrack-operator/internal/policy"
)

// +kubebuilder:rbac:groups=fleet.macrack.io,resources=macosimages,verbs=get;list;watch

// Builder reads the inventory from Reader, normally the manager's cache,
// and its field indexes.
type Builder struct {
	Reader client.Reader
	// Getter, if set, serves the reads of single objects by name (a lease,
	// an image, a class, a MacNode) in Reader's stead: the webhook sets it
	// to the API server, to decide again on fresh objects before it denies
	// (a tenant who writes right after a watch showed the lease Bound must
	// not be refused on a cache that has not caught up). Lists stay on the
	// indexes.
	Getter client.Reader
}

// For returns the inventory for a write of kind, given the written object
// and the stored one (either may be nil).
func (b Builder) For(ctx context.Context, kind schema.GroupKind, obj, old map[string]any) (map[string]any, error) {
	src := obj
	if src == nil {
		src = old
	}
	inv := map[string]any{}
	var err error
	switch kind {
	case leasingv1alpha1.GroupVersion.WithKind("MacNodeLease").GroupKind():
		err = b.forLease(ctx, inv, str(obj, "status", "serial"))
	case computev1alpha1.GroupVersion.WithKind("MacOSInstance").GroupKind():
		creating := old == nil
		err = b.forInstance(ctx, inv, str(src, "metadata", "namespace"), str(src, "spec", "leaseName"), str(obj, "status", "nodeName"), creating)
		if err == nil && creating {
			err = b.addImage(ctx, inv, str(obj, "spec", "imageName"))
		}
	case fleetv1alpha1.GroupVersion.WithKind("MacNode").GroupKind():
		err = b.addClass(ctx, inv, str(src, "spec", "nodeClassName"))
	case workloadsv1alpha1.GroupVersion.WithKind("GitLabRunner").GroupKind():
		err = b.forWorkload(ctx, inv, str(src, "metadata", "namespace"), str(src, "spec", "leaseName"))
	}
	return inv, err
}

func (b Builder) forLease(ctx context.Context, inv map[string]any, serial string) error {
	if serial == "" {
		return nil
	}
	node := &fleetv1alpha1.MacNode{}
	if err := b.get(ctx, client.ObjectKey{Name: strings.ToLower(serial)}, node, inv, "macNode"); err != nil {
		return err
	}
	leases := &leasingv1alpha1.MacNodeLeaseList{}
	if err := b.Reader.List(ctx, leases, client.MatchingFields{index.LeaseBySerial: serial}); err != nil {
		return fmt.Errorf("listing leases of serial %s: %w", serial, err)
	}
	items := make([]any, 0, len(leases.Items))
	for i := range leases.Items {
		m, err := toMap(&leases.Items[i])
		if err != nil {
			return err
		}
		items = append(items, m)
	}
	inv["leases"] = items
	return nil
}

// forInstance reads an instance's lease, its class and its instances, the
// instances of the node it is placed on and, for a new instance, the
// MacNode its lease holds (quarantine.fence).
func (b Builder) forInstance(ctx context.Context, inv map[string]any, namespace, leaseName, nodeName string, creating bool) error {
	if leaseName != "" {
		lease := &leasingv1alpha1.MacNodeLease{}
		if err := b.get(ctx, client.ObjectKey{Namespace: namespace, Name: leaseName}, lease, inv, "lease"); err != nil {
			return err
		}
		if inv["lease"] != nil {
			if err := b.addClass(ctx, inv, lease.Spec.NodeClassName); err != nil {
				return err
			}
			if creating && lease.Status.NodeName != "" {
				if err := b.get(ctx, client.ObjectKey{Name: lease.Status.NodeName}, &fleetv1alpha1.MacNode{}, inv, "macNode"); err != nil {
					return err
				}
			}
		}
		if err := b.listInstances(ctx, inv, "leaseInstances", client.InNamespace(namespace),
			client.MatchingFields{index.InstanceByLease: index.LeaseKey(namespace, leaseName)}); err != nil {
			return err
		}
	}
	if nodeName != "" {
		if err := b.listInstances(ctx, inv, "nodeInstances", client.MatchingFields{index.InstanceByNode: nodeName}); err != nil {
			return err
		}
	}
	return nil
}

// forWorkload reads a workload's lease and its class, whose vmCapacity
// bounds the workload's concurrency.
func (b Builder) forWorkload(ctx context.Context, inv map[string]any, namespace, leaseName string) error {
	if leaseName == "" {
		return nil
	}
	lease := &leasingv1alpha1.MacNodeLease{}
	if err := b.get(ctx, client.ObjectKey{Namespace: namespace, Name: leaseName}, lease, inv, "lease"); err != nil {
		return err
	}
	if inv["lease"] == nil {
		return nil
	}
	return b.addClass(ctx, inv, lease.Spec.NodeClassName)
}

func (b Builder) listInstances(ctx context.Context, inv map[string]any, role string, opts ...client.ListOption) error {
	list := &computev1alpha1.MacOSInstanceList{}
	if err := b.Reader.List(ctx, list, opts...); err != nil {
		return fmt.Errorf("listing %s: %w", role, err)
	}
	items := make([]any, 0, len(list.Items))
	for i := range list.Items {
		m, err := toMap(&list.Items[i])
		if err != nil {
			return err
		}
		items = append(items, m)
	}
	inv[role] = items
	return nil
}

// addImage reads the golden image a new instance boots from.
func (b Builder) addImage(ctx context.Context, inv map[string]any, name string) error {
	if name == "" {
		return nil
	}
	return b.get(ctx, client.ObjectKey{Name: name}, &fleetv1alpha1.MacOSImage{}, inv, "image")
}

func (b Builder) addClass(ctx context.Context, inv map[string]any, name string) error {
	if name == "" {
		return nil
	}
	return b.get(ctx, client.ObjectKey{Name: name}, &fleetv1alpha1.MacNodeClass{}, inv, "nodeClass")
}

// get reads one object into inv[role], after trim; a missing object leaves
// the role absent, which the rules treat as "not found".
func (b Builder) get(ctx context.Context, key client.ObjectKey, obj client.Object, inv map[string]any, role string, trim ...func()) error {
	r := b.Reader
	if b.Getter != nil {
		r = b.Getter
	}
	if err := r.Get(ctx, key, obj); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("getting %s %s: %w", role, key, err)
	}
	for _, t := range trim {
		t()
	}
	m, err := toMap(obj)
	if err != nil {
		return err
	}
	inv[role] = m
	return nil
}

// toMap converts a typed object to the map the rules read, without
// managedFields. They are not converted at all: they are most of many
// objects' metadata.
func toMap(obj runtime.Object) (map[string]any, error) {
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(withoutManagedFields(obj))
	if err != nil {
		return nil, fmt.Errorf("converting %T: %w", obj, err)
	}
	return policy.StripManagedFields(m), nil
}

// withoutManagedFields returns a shallow copy of a typed object with its
// managedFields cleared; obj itself is not changed. Anything else comes back
// as it is (an unstructured object's metadata is a map its copy would share).
func withoutManagedFields(obj runtime.Object) any {
	o, ok := obj.(metav1.Object)
	if _, unstructured := obj.(runtime.Unstructured); !ok || unstructured || len(o.GetManagedFields()) == 0 {
		return obj
	}
	v := reflect.ValueOf(obj)
	if v.Kind() != reflect.Pointer || v.Elem().Kind() != reflect.Struct {
		return obj
	}
	cp := reflect.New(v.Elem().Type())
	cp.Elem().Set(v.Elem())
	c, ok := cp.Interface().(metav1.Object)
	if !ok {
		return obj
	}
	c.SetManagedFields(nil)
	return c
}

// ToMap is toMap for callers that build inputs from typed objects.
func ToMap(obj runtime.Object) (map[string]any, error) { return toMap(obj) }

func str(m map[string]any, path ...string) string {
	for i, p := range path {
		v, ok := m[p]
		if !ok {
			return ""
		}
		if i == len(path)-1 {
			s, _ := v.(string)
			return s
		}
		if m, ok = v.(map[string]any); !ok {
			return ""
		}
	}
	return ""
}
