package sink

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2/event"
	"github.com/go-logr/logr"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
	"github.com/boualleiguie/macrack-operator/internal/audit/event"
)

// The stream MacRack creates, and the subjects it publishes on: one per
// record, macrack.audit.<kind>.<record>.<id>.
const (
	DefaultStream  = "MACRACK_AUDIT"
	SubjectPrefix  = "macrack.audit."
	subjectPattern = SubjectPrefix + ">"
	// DuplicateWindow is how long JetStream remembers a record's id and
	// answers a second publish of it as a duplicate. It outlasts the
	// exporter's retry horizon (its longest backoff, plus a restart's
	// resync). Past it the stream still stores each record once: a record's
	// subject holds one message and refuses a second (MaxMsgsPerSubject 1,
	// DiscardNewPerSubject), whatever the time.
	DuplicateWindow = 10 * time.Minute
	publishTimeout  = 5 * time.Second
	// migrateTimeout bounds one attempt at moving an older stream's records
	// onto their own subjects; the next publish resumes an unfinished one.
	migrateTimeout = 2 * time.Minute
)

// JetStream's answers the sink reads: nats.go names neither.
const (
	// errStoreFailed carries "maximum messages per subject exceeded" when
	// a record's subject already holds it.
	errStoreFailed jetstream.ErrorCode = 10077
	maxPerSubject                      = "maximum messages per subject exceeded"
)

// JetStreamOptions configure the NATS sink.
type JetStreamOptions struct {
	// URL is a server, or several separated by commas (a cluster's seeds).
	URL string
	// Stream is the stream's name; DefaultStream if empty.
	Stream string
	// Replicas of the stream, on a JetStream cluster. Zero leaves an
	// existing stream's as they are, and creates a new one with 1.
	Replicas int
	// Credentials is a NATS credentials file (a user JWT and its seed), for
	// a server that wants them.
	Credentials string
	// DuplicateWindow is the stream's; DuplicateWindow if zero. The suites
	// shrink it to outlast it.
	DuplicateWindow time.Duration
}

// JetStream publishes each record on its own subject, with its id as the
// JetStream message id, to a stream that keeps one message per subject
// (sdk-go's JetStream binding sets no message id and publishes every record
// on one subject). The acknowledgement is JetStream's PubAck, or its refusal
// of a subject that already holds the record: either way the record is
// stored, once.
type JetStream struct {
	opts JetStreamOptions
	nc   *nats.Conn
	js   jetstream.JetStream
	log  logr.Logger

	// ensuring lets one publish at a time read the stream and give it
	// MacRack's settings; the others wait for it no longer than their own
	// deadline. A JetStream API request lost with a server (its meta leader
	// killed) is answered by nobody, and a mutex held across it stalled
	// every exporter behind it.
	ensuring chan struct{}

	mu sync.Mutex
	// stream is set once the stream has MacRack's settings.
	stream jetstream.Stream
}

// NewJetStream connects; a server that is not up yet is retried in the
// background, and publishes fail until it is. It logs to ctx's logger.
func NewJetStream(ctx context.Context, o JetStreamOptions) (*JetStream, error) {
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
	return &JetStream{opts: o, nc: nc, js: js, log: logr.FromContextOrDiscard(ctx), ensuring: make(chan struct{}, 1)}, nil
}

// StreamConfig is the stream MacRack creates.
func StreamConfig(o JetStreamOptions) jetstream.StreamConfig {
	return withSettings(jetstream.StreamConfig{
		Name:      cmp.Or(o.Stream, DefaultStream),
		Subjects:  []string{subjectPattern},
		Storage:   jetstream.FileStorage,
		Retention: jetstream.LimitsPolicy,
		Replicas:  1,
	}, o)
}

// withSettings sets MacRack's settings on a stream's config and leaves the
// rest as its administrator chose it (limits, placement, storage).
// DiscardNew also makes a full stream (MaxBytes, MaxMsgs) refuse new records
// rather than delete old ones: the records wait in their objects.
func withSettings(c jetstream.StreamConfig, o JetStreamOptions) jetstream.StreamConfig {
	if !slices.ContainsFunc(c.Subjects, func(f string) bool { return covers(f, subjectPattern) }) {
		c.Subjects = append(slices.Clone(c.Subjects), subjectPattern)
	}
	if c.Description == "" {
		c.Description = "MacRack's audit and billing records (CloudEvents 1.0, structured JSON), one subject per record"
	}
	c.Duplicates = cmp.Or(o.DuplicateWindow, DuplicateWindow)
	if c.MaxAge > 0 {
		c.Duplicates = min(c.Duplicates, c.MaxAge) // JetStream's rule
	}
	c.MaxMsgsPerSubject = 1
	c.Discard = jetstream.DiscardNew
	c.DiscardNewPerSubject = true
	if o.Replicas > 0 {
		c.Replicas = o.Replicas
	}
	return c
}

