package sink

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
// waiting for new ones until ctx ends.
func (r *Reader) Each(ctx context.Context, follow bool, fn func(cloudevents.Event) error) error {
	_, err := eachMsg(ctx, r.stream, follow, func(msg jetstream.Msg) error {
		var ev cloudevents.Event
		if err := json.Unmarshal(msg.Data(), &ev); err != nil {
			return fmt.Errorf("record on %s is not a CloudEvent: %w", msg.Subject(), err)
		}
		return fn(ev)
	})
	return err
}

// eachMsg calls fn with every message of s in stream order: up to the last
// one it holds, or, with follow, until ctx ends. It reads through one
// ordered consumer's message iterator, which pulls in batches, and returns
// the stream sequence of the last message it read.
func eachMsg(ctx context.Context, s jetstream.Stream, follow bool, fn func(jetstream.Msg) error) (uint64, error) {
	info, err := s.Info(ctx)
	if err != nil {
		return 0, fmt.Errorf("reading the stream's state: %w", err)
	}
	if info.State.Msgs == 0 && !follow {
		return 0, nil
	}
	cons, err := s.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverAllPolicy})
	if err != nil {
		return 0, fmt.Errorf("reading the stream: %w", err)
	}
	it, err := cons.Messages()
	if err != nil {
		return 0, fmt.Errorf("reading the stream: %w", err)
	}
	defer it.Stop()
	stop := context.AfterFunc(ctx, it.Stop)
	defer stop()
	var read uint64
	for {
		msg, err := it.Next()
		if ctx.Err() != nil {
			return read, ctx.Err()
		}
		if errors.Is(err, jetstream.ErrMsgIteratorClosed) {
			return read, fmt.Errorf("the stream closed before its last record %d", info.State.LastSeq)
		}
		if err != nil {
			return read, fmt.Errorf("reading the stream: %w", err)
		}
		if err := fn(msg); err != nil {
			return read, err
		}
		meta, err := msg.Metadata()
		if err != nil {
			return read, err
		}
		read = meta.Sequence.Stream
		if follow || read < info.State.LastSeq && meta.NumPending > 0 {
			continue
		}
		// The end is the last message when reading began, or none left
		// after this one. An R1 consumer of a replicated stream sits on any
		// of its replicas, and a follower's NumPending can lag what the
		// leader acknowledged and counted in LastSeq: only the leader's
		// answer that nothing follows (deleted since) ends the read early.
		if read >= info.State.LastSeq {
			return read, nil
		}
		if more, err := after(ctx, s, read); err != nil || !more {
			return read, err
		}
	}
}

// after says whether the stream's leader holds a message after seq.
func after(ctx context.Context, s jetstream.Stream, seq uint64) (bool, error) {
	_, err := s.GetMsg(ctx, seq+1, jetstream.WithGetMsgSubject(">"))
	switch {
	case errors.Is(err, jetstream.ErrMsgNotFound):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("reading the stream after %d: %w", seq, err)
	}
	return true, nil
}
