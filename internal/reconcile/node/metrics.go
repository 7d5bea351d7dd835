package node

import (
	"github.com/prometheus/client_golang/prometheus"

	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
)

// Metrics are the quarantine loop's: how often each chassis was
// quarantined, and which ones wait for a person.
type Metrics struct {
	quarantines    *prometheus.CounterVec
	needsAttention *prometheus.GaugeVec
}

// NewMetrics returns the node controller's metrics, unregistered.
func NewMetrics() *Metrics {
	return &Metrics{
		quarantines: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "macrack_chassis_quarantines_total",
			Help: "Quarantines begun, by chassis serial: the kernel VM quota stuck.",
		}, []string{"serial"}),
		needsAttention: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "macrack_chassis_needs_attention",
			Help: "1 for a chassis quarantined more than 3 times in 24 hours, which waits for a person.",
		}, []string{"serial"}),
	}
}

// Collectors are the metrics to register.
func (m *Metrics) Collectors() []prometheus.Collector {
	return []prometheus.Collector{m.quarantines, m.needsAttention}
}

// observe records a MacNode's written status.
func (m *Metrics) observe(mn *fleetv1alpha1.MacNode, started bool) {
	if m == nil {
		return
	}
	serial := mn.Spec.Serial
	if started {
		m.quarantines.WithLabelValues(serial).Inc()
	}
	if q := mn.Status.Quarantine; q.Active() && q.NeedsAttention && !mn.Spec.Retired {
		m.needsAttention.WithLabelValues(serial).Set(1)
	} else {
		m.needsAttention.DeleteLabelValues(serial)
	}
}
