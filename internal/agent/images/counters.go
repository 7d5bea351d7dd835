package images

import (
	"sort"
	"time"

	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
)

// pullCounters are one golden's cumulative pull counters, as
// status.reported.imagePulls carries them; touched orders them for the
// report's bound.
type pullCounters struct {
	pulls, pullMillis, bytes, cacheHits int64
	touched                             time.Time
}

// counter returns name's counters, made on first use. The caller holds
// p.mu. Past MaxImagePullCounters goldens, the least recently touched
// other one is forgotten.
func (p *Puller) counter(name string, now time.Time) *pullCounters {
	if p.counters == nil {
		p.counters = map[string]*pullCounters{}
	}
	c := p.counters[name]
	if c == nil {
		if len(p.counters) >= fleetv1alpha1.MaxImagePullCounters {
			oldest := ""
			for n, o := range p.counters {
				if oldest == "" || o.touched.Before(p.counters[oldest].touched) {
					oldest = n
				}
			}
			delete(p.counters, oldest)
		}
		c = &pullCounters{}
		p.counters[name] = c
	}
	c.touched = now
	return c
}

// countPull counts a pull of name that completed in d.
func (p *Puller) countPull(name string, d time.Duration, now time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	c := p.counter(name, now)
	c.pulls++
	c.pullMillis += max(d.Milliseconds(), 0)
}

// CountCacheHit counts an instance disk cloned from golden name that did
// not wait for a pull.
func (s *Store) CountCacheHit(name string) {
	p := s.Puller
	now := s.clock().Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.counter(name, now).cacheHits++
}

// SeedPullCounters adds counters reported earlier, by an earlier run of
// the agent, to this run's, so that what the agent reports keeps growing
// across its restarts: the operator exports the sums as Prometheus
// counters, and a sum that fell would read as a reset. Seed once, before
// the first report.
func (s *Store) SeedPullCounters(reported []fleetv1alpha1.ImagePullCounters) {
	p := s.Puller
	now := s.clock().Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, r := range reported {
		if checkName(r.Name) != nil {
			continue
		}
		c := p.counter(r.Name, now)
		c.pulls += max(r.Pulls, 0)
		c.pullMillis += max(r.PullMilliseconds, 0)
		c.bytes += max(r.Bytes, 0)
		c.cacheHits += max(r.CacheHits, 0)
	}
}

// PullCounters are the counters as the agent reports them on its MacNode,
// by name.
func (s *Store) PullCounters() []fleetv1alpha1.ImagePullCounters {
	p := s.Puller
	p.mu.Lock()
	out := make([]fleetv1alpha1.ImagePullCounters, 0, len(p.counters))
	for name, c := range p.counters {
		out = append(out, fleetv1alpha1.ImagePullCounters{Name: name, Pulls: c.pulls, PullMilliseconds: c.pullMillis,
			Bytes: c.bytes, CacheHits: c.cacheHits})
	}
	p.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}
