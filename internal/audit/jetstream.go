package audit

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2/event"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// The stream MacRack creates, and the subjects it publishes on:
// macrack.audit.<kind>.<transition>.
const (
	DefaultStream  = "MACRACK_AUDIT"
	SubjectPrefix  = "macrack.audit."
	subjectPattern = SubjectPrefix + ">"
	// DuplicateWindow is how long JetStream drops a second message with the
	// same id. It outlasts the exporter's retry horizon (its longest
	// backoff, plus a restart's resync), so a record re-sent after a lost
	// acknowledgement is stored once. Past it, consumers deduplicate on the
	// id, as `macrackctl billing report` does.
	DuplicateWindow = 10 * time.Minute
	publishTimeout  = 5 * time.Second
)

// JetStreamOptions configure the NATS sink.
type JetStreamOptions struct {
	URL string
	// Stream is the stream's name; DefaultStream if empty.
	Stream string
	// Replicas of the stream, on a JetStream cluster; 1 if zero.
	Replicas int
	// Credentials is a NATS credentials file (a user JWT and its seed), for
	// a server that wants them.
	Credentials string
}

// JetStream publishes each record with its id as the JetStream message id,
// on a stream MacRack creates with a Duplicates window longer than its
// retry horizon (sdk-go's JetStream binding sets no message id, and creates
// its stream with the 2-minute default). The acknowledgement is JetStream's
// PubAck: the record is stored.
type JetStream struct {
	opts JetStreamOptions
	nc   *nats.Conn
	js   jetstream.JetStream

	mu      sync.Mutex
	ensured bool
}

// NewJetStream connects; a server that is not up yet is retried in the
// background, and publishes fail until it is.
func NewJetStream(_ context.Context, o JetStreamOptions) (*JetStream, error) {
	if o.Stream == "" {
		o.Stream = DefaultStream
	}
	opts := []nats.Option{
		nats.Name("macrack-audit"),
		nats.RetryOnFailedConnect(true),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(time.Second),
		// Fail a publish at once while disconnected, rather than buffer it:
		// the record stays in its object, and the exporter backs off.
		nats.ReconnectBufSize(-1),
	}
	if o.Credentials != "" {
		opts = append(opts, nats.UserCredentials(o.Credentials))
	}
	nc, err := nats.Connect(o.URL, opts...)
	if err != nil {
		return nil, fmt.Errorf("audit sink %s: %w", o.URL, err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("audit sink %s: %w", o.URL, err)
	}
	return &JetStream{opts: o, nc: nc, js: js}, nil
}

// StreamConfig is the stream MacRack creates, or updates to.
func StreamConfig(name string, replicas int) jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name:        name,
		Description: "MacRack's audit and billing records (CloudEvents 1.0, structured JSON)",
		Subjects:    []string{subjectPattern},
		Storage:     jetstream.FileStorage,
		Retention:   jetstream.LimitsPolicy,
		Duplicates:  DuplicateWindow,
		Replicas:    max(1, replicas),
	}
}

func (j *JetStream) ensure(ctx context.Context) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.ensured {
		return nil
	}
	if _, err := j.js.CreateOrUpdateStream(ctx, StreamConfig(j.opts.Stream, j.opts.Replicas)); err != nil {
		return fmt.Errorf("creating stream %s: %w", j.opts.Stream, err)
	}
	j.ensured = true
	return nil
}

// Subject is where a record of type typ goes.
func Subject(typ string) string {
	return SubjectPrefix + strings.TrimPrefix(typ, "io.macrack.")
}

// Publish implements Sink.
func (j *JetStream) Publish(ctx context.Context, ev cloudevents.Event) error {
	ctx, cancel := context.WithTimeout(ctx, publishTimeout)
	defer cancel()
	if err := j.ensure(ctx); err != nil {
		return err
	}
	b, err := json.Marshal(ev)
	if err != nil {
		return fmt.Errorf("encoding %s: %w", ev.ID(), err)
	}
	msg := &nats.Msg{Subject: Subject(ev.Type()), Data: b, Header: nats.Header{}}
	msg.Header.Set("Content-Type", cloudevents.ApplicationCloudEventsJSON)
	if _, err := j.js.PublishMsg(ctx, msg, jetstream.WithMsgID(ev.ID())); err != nil {
		// The stream may be gone with a server that lost its store: make
		// sure of it again before the next try.
		j.mu.Lock()
		j.ensured = false
		j.mu.Unlock()
		return fmt.Errorf("publishing %s: %w", ev.ID(), err)
	}
	return nil
}

// Close implements Sink.
func (j *JetStream) Close() error {
	j.nc.Close()
	return nil
}
