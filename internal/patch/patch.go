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
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/boualleiguie/macrack-operator/internal/conflict"
)

// Helper remembers an object as it was read.
type Helper struct {
	client client.Client
	before client.Object
	// lockStatus makes the next status patch carry the resourceVersion read.
	lockStatus bool
	// lockOn, if set, is the one member of the status, as read, that the
	// next status patch tests in place of the resourceVersion.
	lockOn *lockOn
}

// lockOn is a JSON pointer into the object, and the value it held as read.
type lockOn struct {
	path  string
	value any
}

// LockStatus makes the next status patch fail on a stale read, rather than
// apply over a newer status: a status that numbers audit records must never
// number two transitions alike. A conflict also holds back the metadata
// patch, so that the whole pass is retried from a fresh read.
func (h *Helper) LockStatus() { h.lockStatus = true }

// LockStatusOn locks the next status patch, as LockStatus does, but on the
// member at path alone (a JSON pointer such as /status/audit/nextSequence),
// which must still hold value (nil: that it is absent): the patch is a JSON
// patch that tests it, then sets each member of the status that changed.
// A journal's writer locks its sequence so: a stale pass cannot number a
// transition twice, and the writes of the status's other fields, by their
// own writers, no longer refuse it as they move the resourceVersion. A
// failed test is a Conflict. A status that was empty when read (a JSON
// patch has nothing to set members below) is locked on the resourceVersion.
func (h *Helper) LockStatusOn(path string, value any) { h.lockOn = &lockOn{path: path, value: value} }

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
	statusBefore, statusAfter := before["status"], after["status"]
	statusChanged := !equality.Semantic.DeepEqual(statusBefore, statusAfter)
	delete(before, "status")
	delete(after, "status")
	restChanged := !equality.Semantic.DeepEqual(before, after)

	// The status patch refreshes obj from the server, metadata and spec
	// included; keep what this reconcile wants of them.
	desired := obj.DeepCopyObject().(client.Object)
	if statusChanged {
		p, err := h.statusPatch(statusBefore, statusAfter)
		if err != nil {
			return err
		}
		if err := h.client.Status().Patch(ctx, obj, p); err != nil {
			if h.lockOn != nil && conflict.Untested(err) {
				err = apierrors.NewConflict(schema.GroupResource{Resource: reflect.TypeOf(obj).Elem().Name()}, obj.GetName(),
					fmt.Errorf("%s changed since it was read: %w", h.lockOn.path, err))
			}
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
	h.lockOn = nil
	return nil
}

// statusPatch is the status write from before to after: a merge patch,
// locked on the resourceVersion if asked, or a JSON patch that tests the
// member LockStatusOn named.
func (h *Helper) statusPatch(before, after any) (client.Patch, error) {
	was, _ := before.(map[string]any)
	now, _ := after.(map[string]any)
	switch {
	case h.lockOn != nil && len(was) > 0 && now != nil:
		return TestThenSet(h.lockOn.path, h.lockOn.value, "/status", was, now)
	case h.lockOn != nil || h.lockStatus:
		return client.MergeFromWithOptions(h.before, client.MergeFromWithOptimisticLock{}), nil
	default:
		return client.MergeFrom(h.before), nil
	}
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
