package patch

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// TestThenSet is a JSON patch that tests that the member at testPath still
// holds value (nil: that it is absent), then sets each member below path
// that changed from was to now, as a merge patch would (appendSetOps). A
// failed test is the API server's 422, which conflict.Untested names.
func TestThenSet(testPath string, value any, path string, was, now map[string]any) (client.Patch, error) {
	ops := appendSetOps([]any{jsonOp{Op: "test", Path: testPath, Value: value}}, path, was, now)
	body, err := json.Marshal(ops)
	if err != nil {
		return nil, fmt.Errorf("encoding the JSON patch of %s: %w", path, err)
	}
	return client.RawPatch(types.JSONPatchType, body), nil
}

// jsonOp is one JSON patch (RFC 6902) operation. A test's value is written
// even when null, which tests that the member is absent.
type jsonOp struct {
	Op    string `json:"op"`
	Path  string `json:"path"`
	Value any    `json:"value"`
}

// removeOp is a remove operation, which takes no value.
type removeOp struct {
	Op   string `json:"op"`
	Path string `json:"path"`
}

// appendSetOps appends the operations that turn was into now below path,
// as a merge patch would: a member of both that is an object in both is
// descended into, so that its other members (another writer's) are left
// as stored; any other member that changed is set whole ("add" replaces a
// member that exists), lists included, and one that went is removed.
func appendSetOps(ops []any, path string, was, now map[string]any) []any {
	keys := make([]string, 0, len(was)+len(now))
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
		at := path + "/" + escape(k)
		v, kept := now[k]
		old, had := was[k]
		switch {
		case !kept:
			ops = append(ops, removeOp{Op: "remove", Path: at})
		case had && equality.Semantic.DeepEqual(old, v):
		default:
			om, oldIsMap := old.(map[string]any)
			nm, newIsMap := v.(map[string]any)
			if had && oldIsMap && newIsMap {
				ops = appendSetOps(ops, at, om, nm)
				continue
			}
			ops = append(ops, jsonOp{Op: "add", Path: at, Value: v})
		}
	}
	return ops
}

// escape makes k one JSON pointer token (RFC 6901).
func escape(k string) string {
	return strings.NewReplacer("~", "~0", "/", "~1").Replace(k)
}
