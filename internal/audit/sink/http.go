package sink

import (
	"context"
	"fmt"
	"time"

	ce "github.com/cloudevents/sdk-go/v2"
	cloudevents "github.com/cloudevents/sdk-go/v2/event"
)

// HTTP sends each record as a CloudEvent over HTTP (binary mode) to one
// URL. A 2xx answer is the acknowledgement.
type HTTP struct {
	target string
	client ce.Client
	// timeout bounds one send: a receiver that never answers is a failure,
	// not a stuck exporter.
	timeout time.Duration
}

// NewHTTP sends to target.
func NewHTTP(target string) (*HTTP, error) {
	c, err := ce.NewClientHTTP()
	if err != nil {
		return nil, fmt.Errorf("audit sink %s: %w", target, err)
	}
	return &HTTP{target: target, client: c, timeout: publishTimeout}, nil
}

// Publish implements Sink.
func (h *HTTP) Publish(ctx context.Context, ev cloudevents.Event) error {
	ctx, cancel := context.WithTimeout(ctx, h.timeout)
	defer cancel()
	res := h.client.Send(ce.ContextWithTarget(ctx, h.target), ev)
	if !ce.IsACK(res) {
		return fmt.Errorf("sending %s to %s: %w", ev.ID(), h.target, res)
	}
	return nil
}

// Close implements Sink.
func (h *HTTP) Close() error { return nil }
