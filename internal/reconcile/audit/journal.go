package audit

import (
	"encoding/json"
	"fmt"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
	"github.com/boualleiguie/macrack-operator/internal/patch"
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
	delete(was, "exportedSequence")
	delete(now, "exportedSequence")
	return patch.TestThenSet("/status/audit/nextSequence", before.NextSequence, "/status/audit", was, now)
}

// fields is j as JSON's members.
func fields(j *fleetv1alpha1.AuditJournal) (map[string]any, error) {
	out, err := runtime.DefaultUnstructuredConverter.ToUnstructured(j)
	if err != nil {
		return nil, fmt.Errorf("converting the journal: %w", err)
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
