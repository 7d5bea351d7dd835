package node

import (
	"github.com/prometheus/client_golang/prometheus"

	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
)

// Metrics are the quarantine loop's: how often each chassis was
// quarantined, which ones wait for a person, and how long quarantines
// last.
type Metrics struct {
	quarantines    *prometheus.CounterVec
	needsAttention *prometheus.GaugeVec
	duration       prometheus.Histogram
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
			Help: "1 for a chassis quarantined more than 3 times in 24 hours, which waits for a person; 0 for the others.",
		}, []string{"serial"}),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "macrack_chassis_quarantine_duration_seconds",
			Help: "Time in quarantine of the chassis that recovered, from quarantinedAt to recoveredAt (the operator's clock).",
			// Stopping the VMs, a reboot and a probe: minutes, hours when
			// a Mac is slow to come back.
			Buckets: []float64{30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 14400, 43200, 86400},
		}),
	}
}

// Collectors are the metrics to register.
func (m *Metrics) Collectors() []prometheus.Collector {
	return []prometheus.Collector{m.quarantines, m.needsAttention, m.duration}
}

// observe records a MacNode's written status: a quarantine this pass
// began (started) or ended (recovered). Every chassis written has its
// series, at zero before its first quarantine, so that increase() sees
// that one too.
func (m *Metrics) observe(mn *fleetv1alpha1.MacNode, started, recovered bool) {
	if m == nil {
		return
	}
	serial := mn.Spec.Serial
	quarantines := m.quarantines.WithLabelValues(serial)
	if started {
		quarantines.Inc()
	}
	q := mn.Status.Quarantine
	if recovered && q != nil && q.RecoveredAt != nil {
		m.duration.Observe(max(q.RecoveredAt.Sub(q.QuarantinedAt.Time).Seconds(), 0))
	}
	if q.Active() && q.NeedsAttention && !mn.Spec.Retired {
		m.needsAttention.WithLabelValues(serial).Set(1)
	} else {
		m.needsAttention.WithLabelValues(serial).Set(0)
	}
}
