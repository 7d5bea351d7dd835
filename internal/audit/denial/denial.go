// Package denial carries the refusals of MacRack's webhooks and reconcilers
// to the audit exporter: a Denial has no stored object to journal it, so it
// waits in a bounded Buffer. Deciders link this package alone, not the
// event format or a sink.
package denial

import (
	"context"
	"time"
)

// Denial is one refusal by a MacRack webhook or reconciler.
type Denial struct {
	// Layer is webhook or reconciler.
	Layer    string
	Rule     string
	Code     string
	Revision string
	Message  string
	// Kind, Namespace, Name and UID name the object refused; UID may be
	// empty on a create.
	Kind, Namespace, Name, UID string
	// Operation and User are the request's, at admission.
	Operation, User string
	// Key makes the id: the admission request's UID, or the object's
	// resourceVersion for a reconciler, so that the same refusal retried is
	// the same record.
	Key string
	At  time.Time
}

// Buffer is the bounded buffer between the deciders and the exporter. A
// full buffer drops the newest record and counts it; nothing waits on the
// sink in a request's path.
type Buffer struct {
	ch      chan Denial
	dropped func()
}

// DefaultBufferSize is how many refusals wait for the sink.
const DefaultBufferSize = 4096

// NewBuffer holds up to size refusals; dropped is called for each one that
// did not fit.
func NewBuffer(size int, dropped func()) *Buffer {
	if dropped == nil {
		dropped = func() {}
	}
	return &Buffer{ch: make(chan Denial, size), dropped: dropped}
}

// Offer queues d, or drops and counts it. A nil Buffer takes nothing.
func (b *Buffer) Offer(d Denial) {
	if b == nil {
		return
	}
	select {
	case b.ch <- d:
	default:
		b.dropped()
	}
}

// Len is how many wait.
func (b *Buffer) Len() int {
	if b == nil {
		return 0
	}
	return len(b.ch)
}

// Next waits for the next refusal.
func (b *Buffer) Next(ctx context.Context) (Denial, bool) {
	select {
	case d := <-b.ch:
		return d, true
	case <-ctx.Done():
		return Denial{}, false
	}
}
