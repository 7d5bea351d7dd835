package sink

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sync"

	cloudevents "github.com/cloudevents/sdk-go/v2/event"
)

// Lines writes each record as one line of structured CloudEvents JSON, for
// log pipelines. A write that returns is acknowledged: what a pipe does
// after that is the pipeline's.
type Lines struct {
	mu sync.Mutex
	w  io.Writer
}

// NewLines writes to w.
func NewLines(w io.Writer) *Lines { return &Lines{w: w} }

// Publish implements Sink.
func (l *Lines) Publish(_ context.Context, ev cloudevents.Event) error {
	b, err := json.Marshal(ev)
	if err != nil {
		return fmt.Errorf("encoding %s: %w", ev.ID(), err)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	_, err = l.w.Write(append(b, '\n'))
	return err
}

// Close implements Sink.
func (l *Lines) Close() error { return nil }