// covers says whether the subject filter f matches every subject of the
// filter p.
func covers(f, p string) bool {
	ft, pt := strings.Split(f, "."), strings.Split(p, ".")
	for i, t := range ft {
		switch {
		case t == ">":
			return true
		case i >= len(pt) || pt[i] == ">":
			return false
		case t != "*" && t != pt[i]:
			return false
		}
	}
	return len(ft) == len(pt)
}

// ensure makes the stream, or gives an existing one MacRack's settings.
func (j *JetStream) ensure(ctx context.Context) (jetstream.Stream, error) {
	name := j.opts.Stream
	if s := j.ensured(); s != nil {
		return s, nil
	}
	select {
	case j.ensuring <- struct{}{}:
		defer func() { <-j.ensuring }()
	case <-ctx.Done():
		return nil, fmt.Errorf("stream %s: waiting for another publish's check of its settings: %w", name, ctx.Err())
	}
	if s := j.ensured(); s != nil {
		return s, nil
	}
	s, err := j.js.Stream(ctx, name)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		s, err = j.js.CreateStream(ctx, StreamConfig(j.opts))
		if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			s, err = j.js.Stream(ctx, name) // another replica made it first
		}
	}
	if err != nil {
		return nil, fmt.Errorf("stream %s: %w", name, err)
	}
	cur := s.CachedInfo()
	if want := withSettings(cur.Config, j.opts); !reflect.DeepEqual(want, cur.Config) {
		if err := j.upgrade(ctx, s, want); err != nil {
			return nil, err
		}
	}
	j.setStream(s)
	return s, nil
}

// ensured is the stream, once it has MacRack's settings.
func (j *JetStream) ensured() jetstream.Stream {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.stream
}

// setStream remembers s, or, nil, forgets it: the next publish reads it
// again.
func (j *JetStream) setStream(s jetstream.Stream) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.stream = s
}

// upgrade gives an existing stream MacRack's settings. Lowering its
// per-subject limit to 1 makes JetStream delete all but the newest message
// of each subject, so a stream an older MacRack filled (one subject per
// record type) first has its records moved onto their own subjects.
// The update itself has the publish's deadline; a migration, and the
// update after it, have migrateTimeout.
func (j *JetStream) upgrade(ctx context.Context, s jetstream.Stream, want jetstream.StreamConfig) error {
	info := s.CachedInfo()
	if info.Config.MaxMsgsPerSubject != 1 && info.State.Msgs != info.State.NumSubjects {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), migrateTimeout)
		defer cancel()
		if err := j.migrate(ctx, s); err != nil {
			return fmt.Errorf("moving the records of stream %s onto their own subjects: %w", want.Name, err)
		}
	}
	if _, err := j.js.UpdateStream(ctx, want); err != nil {
		return fmt.Errorf("giving stream %s MacRack's settings: %w", want.Name, err)
	}
	return nil
}

