package audit

import (
	"context"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2/event"
)

// Denial is one refusal by a MacRack webhook or reconciler. It has no
// stored object to carry it, so it goes through Denials' bounded buffer.
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

// Denial makes a refusal a CloudEvent, with the rule, the code and the
// policy revision.
func (o Origin) Denial(d Denial) (cloudevents.Event, error) {
	subj := d.Name
	if d.Namespace != "" {
		subj = d.Namespace + "/" + d.Name
	}
	id := "denial/" + digest(d.Layer, d.Rule, d.Code, d.Revision, d.Kind, d.Namespace, d.Name, d.UID, d.Key)
	return o.event(id, Type("denial", d.Layer), "macrack-"+d.Layer, subj, d.At, Data{
		Kind: d.Kind, UID: d.UID, Namespace: d.Namespace, Name: d.Name, Reason: d.Code, Message: d.Message,
		Attributes: map[string]string{"rule": d.Rule, "code": d.Code, "revision": d.Revision, "layer": d.Layer,
			"operation": d.Operation, "user": d.User},
	})
}

// Denials is the bounded buffer between the deciders and the exporter. A
// full buffer drops the newest record and counts it; nothing waits on the
// sink in a request's path.
type Denials struct {
	ch      chan Denial
	dropped func()
}

// DefaultDenialBuffer is how many refusals wait for the sink.
const DefaultDenialBuffer = 4096

// NewDenials holds up to size refusals; dropped is called for each one that
// did not fit.
func NewDenials(size int, dropped func()) *Denials {
	if dropped == nil {
		dropped = func() {}
	}
	return &Denials{ch: make(chan Denial, size), dropped: dropped}
}

// Offer queues d, or drops and counts it. A nil Denials takes nothing.
func (b *Denials) Offer(d Denial) {
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
func (b *Denials) Len() int {
	if b == nil {
		return 0
	}
	return len(b.ch)
}

// Next waits for the next refusal.
func (b *Denials) Next(ctx context.Context) (Denial, bool) {
	select {
	case d := <-b.ch:
		return d, true
	case <-ctx.Done():
		return Denial{}, false
	}
}
