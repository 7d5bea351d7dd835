package audit

import (
	"sync"
	"time"

	"k8s.io/utils/clock"
)

// Backoff of the sink, on the injected clock: 1 s, doubling, at most a
// minute. The minute is the retry horizon the JetStream duplicate window
// outlasts.
const (
	minBackoff = time.Second
	maxBackoff = time.Minute
)

// gate holds the exporter back while the sink is failing, and says when to
// try again.
type gate struct {
	clock clock.PassiveClock

	mu       sync.Mutex
	failures int
	retryAt  time.Time
	// waiting: objects were turned away; the retrier owes them a try.
	waiting bool
	wake    chan struct{}
}

func newGate(c clock.PassiveClock) *gate { return &gate{clock: c, wake: make(chan struct{}, 1)} }

// open says whether to try the sink now. A closed gate records that someone
// waits.
func (g *gate) open() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.clock.Now().Before(g.retryAt) {
		g.waiting = true
		return false
	}
	return true
}

// fail closes the gate for the next backoff.
func (g *gate) fail() time.Duration {
	g.mu.Lock()
	d := min(maxBackoff, minBackoff<<min(g.failures, 16))
	g.failures++
	g.retryAt = g.clock.Now().Add(d)
	g.waiting = true
	g.mu.Unlock()
	select {
	case g.wake <- struct{}{}:
	default:
	}
	return d
}

// succeed resets the backoff.
func (g *gate) succeed() {
	g.mu.Lock()
	g.failures = 0
	g.mu.Unlock()
}

// next is when the retrier should wake, if anyone waits.
func (g *gate) next() (time.Time, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.retryAt, g.waiting
}

// retried: the retrier enqueued everyone waiting.
func (g *gate) retried() {
	g.mu.Lock()
	g.waiting = false
	g.mu.Unlock()
}
