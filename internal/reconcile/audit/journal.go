package audit

import (
	"encoding/json"
	"fmt"
	"slices"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
)

// journalPatch writes an observed kind's journal, from before to after,
// locked on the journal's sequence alone: a JSON patch that tests
// status.audit.nextSequence, then sets the journal's fields that changed.
// A second pass on a stale read fails the test (a 422, which the caller
// sees as a Conflict) rather than number a transition twice; a write of
// any other field of the object, a condition or the agent's runtime, no
// longer refuses it. The cursor, exportedSequence, is not sent.
//
// A journal not yet started (nextSequence 0) is written whole, on
// condition that there is none (a test of status.audit). On an object with
// no status at all (emptyStatus), where a JSON patch has nothing to add
// the journal below, it is nil: the caller locks that first write on the
// resourceVersion.
func journalPatch(before, after *fleetv1alpha1.AuditJournal, emptyStatus bool) (client.Patch, error) {
	if after == nil || emptyStatus {
		return nil, nil
	}
	if before == nil || before.NextSequence == 0 {
		body, err := json.Marshal([]map[string]any{{"op": "test", "path": "/status/audit", "value": nil}, {"op": "add", "path": "/status/audit", "value": after}})
		if err != nil {
			return nil, fmt.Errorf("encoding the journal patch: %w", err)
		}
		return client.RawPatch(types.JSONPatchType, body), nil
	}
	was, err := fields(before)
	if err != nil {
		return nil, err
	}
	now, err := fields(after)
	if err != nil {
		return nil, err
	}
	type op struct {
		Op    string `json:"op"`
		Path  string `json:"path"`
		Value any    `json:"value,omitempty"`
	}
	ops := []op{{Op: "test", Path: "/status/audit/nextSequence", Value: before.NextSequence}}
	keys := make([]string, 0, len(now)+len(was))
	for k := range now {
		keys = append(keys, k)
	}
	for k := range was {
		if _, ok := now[k]; !ok {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	for _, k := range keys {
		if k == "exportedSequence" || equality.Semantic.DeepEqual(was[k], now[k]) {
			continue
		}
		if v, ok := now[k]; ok {
			ops = append(ops, op{Op: "add", Path: "/status/audit/" + k, Value: v}) // add sets a member that exists
		} else {
			ops = append(ops, op{Op: "remove", Path: "/status/audit/" + k})
		}
	}
	body, err := json.Marshal(ops)
	if err != nil {
		return nil, fmt.Errorf("encoding the journal patch: %w", err)
	}
	return client.RawPatch(types.JSONPatchType, body), nil
}

// fields is j as JSON's top-level members.
func fields(j *fleetv1alpha1.AuditJournal) (map[string]json.RawMessage, error) {
	b, err := json.Marshal(j)
	if err != nil {
		return nil, fmt.Errorf("encoding the journal: %w", err)
	}
	out := map[string]json.RawMessage{}
	if err := json.Unmarshal(b, &out); err != nil {
		return nil, fmt.Errorf("decoding the journal: %w", err)
	}
	return out, nil
}

// emptyStatus reports whether obj, as read, has no status: a new object
// whose status nobody wrote, which the API server stores without one.
func emptyStatus(obj client.Object) bool {
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return false
	}
	st, ok := u["status"].(map[string]any)
	return !ok || len(st) == 0
}
