package policy

import "github.com/prometheus/client_golang/prometheus"

// metrics are the engine's own; the caller registers them (Collectors), so
// that no global registry is touched.
type metrics struct {
	decisions     *prometheus.CounterVec
	disagreements *prometheus.CounterVec
	errors        *prometheus.CounterVec
	duration      prometheus.Histogram
}

func newMetrics() *metrics {
	return &metrics{
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "macrack_policy_rule_decisions_total",
			Help: "Rule decisions by rule and result (allow, deny, error, disagreement).",
		}, []string{"rule", "result"}),
		disagreements: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "macrack_policy_disagreements_total",
			Help: "Requests denied because a rule's Rego and CEL twins answered differently.",
		}, []string{"rule"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "macrack_policy_engine_errors_total",
			Help: "Engine errors and deadlines, by rule and engine; each denies with policy.error.",
		}, []string{"rule", "engine"}),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "macrack_policy_decide_duration_seconds",
			Help:    "Time to decide one request, every applicable rule and both engines included.",
			Buckets: []float64{10e-6, 25e-6, 50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 5e-3, 25e-3, 0.1, 1},
		}),
	}
}

// Collectors returns the engine's metrics for registration.
func (e *Engine) Collectors() []prometheus.Collector {
	return []prometheus.Collector{e.metrics.decisions, e.metrics.disagreements, e.metrics.errors, e.metrics.duration}
}
