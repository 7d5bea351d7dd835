package host

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
)

// FactsSource gathers the chassis' hardware and software facts. On a Mac it
// reads them from the system; the sim reports configured ones.
type FactsSource interface {
	Facts(ctx context.Context) (*fleetv1alpha1.ReportedFacts, error)
}

// StaticFacts reports fixed facts: the sim's chassis, and tests.
type StaticFacts struct{ Reported *fleetv1alpha1.ReportedFacts }

// Facts implements FactsSource.
func (s StaticFacts) Facts(context.Context) (*fleetv1alpha1.ReportedFacts, error) {
	return s.Reported.DeepCopy(), nil
}

// otherWriters are the status.reported fields that other loops of the
// agent write, each its own: a facts report that leaves one out leaves it
// as it is.
var otherWriters = map[string]bool{"inventory": true, "images": true, "imageCache": true, "imagePulls": true, "wipes": true}

// ReportFacts writes status.reported of the agent's own MacNode, and
// nothing else: a merge patch of that one field, so that it never races
// the operator's binding, slots or phase. Failing facts are reported all
// the same; the operator decides what they mean. Every fact is named: one
// facts leaves unset (unknown, say SIP after a failed read) is cleared,
// rather than an older value surviving the merge. A quota in facts
// replaces the one reported before whole (QuotaPatch).
func ReportFacts(ctx context.Context, c client.Client, nodeName string, facts *fleetv1alpha1.ReportedFacts) error {
	if facts == nil {
		facts = &fleetv1alpha1.ReportedFacts{}
	}
	reported, err := wholePatch(facts, otherWriters)
	if err != nil {
		return err
	}
	if facts.Quota != nil {
		if reported["quota"], err = QuotaPatch(facts.Quota); err != nil {
			return err
		}
	}
	patch, err := json.Marshal(map[string]any{"status": map[string]any{"reported": reported}})
	if err != nil {
		return err
	}
	mn := &fleetv1alpha1.MacNode{}
	mn.Name = nodeName
	if err := c.Status().Patch(ctx, mn, client.RawPatch(types.MergePatchType, patch)); err != nil {
		return fmt.Errorf("reporting facts on MacNode %s: %w", nodeName, err)
	}
	return nil
}

// QuotaPatch is q as a merge patch's status.reported.quota that replaces
// the quota reported before whole: every field of QuotaReport is named,
// those q leaves out as null. Merged, a field left out would survive from
// an older report: a stale probe of an earlier boot, an old error code.
func QuotaPatch(q *fleetv1alpha1.QuotaReport) (map[string]any, error) {
	return wholePatch(q, nil)
}

// wholePatch is v, a struct pointer, as a merge patch that names every
// field of its type, the ones v leaves out as null, but those in keep,
// which it names only when v sets them.
func wholePatch[T any](v *T, keep map[string]bool) (map[string]any, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	out := map[string]any{}
	if err := json.Unmarshal(b, &out); err != nil {
		return nil, err
	}
	t := reflect.TypeFor[T]()
	for i := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		if _, ok := out[name]; !ok && name != "" && name != "-" && !keep[name] {
			out[name] = nil
		}
	}
	return out, nil
}
