// Package reconcilers proves the reconcilers' own layer: no webhook and no
// ValidatingAdmissionPolicy is installed, illegal objects go straight to
// storage, and the controllers, asking the policies, refuse to act on them.
package reconcilers

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2/event"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/boualleiguie/macrack-operator/internal/audit/event"
	"github.com/boualleiguie/macrack-operator/test/envtest/harness"
)

var (
	// sink is the audit exporter's, where the controllers' denial records
	// land.
	sink  = &memorySink{}
	env   *harness.Env
	op    *harness.Operator
	admin client.Client
	ctx   = context.Background()
)

func TestReconcilers(t *testing.T) {
	RegisterFailHandler(Fail)
	SetDefaultEventuallyTimeout(20 * time.Second)
	SetDefaultEventuallyPollingInterval(50 * time.Millisecond)
	RunSpecs(t, "Reconcilers without admission suite")
}

var _ = BeforeSuite(func() {
	var err error
	env, err = harness.Start()
	Expect(err).NotTo(HaveOccurred())
	admin = env.Client
	op, err = env.StartOperator(harness.OperatorOptions{
		Start: time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC), MaxConcurrentReconciles: 2,
		AuditSink: sink, NoAdmission: true,
		Log: zap.New(zap.WriteTo(GinkgoWriter), zap.UseDevMode(true)),
	})
	Expect(err).NotTo(HaveOccurred())
})

var _ = AfterSuite(func() {
	if op != nil {
		Expect(op.Stop()).To(Succeed())
	}
	Expect(env.Stop()).To(Succeed())
})

// memorySink keeps the records the audit exporter publishes.
type memorySink struct {
	mu     sync.Mutex
	events []cloudevents.Event
}

func (m *memorySink) Publish(_ context.Context, ev cloudevents.Event) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.events = append(m.events, ev)
	return nil
}

func (m *memorySink) Close() error { return nil }

// denialRules are the rules of the denial records about the object with
// this subject (name, or namespace/name), in the order published.
func (m *memorySink) denialRules(subject string) []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []string
	for _, ev := range m.events {
		if !strings.HasPrefix(ev.ID(), "denial/") || ev.Subject() != subject {
			continue
		}
		var d event.Data
		if err := json.Unmarshal(ev.Data(), &d); err == nil {
			out = append(out, d.Attributes["rule"])
		}
	}
	return out
}
