// Package finalizer adds and removes one finalizer without locking the
// whole object. A merge patch locked on the resourceVersion loses to every
// write of the object, a status condition or a journal record included,
// though none of them touches the finalizers. The patches here are JSON
// patches that test the finalizers alone: adding one tests the list it
// extends, removing one tests the item at its index. Only a concurrent
// finalizer write fails the test, and the loser sees a Conflict, as it
// would have for a stale resourceVersion, and retries on a fresh read.
//
// Two writers adding the first finalizers of a new object would race: a
// JSON patch cannot append to a list that is absent, so the first add
// tests that there is none. A tenant's new lease and instance therefore
// come with the operator's finalizers, set by the mutating webhook in the
// create (internal/admission); the adds here are the fallback, for an
// object created without them.
package finalizer

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/boualleiguie/macrack-operator/internal/conflict"
)

// op is one JSON patch (RFC 6902) operation.
type op struct {
	Op    string `json:"op"`
	Path  string `json:"path"`
	Value any    `json:"value,omitempty"`
}

// testOp is a test operation; its value is written even when null, which
// tests that the path is absent.
type testOp struct {
	Op    string `json:"op"`
	Path  string `json:"path"`
	Value any    `json:"value"`
}

const path = "/metadata/finalizers"

// AddPatch is the JSON patch that appends name to finalizers, on condition
// that the stored list is still finalizers. Nil if name is already there.
func AddPatch(finalizers []string, name string) ([]byte, error) {
	if slices.Contains(finalizers, name) {
		return nil, nil
	}
	// The object must not be being deleted either: the API server refuses
	// a new finalizer then (a 422 of its own, not a failed test), and a
	// reader whose cache has not shown the deletion yet should see the
	// Conflict a resourceVersion lock gave it, and look again.
	alive := testOp{Op: "test", Path: "/metadata/deletionTimestamp", Value: nil}
	if len(finalizers) == 0 {
		// The API server drops an empty list: the field is absent, and a
		// test of null passes on an absent field only.
		return json.Marshal([]any{alive, testOp{Op: "test", Path: path, Value: nil}, op{Op: "add", Path: path, Value: []string{name}}})
	}
	return json.Marshal([]any{alive, testOp{Op: "test", Path: path, Value: finalizers}, op{Op: "add", Path: path + "/-", Value: name}})
}

// RemovePatch is the JSON patch that removes names from finalizers, in one
// write, on condition that each is still at the index it was read at. Nil
// if none of them is there.
func RemovePatch(finalizers []string, names ...string) ([]byte, error) {
	var at []int
	for i, f := range finalizers {
		if slices.Contains(names, f) {
			at = append(at, i)
		}
	}
	if len(at) == 0 {
		return nil, nil
	}
	var ops []any
	for _, i := range at {
		ops = append(ops, testOp{Op: "test", Path: fmt.Sprintf("%s/%d", path, i), Value: finalizers[i]})
	}
	// The highest index first: each removal leaves the lower ones where
	// they were tested.
	for _, i := range slices.Backward(at) {
		ops = append(ops, op{Op: "remove", Path: fmt.Sprintf("%s/%d", path, i)})
	}
	return json.Marshal(ops)
}

// Add puts name on obj's finalizers, unless they hold it already, and
// updates obj from the server's answer. A concurrent finalizer write is a
// Conflict (apierrors.IsConflict).
func Add(ctx context.Context, c client.Writer, obj client.Object, name string, opts ...client.PatchOption) error {
	p, err := AddPatch(obj.GetFinalizers(), name)
	if err != nil || p == nil {
		return err
	}
	return write(ctx, c, obj, p, opts)
}

// Remove takes names off obj's finalizers, those they hold, in one write,
// and updates obj from the server's answer (which may be that it is gone:
// NotFound). A concurrent finalizer write is a Conflict
// (apierrors.IsConflict).
func Remove(ctx context.Context, c client.Writer, obj client.Object, names ...string) error {
	p, err := RemovePatch(obj.GetFinalizers(), names...)
	if err != nil || p == nil {
		return err
	}
	return write(ctx, c, obj, p, nil)
}

func write(ctx context.Context, c client.Writer, obj client.Object, p []byte, opts []client.PatchOption) error {
	err := c.Patch(ctx, obj, client.RawPatch(types.JSONPatchType, p), opts...)
	if conflict.Untested(err) {
		return apierrors.NewConflict(schema.GroupResource{Resource: kind(obj)}, obj.GetName(),
			fmt.Errorf("the finalizers changed since they were read: %w", err))
	}
	return err
}

// kind names obj's kind for a Conflict's message: its GVK's, or its Go
// type's (a typed object read through the client carries no GVK).
func kind(obj client.Object) string {
	if k := obj.GetObjectKind().GroupVersionKind().Kind; k != "" {
		return k
	}
	return reflect.TypeOf(obj).Elem().Name()
}
