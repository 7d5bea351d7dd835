package harness

import (
	"sync"
	"time"

	"k8s.io/utils/clock"
)

// SteppingClock is an operator's clock a suite can move forward.
type SteppingClock interface {
	clock.WithTicker
	Step(d time.Duration)
}

// OffsetClock is the real clock plus an offset that Step grows: time runs,
// timers and tickers fire in real time, and a step of 25h makes a day's
// minimum duration pass at once. A fleet benchmark gives it to the
// operator and to every agent, so that a step moves the whole cluster's
// idea of now together and no heartbeat looks old for it. It lives in the
// test harness only: no production binary can skew its clock.
type OffsetClock struct {
	clock.RealClock
	mu     sync.RWMutex
	offset time.Duration
}

var _ SteppingClock = (*OffsetClock)(nil)

// Now implements clock.PassiveClock.
func (c *OffsetClock) Now() time.Time {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return time.Now().Add(c.offset)
}

// Since implements clock.PassiveClock.
func (c *OffsetClock) Since(t time.Time) time.Duration { return c.Now().Sub(t) }

// Step moves the clock forward by d.
func (c *OffsetClock) Step(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.offset += d
}

// Offset is how far the clock runs ahead of the real one.
func (c *OffsetClock) Offset() time.Duration {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.offset
}