// migrate copies every record of s that is not on its own subject onto it,
// unless a copy is there already (a second copy of an id, which an older
// MacRack re-sent past its window, is dropped here), then purges the
// subjects it copied from, up to where it read. A second message on a
// record's own subject (a stream that never had the limit) is deleted. A
// message that is not a CloudEvent stays where it is. An interrupted
// migration resumes: what it copied is found there.
func (j *JetStream) migrate(ctx context.Context, s jetstream.Stream) error {
	moved, own := map[string]bool{}, map[string]bool{}
	foreign := map[string]int{}
	copied, deleted := 0, 0
	last, err := eachMsg(ctx, s, false, func(m jetstream.Msg) error {
		ev, ok := decode(m.Data())
		if !ok {
			foreign[m.Subject()]++
			return nil
		}
		to := Subject(ev)
		if m.Subject() == to {
			if own[to] {
				meta, err := m.Metadata()
				if err == nil {
					err = s.DeleteMsg(ctx, meta.Sequence.Stream)
				}
				if err != nil {
					return fmt.Errorf("deleting a second copy of %s: %w", ev.ID(), err)
				}
				deleted++
			}
			own[to] = true
			return nil
		}
		moved[m.Subject()] = true
		cp := &nats.Msg{Subject: to, Data: m.Data(), Header: nats.Header{}}
		cp.Header.Set("Content-Type", cloudevents.ApplicationCloudEventsJSON)
		// No message id: within the window it would name the original, on
		// its old subject, and the copy would be taken for stored.
		_, err := j.js.PublishMsg(ctx, cp, jetstream.WithExpectLastSequencePerSubject(0))
		switch {
		case err == nil:
			copied++
		case !wrongLastSequence(err):
			return fmt.Errorf("copying %s onto %s: %w", ev.ID(), to, err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	for subj := range moved {
		if foreign[subj] > 0 {
			continue
		}
		if err := s.Purge(ctx, jetstream.WithPurgeSubject(subj), jetstream.WithPurgeSequence(last+1)); err != nil {
			return fmt.Errorf("purging %s, whose records are copied: %w", subj, err)
		}
	}
	info, err := s.Info(ctx)
	if err != nil {
		return err
	}
	if info.State.Msgs != info.State.NumSubjects {
		var several []string
		for subj, n := range foreign {
			if n > 1 {
				several = append(several, subj)
			}
		}
		slices.Sort(several)
		return fmt.Errorf("%d messages on %d subjects remain, and one message per subject would delete all but the newest of each: "+
			"subjects %v hold several messages that are not MacRack's records (move them out of the stream), or an older operator still publishes",
			info.State.Msgs, info.State.NumSubjects, several)
	}
	j.log.Info("Audit stream moved onto one subject per record", "stream", info.Config.Name,
		"copied", copied, "duplicatesDeleted", deleted, "subjectsPurged", len(moved))
	return nil
}

// Subject is a record's own subject: macrack.audit.<kind>.<record>.<id>,
// its id one token.
func Subject(ev cloudevents.Event) string {
	return SubjectPrefix + strings.TrimPrefix(ev.Type(), fleetv1alpha1.AuditEventTypePrefix) + "." + subjectToken(ev.ID())
}

// subjectToken keeps an id's letters, digits and -_/= and escapes every
// other byte (a dot, a wildcard, a space, %) as %XX: one token, and no two
// ids alike.
func subjectToken(id string) string {
	const hex = "0123456789ABCDEF"
	var b strings.Builder
	for i := 0; i < len(id); i++ {
		c := id[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '-', c == '_', c == '/', c == '=':
			b.WriteByte(c)
		default:
			b.WriteByte('%')
			b.WriteByte(hex[c>>4])
			b.WriteByte(hex[c&15])
		}
	}
	return b.String()
}

// Publish implements Sink.
func (j *JetStream) Publish(ctx context.Context, ev cloudevents.Event) error {
	ctx, cancel := context.WithTimeout(ctx, publishTimeout)
	defer cancel()
	s, err := j.ensure(ctx)
	if err != nil {
		return err
	}
	b, err := json.Marshal(ev)
	if err != nil {
		return fmt.Errorf("encoding %s: %w", ev.ID(), err)
	}
	subj := Subject(ev)
	msg := &nats.Msg{Subject: subj, Data: b, Header: nats.Header{}}
	msg.Header.Set("Content-Type", cloudevents.ApplicationCloudEventsJSON)
	ack, err := j.js.PublishMsg(ctx, msg, jetstream.WithMsgID(ev.ID()))
	switch {
	case err == nil && ack.Duplicate && ack.Sequence == 0:
		err = errors.New("answered as a duplicate of no stored message")
	case err == nil:
		return nil // stored now, or within the window before (the ack names where)
	case subjectFull(err):
		// Stored before, its acknowledgement lost, past the window. A full
		// subject is also what a publish still in flight looks like, so
		// read the record back.
		if err = storedOn(ctx, s, subj, ev); err == nil {
			return nil
		}
	}
	// The stream may be gone with a server that lost its store: make sure
	// of it again before the next try.
	j.setStream(nil)
	return fmt.Errorf("publishing %s: %w", ev.ID(), err)
}

// storedOn says whether the message on subj is the record ev. Its id is
// not enough: whoever may publish into the stream could have planted
// another record under it, first.
func storedOn(ctx context.Context, s jetstream.Stream, subj string, ev cloudevents.Event) error {
	m, err := s.GetLastMsgForSubject(ctx, subj)
	if err != nil {
		return fmt.Errorf("%s refused it as full, and reading it back failed: %w", subj, err)
	}
	if got, ok := decode(m.Data); !ok || !sameRecord(got, ev) {
		return fmt.Errorf("%s holds a message that is not record %s", subj, ev.ID())
	}
	return nil
}

// sameRecord compares what a record says: its id, type, subject, time and
// data (not its source, which names the operator's cluster).
func sameRecord(a, b cloudevents.Event) bool {
	var da, db event.Data
	return a.ID() == b.ID() && a.Type() == b.Type() && a.Subject() == b.Subject() && a.Time().Equal(b.Time()) &&
		a.DataAs(&da) == nil && b.DataAs(&db) == nil && reflect.DeepEqual(da, db)
}

func subjectFull(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode == errStoreFailed && strings.Contains(apiErr.Description, maxPerSubject)
}

func wrongLastSequence(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
		apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant)
}

// decode reads a stored record.
func decode(data []byte) (cloudevents.Event, bool) {
	var ev cloudevents.Event
	if err := json.Unmarshal(data, &ev); err != nil || ev.Validate() != nil {
		return ev, false
	}
	return ev, true
}

// Close implements Sink.
func (j *JetStream) Close() error {
	j.nc.Close()
	return nil
}
