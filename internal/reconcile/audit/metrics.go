package audit

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	leasingv1alpha1 "github.com/boualleiguie/macrack-operator/api/leasing/v1alpha1"
	"github.com/boualleiguie/macrack-operator/internal/audit/denial"
)

// Reasons a record was dropped.
const (
	// reasonJournalFull: a journal was full of unexported records.
	reasonJournalFull = "journal-full"
	// reasonBufferFull: the denials' buffer was full.
	reasonBufferFull = "denial-buffer-full"
	// reasonUnencodable: a denial could not be made a CloudEvent.
	reasonUnencodable = "unencodable"
)

// Metrics are the export's: what went out, what failed, what was dropped,
// and, at each scrape, the backlog, its age and the billable time.
type Metrics struct {
	exported *prometheus.CounterVec
	failures prometheus.Counter
	dropped  *prometheus.CounterVec
	latency  prometheus.Histogram

	lagDesc, backlogDesc, billableDesc *prometheus.Desc
	collector                          *backlogCollector
	billed                             billed
}

// NewMetrics makes the export's metrics.
func NewMetrics() *Metrics {
	m := &Metrics{
		exported: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "macrack_audit_exported_records_total", Help: "Audit records a sink acknowledged, by kind.",
		}, []string{"kind"}),
		failures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "macrack_audit_publish_failures_total", Help: "Publishes the audit sink refused or did not answer; each is retried.",
		}),
		dropped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "macrack_audit_dropped_records_total", Help: "Audit records lost, by reason: a full journal, a full denials' buffer.",
		}, []string{"reason"}),
		latency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "macrack_audit_publish_duration_seconds", Help: "Time from publish to the sink's acknowledgement.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 4, 8),
		}),
		lagDesc: prometheus.NewDesc("macrack_audit_export_lag_seconds",
			"Age, on the operator's clock, of the oldest transition no sink has acknowledged; 0 when none waits.", nil, nil),
		backlogDesc: prometheus.NewDesc("macrack_audit_backlog_records",
			"Audit records waiting for the sink, by where they wait: in their objects' journals, or in the denials' buffer.", []string{"source"}, nil),
		billableDesc: prometheus.NewDesc("macrack_lease_billable_seconds_total",
			"Billable chassis time, by tenant: each lease from boundAt to releasedAt (or now).", []string{"tenant"}, nil),
		billed: billed{uids: map[types.UID]billedLease{}, tenants: map[string]float64{}},
	}
	for _, r := range []string{reasonJournalFull, reasonBufferFull, reasonUnencodable} {
		m.dropped.WithLabelValues(r)
	}
	return m
}

// Collectors are what the operator registers.
func (m *Metrics) Collectors() []prometheus.Collector {
	return []prometheus.Collector{m.exported, m.failures, m.dropped, m.latency, m}
}

// DropDenial counts a denial the buffer had no room for.
func (m *Metrics) DropDenial() { m.dropped.WithLabelValues(reasonBufferFull).Inc() }

func (m *Metrics) dropJournal(n int) {
	if n > 0 {
		m.dropped.WithLabelValues(reasonJournalFull).Add(float64(n))
	}
}

// DropJournal counts records a journal's writer had to drop.
func (m *Metrics) DropJournal(n int) {
	if m != nil {
		m.dropJournal(n)
	}
}

func (m *Metrics) published(kind string, d time.Duration) {
	m.exported.WithLabelValues(kind).Inc()
	if d > 0 {
		m.latency.Observe(d.Seconds())
	}
}

// Describe implements prometheus.Collector.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	ch <- m.lagDesc
	ch <- m.backlogDesc
	ch <- m.billableDesc
}

// Collect implements prometheus.Collector: the backlog from the cache.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	c := m.collector
	if c == nil {
		return // no exporter runs here, so nothing measures its backlog
	}
	lag, backlog, billable := c.collect(context.Background())
	ch <- prometheus.MustNewConstMetric(m.lagDesc, prometheus.GaugeValue, lag)
	ch <- prometheus.MustNewConstMetric(m.backlogDesc, prometheus.GaugeValue, backlog, "journal")
	ch <- prometheus.MustNewConstMetric(m.backlogDesc, prometheus.GaugeValue, float64(c.denials.Len()), "denials")
	for tenant, s := range billable {
		ch <- prometheus.MustNewConstMetric(m.billableDesc, prometheus.CounterValue, s, tenant)
	}
}

// backlogCollector reads the cache at each scrape.
type backlogCollector struct {
	client  client.Client
	clock   clock.PassiveClock
	kinds   []*kind
	denials *denial.Buffer
	billed  *billed
	// waiting is how many of an object's records its kind's exporter
	// knows no sink has acknowledged, and the time of the oldest.
	waiting func(*kind, client.Object) (int64, time.Time)
}

func (c *backlogCollector) collect(ctx context.Context) (lag, backlog float64, billable map[string]float64) {
	now := c.clock.Now()
	oldest := now
	billable = c.billed.totals()
	for _, k := range c.kinds {
		// Uncopied, as each scrape only reads them: a copy of every
		// object of the kind per scrape was a fleet's worth of heap.
		list := k.newList()
		if err := c.client.List(ctx, list, client.UnsafeDisableDeepCopy); err != nil {
			continue
		}
		for _, o := range objects(list) {
			n, first := c.waiting(k, o)
			backlog += float64(n)
			if n > 0 && first.Before(oldest) {
				oldest = first
			}
			if l, ok := o.(*leasingv1alpha1.MacNodeLease); ok && !c.billed.has(l.UID) {
				if s := billableSeconds(l, now); s > 0 {
					billable[l.Namespace] += s
				}
			}
		}
	}
	if backlog > 0 {
		lag = now.Sub(oldest).Seconds()
	}
	return lag, backlog, billable
}

// billableSeconds is a lease's bound time so far.
func billableSeconds(l *leasingv1alpha1.MacNodeLease, now time.Time) float64 {
	if l.Status.BoundAt == nil {
		return 0
	}
	end := now
	if l.Status.ReleasedAt != nil {
		end = l.Status.ReleasedAt.Time
	}
	return max(0, end.Sub(l.Status.BoundAt.Time).Seconds())
}

// billed keeps the billable time of the leases the exporter let go, so
// that the counter does not fall when they leave the cache.
type billed struct {
	mu      sync.Mutex
	uids    map[types.UID]billedLease
	tenants map[string]float64
}

type billedLease struct {
	tenant  string
	seconds float64
	at      time.Time
}

// billedMemory is how long a let-go lease's UID is remembered, so that the
// cache's last copy of it is not counted twice; then only its tenant's
// total is kept.
const billedMemory = time.Hour

func (b *billed) add(l *leasingv1alpha1.MacNodeLease, now time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.uids[l.UID]; ok {
		return
	}
	b.uids[l.UID] = billedLease{tenant: l.Namespace, seconds: billableSeconds(l, now), at: now}
	for uid, bl := range b.uids {
		if now.Sub(bl.at) > billedMemory {
			b.tenants[bl.tenant] += bl.seconds
			delete(b.uids, uid)
		}
	}
}

func (b *billed) has(uid types.UID) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	_, ok := b.uids[uid]
	return ok
}

func (b *billed) totals() map[string]float64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := map[string]float64{}
	for t, s := range b.tenants {
		out[t] = s
	}
	for _, bl := range b.uids {
		out[bl.tenant] += bl.seconds
	}
	return out
}
