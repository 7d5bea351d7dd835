package audit

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2/event"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Reader reads a JetStream audit stream.
type Reader struct {
	nc     *nats.Conn
	stream jetstream.Stream
}

// OpenReader connects to the stream at url.
func OpenReader(ctx context.Context, url, stream string) (*Reader, error) {
	if stream == "" {
		stream = DefaultStream
	}
	nc, err := nats.Connect(url, nats.Name("macrack-audit-reader"), nats.Timeout(5*time.Second))
	if err != nil {
		return nil, fmt.Errorf("connecting to %s: %w", url, err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, err
	}
	s, err := js.Stream(ctx, stream)
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("stream %s on %s: %w", stream, url, err)
	}
	return &Reader{nc: nc, stream: s}, nil
}

// Close disconnects.
func (r *Reader) Close() { r.nc.Close() }

// All returns every record the stream holds, in stream order.
func (r *Reader) All(ctx context.Context) ([]cloudevents.Event, error) {
	var out []cloudevents.Event
	err := r.Each(ctx, false, func(ev cloudevents.Event) error {
		out = append(out, ev)
		return nil
	})
	return out, err
}

// Each calls fn with every record in stream order; with follow, it keeps
// waiting for new ones until ctx ends. It reads through one ordered
// consumer's message iterator, which pulls in batches.
func (r *Reader) Each(ctx context.Context, follow bool, fn func(cloudevents.Event) error) error {
	info, err := r.stream.Info(ctx)
	if err != nil {
		return fmt.Errorf("reading the stream's state: %w", err)
	}
	last := info.State.LastSeq
	if last == 0 && !follow {
		return nil
	}
	cons, err := r.stream.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverAllPolicy})
	if err != nil {
		return fmt.Errorf("reading the stream: %w", err)
	}
	it, err := cons.Messages()
	if err != nil {
		return fmt.Errorf("reading the stream: %w", err)
	}
	defer it.Stop()
	stop := context.AfterFunc(ctx, it.Stop)
	defer stop()
	for {
		msg, err := it.Next()
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if errors.Is(err, jetstream.ErrMsgIteratorClosed) {
			return fmt.Errorf("the stream closed before its last record %d", last)
		}
		if err != nil {
			return fmt.Errorf("reading the stream: %w", err)
		}
		var ev cloudevents.Event
		if err := json.Unmarshal(msg.Data(), &ev); err != nil {
			return fmt.Errorf("record on %s is not a CloudEvent: %w", msg.Subject(), err)
		}
		if err := fn(ev); err != nil {
			return err
		}
		meta, err := msg.Metadata()
		if err != nil {
			return err
		}
		if !follow && meta.Sequence.Stream >= last {
			return nil
		}
	}
}
