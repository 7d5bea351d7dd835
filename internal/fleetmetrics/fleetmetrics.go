// Package fleetmetrics exports, at scrape time, what the operator's cache
// holds of the fleet: chassis by phase and class, leases by phase, and the
// pull counters the host agents report in their MacNodes. Each collector
// lists from the cache, without copying, on every scrape; it keeps nothing
// between scrapes and asks nothing of the API server.
//
// Every replica of the operator exports the same values, leader or not:
// aggregate across replicas with max, not sum.
package fleetmetrics

import (
	"context"
	"sort"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
	leasingv1alpha1 "github.com/boualleiguie/macrack-operator/api/leasing/v1alpha1"
)

// listTimeout bounds one scrape's list: a cache that is not synced yet
// makes the scrape go without the collector's series, rather than hang.
const listTimeout = 5 * time.Second

// ChassisPhases are MacNodePhase's enum, in the order of a chassis' life.
var ChassisPhases = []fleetv1alpha1.MacNodePhase{
	fleetv1alpha1.MacNodePending, fleetv1alpha1.MacNodeEnrolled, fleetv1alpha1.MacNodeReady, fleetv1alpha1.MacNodeLeased,
	fleetv1alpha1.MacNodeQuarantined, fleetv1alpha1.MacNodeRebooting, fleetv1alpha1.MacNodeRetired,
}

// LeasePhases are MacNodeLeasePhase's enum.
var LeasePhases = []leasingv1alpha1.MacNodeLeasePhase{
	leasingv1alpha1.LeasePending, leasingv1alpha1.LeaseBound, leasingv1alpha1.LeaseHeld, leasingv1alpha1.LeaseReleased,
}

var (
	chassisDesc = prometheus.NewDesc("macrack_chassis",
		"Chassis (MacNodes) by phase and class (spec.nodeClassName), from the operator's cache. Every phase of every class is present, at 0 when no chassis is in it.",
		[]string{"phase", "class"}, nil)
	leasesDesc = prometheus.NewDesc("macrack_leases",
		"MacNodeLeases by phase, from the operator's cache. Every phase is present, at 0 when no lease is in it.",
		[]string{"phase"}, nil)
	pullBytesDesc = prometheus.NewDesc("macrack_image_pull_bytes_total",
		"Compressed bytes the host agents fetched from registries, by golden (MacOSImage), retried and failed pulls included: the sum over chassis of status.reported.imagePulls[].bytes.",
		[]string{"image"}, nil)
	pullDurationDesc = prometheus.NewDesc("macrack_image_pull_duration_seconds",
		"Completed pulls of a golden and the time they took, by the agents' clocks, summed over chassis from status.reported.imagePulls: _count is the pulls, _sum their seconds. Agents report no buckets: divide the rates for a mean.",
		[]string{"image"}, nil)
	cacheHitsDesc = prometheus.NewDesc("macrack_image_cache_hits_total",
		"Instance disks cloned from a golden already in their chassis' cache, that waited for no pull: the sum over chassis of status.reported.imagePulls[].cacheHits.",
		[]string{"image"}, nil)
)

// Collectors are the fleet's collectors over reader, the manager's cache.
func Collectors(reader client.Reader, log logr.Logger) []prometheus.Collector {
	return []prometheus.Collector{
		&Chassis{Reader: reader, Log: log},
		&Leases{Reader: reader, Log: log},
		&ImagePulls{Reader: reader, Log: log},
	}
}

func list(r client.Reader, l client.ObjectList) error {
	ctx, cancel := context.WithTimeout(context.Background(), listTimeout)
	defer cancel()
	return r.List(ctx, l, client.UnsafeDisableDeepCopy)
}

// Chassis exports macrack_chassis.
type Chassis struct {
	Reader client.Reader
	Log    logr.Logger
}

// Describe implements prometheus.Collector.
func (c *Chassis) Describe(ch chan<- *prometheus.Desc) { ch <- chassisDesc }

