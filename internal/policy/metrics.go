package policy

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// The engines, as macrack_policy_decision_duration_seconds labels them.
const (
	engineRego = "rego"
	engineCEL  = "cel"
)

// metrics are the engine's own; the caller registers them (Collectors), so
// that no global registry is touched.
type metrics struct {
	decisions     *prometheus.CounterVec
	disagreements *prometheus.CounterVec
	errors        *prometheus.CounterVec
	denials       *prometheus.CounterVec
	duration      prometheus.Histogram
	ruleDuration  *prometheus.HistogramVec
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
		denials: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "macrack_policy_denials_total",
			Help: "Denying rule decisions, by rule and violation code (the rule's own, policy.error or policy.disagreement), whoever asked: webhooks and reconcilers.",
		}, []string{"rule", "code"}),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "macrack_policy_decide_duration_seconds",
			Help:    "Time to decide one request, every applicable rule and both engines included.",
			Buckets: []float64{10e-6, 25e-6, 50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 5e-3, 25e-3, 0.1, 1},
		}),
		ruleDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "macrack_policy_decision_duration_seconds",
			Help:    "Time one engine (rego, cel) took to evaluate one rule for one request.",
			Buckets: []float64{5e-6, 10e-6, 25e-6, 50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 5e-3, 25e-3, 0.1, 1},
		}, []string{"rule", "engine"}),
	}
}

// ruleMetrics are one rule's series, resolved once at Load: the hot path
// looks no label up, and every series exists, at zero, before its first
// event, so that increase() sees the first disagreement or error too.
type ruleMetrics struct {
	rego, cel prometheus.Observer
}

// forRule resolves r's series.
func (m *metrics) forRule(r *Rule) ruleMetrics {
	rm := ruleMetrics{rego: m.ruleDuration.WithLabelValues(r.ID, engineRego)}
	m.errors.WithLabelValues(r.ID, engineRego)
	m.errors.WithLabelValues(r.ID, "deadline")
	if r.HasCEL() {
		rm.cel = m.ruleDuration.WithLabelValues(r.ID, engineCEL)
		m.errors.WithLabelValues(r.ID, engineCEL)
		m.disagreements.WithLabelValues(r.ID)
	}
	return rm
}

// observe records the time since start on o, if any.
func observe(o prometheus.Observer, start time.Time) {
	if o != nil {
		o.Observe(time.Since(start).Seconds())
	}
}

// countDenials counts each code among the violations of one rule's
// decision once.
func (m *metrics) countDenials(rule string, vs []Violation) {
	for i, v := range vs {
		seen := false
		for _, w := range vs[:i] {
			seen = seen || w.Code == v.Code
		}
		if !seen {
			m.denials.WithLabelValues(rule, v.Code).Inc()
		}
	}
}

// Collectors returns the engine's metrics for registration.
func (e *Engine) Collectors() []prometheus.Collector {
	return []prometheus.Collector{e.metrics.decisions, e.metrics.disagreements, e.metrics.errors, e.metrics.duration,
		e.metrics.denials, e.metrics.ruleDuration}
}
