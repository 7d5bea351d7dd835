package host

import (
	"context"
	"encoding/json"
	"fmt"

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

// ReportFacts writes status.reported of the agent's own MacNode, and
// nothing else: a merge patch of that one field, so that it never races
// the operator's binding, slots or phase. Failing facts are reported all
// the same; the operator decides what they mean.
func ReportFacts(ctx context.Context, c client.Client, nodeName string, facts *fleetv1alpha1.ReportedFacts) error {
	patch, err := json.Marshal(map[string]any{"status": map[string]any{"reported": facts}})
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