// Collect implements prometheus.Collector.
func (c *Chassis) Collect(ch chan<- prometheus.Metric) {
	nodes := &fleetv1alpha1.MacNodeList{}
	classes := &fleetv1alpha1.MacNodeClassList{}
	for _, l := range []client.ObjectList{nodes, classes} {
		if err := list(c.Reader, l); err != nil {
			c.Log.Error(err, "Listing from the cache failed; the scrape goes without macrack_chassis")
			return
		}
	}
	counts := map[string]map[fleetv1alpha1.MacNodePhase]int{}
	for _, cl := range classes.Items {
		counts[cl.Name] = map[fleetv1alpha1.MacNodePhase]int{}
	}
	for _, mn := range nodes.Items {
		byPhase := counts[mn.Spec.NodeClassName]
		if byPhase == nil {
			// A chassis of a class that does not exist still counts.
			byPhase = map[fleetv1alpha1.MacNodePhase]int{}
			counts[mn.Spec.NodeClassName] = byPhase
		}
		phase := mn.Status.Phase
		if phase == "" {
			phase = fleetv1alpha1.MacNodePending
		}
		byPhase[phase]++
	}
	for _, class := range sortedKeys(counts) {
		for _, phase := range withOthers(ChassisPhases, counts[class]) {
			ch <- prometheus.MustNewConstMetric(chassisDesc, prometheus.GaugeValue, float64(counts[class][phase]), string(phase), class)
		}
	}
}

// Leases exports macrack_leases.
type Leases struct {
	Reader client.Reader
	Log    logr.Logger
}

// Describe implements prometheus.Collector.
func (c *Leases) Describe(ch chan<- *prometheus.Desc) { ch <- leasesDesc }

// Collect implements prometheus.Collector.
func (c *Leases) Collect(ch chan<- prometheus.Metric) {
	leases := &leasingv1alpha1.MacNodeLeaseList{}
	if err := list(c.Reader, leases); err != nil {
		c.Log.Error(err, "Listing from the cache failed; the scrape goes without macrack_leases")
		return
	}
	counts := map[leasingv1alpha1.MacNodeLeasePhase]int{}
	for _, l := range leases.Items {
		phase := l.Status.Phase
		if phase == "" {
			phase = leasingv1alpha1.LeasePending
		}
		counts[phase]++
	}
	for _, phase := range withOthers(LeasePhases, counts) {
		ch <- prometheus.MustNewConstMetric(leasesDesc, prometheus.GaugeValue, float64(counts[phase]), string(phase))
	}
}

// ImagePulls exports the agents' pull counters, summed over chassis:
// macrack_image_pull_bytes_total, macrack_image_pull_duration_seconds and
// macrack_image_cache_hits_total. Each agent's counters only grow, across
// its restarts too, so the sums are counters; a chassis deleted, or a
// golden an agent forgot past its report's bound, lowers a sum, which
// rate() reads as a reset.
type ImagePulls struct {
	Reader client.Reader
	Log    logr.Logger
}

// Describe implements prometheus.Collector.
func (c *ImagePulls) Describe(ch chan<- *prometheus.Desc) {
	ch <- pullBytesDesc
	ch <- pullDurationDesc
	ch <- cacheHitsDesc
}

// Collect implements prometheus.Collector.
func (c *ImagePulls) Collect(ch chan<- prometheus.Metric) {
	nodes := &fleetv1alpha1.MacNodeList{}
	if err := list(c.Reader, nodes); err != nil {
		c.Log.Error(err, "Listing from the cache failed; the scrape goes without the image pull counters")
		return
	}
	sums := map[string]*fleetv1alpha1.ImagePullCounters{}
	for _, mn := range nodes.Items {
		if mn.Status.Reported == nil {
			continue
		}
		for _, p := range mn.Status.Reported.ImagePulls {
			s := sums[p.Name]
			if s == nil {
				s = &fleetv1alpha1.ImagePullCounters{Name: p.Name}
				sums[p.Name] = s
			}
			s.Pulls += max(p.Pulls, 0)
			s.PullMilliseconds += max(p.PullMilliseconds, 0)
			s.Bytes += max(p.Bytes, 0)
			s.CacheHits += max(p.CacheHits, 0)
		}
	}
	for _, image := range sortedKeys(sums) {
		s := sums[image]
		ch <- prometheus.MustNewConstMetric(pullBytesDesc, prometheus.CounterValue, float64(s.Bytes), image)
		ch <- prometheus.MustNewConstHistogram(pullDurationDesc, uint64(s.Pulls), float64(s.PullMilliseconds)/1000, nil, image)
		ch <- prometheus.MustNewConstMetric(cacheHitsDesc, prometheus.CounterValue, float64(s.CacheHits), image)
	}
}

// withOthers is phases, then any other phase counts holds, sorted.
func withOthers[P ~string](phases []P, counts map[P]int) []P {
	out := append([]P(nil), phases...)
	known := map[P]bool{}
	for _, p := range phases {
		known[p] = true
	}
	var others []P
	for p := range counts {
		if !known[p] {
			others = append(others, p)
		}
	}
	sort.Slice(others, func(i, j int) bool { return others[i] < others[j] })
	return append(out, others...)
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
