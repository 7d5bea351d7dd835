// Package patch writes a reconciled object back once, at the end of a
// Reconcile, and only what changed: the status through the status
// subresource, then metadata and spec. Status goes first, so that a
// finalizer removal (which may delete the object) never loses it; a status
// write that fails holds the metadata write back, so that an audit
// finalizer never goes without the record its pass carried.
package patch

import (
	"context"
	"fmt"
	"reflect"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Helper remembers an object as it was read.
type Helper struct {
	client client.Client
	before client.Object
	// lockStatus makes the next status patch carry the resourceVersion read.
	lockStatus bool
}

// LockStatus makes the next status patch fail on a stale read, rather than
// apply over a newer status: a status that numbers audit records must never
// number two transitions alike. A conflict also holds back the metadata
// patch, so that the whole pass is retried from a fresh read.
func (h *Helper) LockStatus() { h.lockStatus = true }

// NewHelper snapshots obj.
func NewHelper(obj client.Object, c client.Client) *Helper {
	return &Helper{client: c, before: obj.DeepCopyObject().(client.Object)}
}

// Patch writes the differences between the snapshot and obj.
func (h *Helper) Patch(ctx context.Context, obj client.Object) error {
	// A steady pass changes nothing: the typed comparison says so without
	// converting either object (which boxes every list item). It is
	// stricter than the semantic one below (nil is not empty), so whatever
	// it calls unchanged is.
	if reflect.DeepEqual(h.before, obj) {
		return nil
	}
	before, err := runtime.DefaultUnstructuredConverter.ToUnstructured(h.before)
	if err != nil {
		return fmt.Errorf("converting snapshot: %w", err)
	}
	after, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return fmt.Errorf("converting object: %w", err)
	}
	statusChanged := !equality.Semantic.DeepEqual(before["status"], after["status"])
	delete(before, "status")
	delete(after, "status")
	restChanged := !equality.Semantic.DeepEqual(before, after)

	// The status patch refreshes obj from the server, metadata and spec
	// included; keep what this reconcile wants of them.
	desired := obj.DeepCopyObject().(client.Object)
	if statusChanged {
		p := client.MergeFrom(h.before)
		if h.lockStatus {
			p = client.MergeFromWithOptions(h.before, client.MergeFromWithOptimisticLock{})
		}
		if err := h.client.Status().Patch(ctx, obj, p); err != nil {
			// A status write that failed (a conflict, or a refusal, which is
			// the operator's bug) holds back the metadata write: removing a
			// finalizer now would let the object go without the records
			// this pass carried in its status. The pass is retried, with
			// backoff; a refusal stalls the object, and its namespace,
			// visibly (StatusWriteRefused) rather than lose a record.
			return fmt.Errorf("patching status: %w", err)
		}
	}
	if restChanged {
		// Diff metadata and spec from a snapshot that carries the status now
		// stored, so that only they go.
		base := h.before.DeepCopyObject().(client.Object)
		if statusChanged {
			base = withStatusOf(base, obj)
			reflect.ValueOf(obj).Elem().Set(reflect.ValueOf(withStatusOf(desired, obj)).Elem())
		}
		if err := h.client.Patch(ctx, obj, client.MergeFrom(base)); err != nil {
			return fmt.Errorf("patching metadata and spec: %w", err)
		}
	}
	h.before = obj.DeepCopyObject().(client.Object)
	h.lockStatus = false
	return nil
}

// withStatusOf returns base with obj's status and resourceVersion.
func withStatusOf(base, obj client.Object) client.Object {
	b, err := runtime.DefaultUnstructuredConverter.ToUnstructured(base)
	if err != nil {
		return base
	}
	o, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return base
	}
	b["status"] = o["status"]
	out := base.DeepCopyObject().(client.Object)
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(b, out); err != nil {
		return base
	}
	out.SetResourceVersion(obj.GetResourceVersion())
	return out
}
