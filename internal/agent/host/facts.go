package host

import (
	"context"

	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
	"github.com/boualleiguie/macrack-operator/internal/agent/report"
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
// nothing else, as the agent's reporter does (report.Write): for tests and
// tools that speak as an agent.
func ReportFacts(ctx context.Context, c client.Client, nodeName string, facts *fleetv1alpha1.ReportedFacts) error {
	return report.Write(ctx, c, nodeName, facts)
}
