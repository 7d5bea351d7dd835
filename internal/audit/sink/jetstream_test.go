package sink

import (
	"context"
	"encoding/json"
	"errors"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2/event"
	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8stypes "k8s.io/apimachinery/pkg/types"

	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
	"github.com/boualleiguie/macrack-operator/internal/audit/event"
	"github.com/boualleiguie/macrack-operator/test/natsserver"
)

// startNATS runs the real nats-server (bin/nats-server) for the test, and
// returns its URL and a JetStream client of it.
func startNATS(t *testing.T) (string, jetstream.JetStream) {
	t.Helper()
	s, err := natsserver.Start(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Kill() })
	nc, err := nats.Connect(s.URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return s.URL(), js
}

func newSink(t *testing.T, o JetStreamOptions) *JetStream {
	t.Helper()
	s, err := NewJetStream(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func leaseRecord(t *testing.T, uid string, seq int64, typ string) cloudevents.Event {
	t.Helper()
	lease := &metav1.ObjectMeta{Namespace: "tenant-a", Name: "ci", UID: k8stypes.UID("lease-" + uid)}
	ev, err := event.Origin{Cluster: "eu-1"}.Event("lease", "macrack-lease", lease, fleetv1alpha1.AuditRecord{
		Sequence: seq, Type: typ, Time: metav1.NewTime(at(time.Duration(seq) * time.Minute)),
	})
	if err != nil {
		t.Fatal(err)
	}
	return ev
}

// stored is what the stream holds: each message's subject and record id,
// in stream order.
func stored(t *testing.T, js jetstream.JetStream, stream string) (subjects, ids []string) {
	t.Helper()
	ctx := context.Background()
	s, err := js.Stream(ctx, stream)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := eachMsg(ctx, s, false, func(m jetstream.Msg) error {
		subjects = append(subjects, m.Subject())
		ev, ok := decode(m.Data())
		if !ok {
			ids = append(ids, "not a record: "+string(m.Data()))
			return nil
		}
		ids = append(ids, ev.ID())
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return subjects, ids
}

func rawPublish(t *testing.T, js jetstream.JetStream, subject string, ev cloudevents.Event, opts ...jetstream.PublishOpt) error {
	t.Helper()
	b, err := json.Marshal(ev)
	if err != nil {
		t.Fatal(err)
	}
	_, err = js.Publish(context.Background(), subject, b, opts...)
	return err
}

// TestJetStreamStoresEachRecordOnceWhateverTheTime: a record published
// again is stored once, within the duplicate window (JetStream remembers its
// id) and past it (its subject holds it, and refuses a second message); the
// sink takes either answer as its acknowledgement, and takes a subject that
// holds another record as an error.
func TestJetStreamStoresEachRecordOnceWhateverTheTime(t *testing.T) {
	url, js := startNATS(t)
	ctx := context.Background()
	sink := newSink(t, JetStreamOptions{URL: url})
	a, b := leaseRecord(t, "a", 1, "created"), leaseRecord(t, "a", 2, "bound")
	for _, ev := range []cloudevents.Event{a, b, a} {
		if err := sink.Publish(ctx, ev); err != nil {
			t.Fatalf("publishing %s: %v", ev.ID(), err)
		}
	}
	subjects, ids := stored(t, js, DefaultStream)
	if want := []string{a.ID(), b.ID()}; !slices.Equal(ids, want) {
		t.Fatalf("the stream holds %v, want %v: a record re-sent within the window was stored again", ids, want)
	}
	if want := []string{Subject(a), Subject(b)}; !slices.Equal(subjects, want) {
		t.Errorf("subjects %v, want %v", subjects, want)
	}
	s, err := js.Stream(ctx, DefaultStream)
	if err != nil {
		t.Fatal(err)
	}
	cfg := s.CachedInfo().Config
	if cfg.MaxMsgsPerSubject != 1 || cfg.Discard != jetstream.DiscardNew || !cfg.DiscardNewPerSubject || cfg.Duplicates != DuplicateWindow ||
		cfg.Storage != jetstream.FileStorage || cfg.Replicas != 1 || !slices.Equal(cfg.Subjects, []string{"macrack.audit.>"}) {
		t.Errorf("the stream's config: %+v", cfg)
	}

	// What the server sees past the window: the same subject under an id it
	// does not remember. JetStream's answer names the full subject.
	err = rawPublish(t, js, Subject(a), a, jetstream.WithMsgID(a.ID()+"#late"))
	if !subjectFull(err) {
		t.Fatalf("a second message on %s: %v, want JetStream to refuse it as a full subject", Subject(a), err)
	}
	// Positive control: a new record's subject takes it.
	c := leaseRecord(t, "a", 3, "held")
	if err := rawPublish(t, js, Subject(c), c, jetstream.WithMsgID(c.ID())); err != nil {
		t.Fatalf("a new record: %v", err)
	}

	// The sink itself past the window: shrink it (an update of the stream),
	// wait until the server has forgotten a's id, and publish a again.
	short := newSink(t, JetStreamOptions{URL: url, DuplicateWindow: 100 * time.Millisecond})
	if err := short.Publish(ctx, leaseRecord(t, "a", 4, "released")); err != nil {
		t.Fatal(err)
	}
	if s, err = js.Stream(ctx, DefaultStream); err != nil || s.CachedInfo().Config.Duplicates != 100*time.Millisecond {
		t.Fatalf("the window was not shrunk: %v", err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for err := rawPublish(t, js, Subject(a), a, jetstream.WithMsgID(a.ID())); !subjectFull(err); err = rawPublish(t, js, Subject(a), a, jetstream.WithMsgID(a.ID())) {
		if time.Now().After(deadline) {
			t.Fatalf("JetStream still answers %s as a duplicate: %v", a.ID(), err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := short.Publish(ctx, a); err != nil {
		t.Fatalf("re-sending %s past the window: %v, want it taken as stored", a.ID(), err)
	}
	if _, ids := stored(t, js, DefaultStream); !slices.Equal(ids, []string{a.ID(), b.ID(), c.ID(), event.ID("lease", "lease-a", 4)}) {
		t.Errorf("past the window, the stream holds %v: want each record once", ids)
	}

	// A subject that holds another record, or a forgery under the record's
	// id, is no acknowledgement: someone who may publish into the stream
	// planted it there first.
	d, e := leaseRecord(t, "a", 5, "deleted"), leaseRecord(t, "a", 6, "condition")
	forged := e.Clone()
	if err := forged.SetData(cloudevents.ApplicationJSON, event.Data{Kind: "lease", UID: "lease-a", Namespace: "tenant-b", Name: "ci", Sequence: 6}); err != nil {
		t.Fatal(err)
	}
	for _, p := range []struct{ planted, ev cloudevents.Event }{{c, d}, {forged, e}} {
		planted, ev := p.planted, p.ev
		if err := rawPublish(t, js, Subject(ev), planted); err != nil {
			t.Fatal(err)
		}
		if err := sink.Publish(ctx, ev); err == nil || !strings.Contains(err.Error(), "holds a message that is not record "+ev.ID()) {
			t.Errorf("publishing %s onto a subject that holds %s: %v", ev.ID(), planted.ID(), err)
		}
	}
}

// oldStream is the stream an older MacRack made: every record of a type on
// one subject, no limit per subject.
func oldStream(t *testing.T, js jetstream.JetStream, name string) jetstream.Stream {
	t.Helper()
	s, err := js.CreateStream(context.Background(), jetstream.StreamConfig{
		Name: name, Subjects: []string{"macrack.audit.>"}, Storage: jetstream.FileStorage,
		Retention: jetstream.LimitsPolicy, Duplicates: DuplicateWindow, Replicas: 1,
	})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func oldSubject(ev cloudevents.Event) string {
	return SubjectPrefix + strings.TrimPrefix(ev.Type(), "io.macrack.")
}

// TestJetStreamMovesAnOlderStreamsRecordsOntoTheirOwnSubjects: JetStream
// deletes all but the newest message of each subject when a stream's limit
// per subject falls to one. The sink first copies each record of an older
// stream onto its own subject, once, then purges the old subjects, and only
// then sets the limit: every record stays, each once, in its order.
func TestJetStreamMovesAnOlderStreamsRecordsOntoTheirOwnSubjects(t *testing.T) {
	url, js := startNATS(t)
	ctx := context.Background()
	oldStream(t, js, DefaultStream)
	a1, a2, b := leaseRecord(t, "a", 1, "bound"), leaseRecord(t, "b", 1, "bound"), leaseRecord(t, "a", 2, "created")
	c := leaseRecord(t, "c", 1, "bound")
	for _, p := range []struct {
		subject, id string
		ev          cloudevents.Event
	}{
		{oldSubject(a1), a1.ID(), a1},
		{oldSubject(a2), a2.ID(), a2},
		{Subject(c), c.ID(), c}, // already on its own
		{oldSubject(b), b.ID(), b},
		{oldSubject(a1), a1.ID() + "#late", a1}, // re-sent past an older window
		{Subject(c), c.ID() + "#late", c},       // twice on its own, with no limit
	} {
		if err := rawPublish(t, js, p.subject, p.ev, jetstream.WithMsgID(p.id)); err != nil {
			t.Fatal(err)
		}
	}
	d := leaseRecord(t, "d", 1, "bound")
	var logged []string
	logCtx := logr.NewContext(ctx, funcr.New(func(prefix, args string) { logged = append(logged, args) }, funcr.Options{}))
	sink, err := NewJetStream(logCtx, JetStreamOptions{URL: url})
	if err != nil {
		t.Fatal(err)
	}
	defer sink.Close()
	// Within the window of the originals' ids: a copy under them would be
	// answered as a duplicate, and lost with the purge.
	if err := sink.Publish(ctx, d); err != nil {
		t.Fatalf("publishing into an older stream: %v", err)
	}
	if want := `"level"=0 "msg"="Audit stream moved onto one subject per record" "stream"="MACRACK_AUDIT" "copied"=3 "duplicatesDeleted"=1 "subjectsPurged"=2`; !slices.Contains(logged, want) {
		t.Errorf("the log says %q, want %q", logged, want)
	}
	subjects, ids := stored(t, js, DefaultStream)
	if want := []string{c.ID(), a1.ID(), a2.ID(), b.ID(), d.ID()}; !slices.Equal(ids, want) {
		t.Fatalf("after the move the stream holds %v, want %v", ids, want)
	}
	for i, subj := range subjects {
		if want := SubjectPrefix + "lease."; !strings.HasPrefix(subj, want) || !strings.HasSuffix(subj, "."+ids[i]) {
			t.Errorf("record %s is on %s, not its own subject", ids[i], subj)
		}
	}
	s, err := js.Stream(ctx, DefaultStream)
	if err != nil {
		t.Fatal(err)
	}
	if cfg := s.CachedInfo().Config; cfg.MaxMsgsPerSubject != 1 || !cfg.DiscardNewPerSubject {
		t.Errorf("the limit per subject was not set: %+v", cfg)
	}
	// A second operator's sink finds the stream moved, and moves nothing.
	if err := newSink(t, JetStreamOptions{URL: url}).Publish(ctx, d); err != nil {
		t.Fatal(err)
	}
	if _, again := stored(t, js, DefaultStream); !slices.Equal(again, ids) {
		t.Errorf("a second sink changed the stream: %v", again)
	}
}

// TestJetStreamLeavesAStreamWhoseOtherMessagesTheLimitWouldDelete: messages
// that are not MacRack's records, several on one subject, would be deleted
// by the limit. The sink refuses, naming them, and changes nothing until
// they are moved out.
func TestJetStreamLeavesAStreamWhoseOtherMessagesTheLimitWouldDelete(t *testing.T) {
	url, js := startNATS(t)
	ctx := context.Background()
	oldStream(t, js, "SHARED")
	for _, body := range []string{"one", "two"} {
		if _, err := js.Publish(ctx, "macrack.audit.notes", []byte(body)); err != nil {
			t.Fatal(err)
		}
	}
	a := leaseRecord(t, "a", 1, "bound")
	sink := newSink(t, JetStreamOptions{URL: url, Stream: "SHARED"})
	err := sink.Publish(ctx, a)
	if err == nil || !strings.Contains(err.Error(), "subjects [macrack.audit.notes] hold several messages that are not MacRack's records (move them out of the stream)") {
		t.Fatalf("publishing into a stream the limit would cut: %v", err)
	}
	s, err := js.Stream(ctx, "SHARED")
	if err != nil {
		t.Fatal(err)
	}
	if info := s.CachedInfo(); info.Config.MaxMsgsPerSubject == 1 || info.State.Msgs != 2 {
		t.Errorf("the stream changed: limit %d, %d messages", info.Config.MaxMsgsPerSubject, info.State.Msgs)
	}
	// Positive control: once they are moved out, the next try takes the
	// record.
	if err := s.Purge(ctx, jetstream.WithPurgeSubject("macrack.audit.notes")); err != nil {
		t.Fatal(err)
	}
	if err := sink.Publish(ctx, a); err != nil {
		t.Errorf("with the other messages moved out: %v", err)
	}
}

// TestJetStreamKeepsAnAdministratorsSettings: the sink sets its own
// settings on an existing stream, and only those.
func TestJetStreamKeepsAnAdministratorsSettings(t *testing.T) {
	url, js := startNATS(t)
	ctx := context.Background()
	const month = 31 * 24 * time.Hour
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{
		Name: DefaultStream, Description: "billing, eu-1", Subjects: []string{"macrack.>"},
		Storage: jetstream.FileStorage, MaxAge: 13 * month, MaxBytes: 8 << 30,
	}); err != nil {
		t.Fatal(err)
	}
	if err := newSink(t, JetStreamOptions{URL: url}).Publish(ctx, leaseRecord(t, "a", 1, "bound")); err != nil {
		t.Fatal(err)
	}
	s, err := js.Stream(ctx, DefaultStream)
	if err != nil {
		t.Fatal(err)
	}
	cfg := s.CachedInfo().Config
	if cfg.Description != "billing, eu-1" || !slices.Equal(cfg.Subjects, []string{"macrack.>"}) || cfg.MaxAge != 13*month || cfg.MaxBytes != 8<<30 {
		t.Errorf("the administrator's settings changed: %+v", cfg)
	}
	if cfg.MaxMsgsPerSubject != 1 || !cfg.DiscardNewPerSubject || cfg.Discard != jetstream.DiscardNew || cfg.Duplicates != DuplicateWindow {
		t.Errorf("MacRack's settings are missing: %+v", cfg)
	}
}

func TestSubjectFilterCovers(t *testing.T) {
	for f, want := range map[string]bool{
		"macrack.audit.>": true, "macrack.>": true, ">": true, "*.audit.>": true, "macrack.*.>": true,
		"macrack.audit.*": false, "macrack.audit.lease.>": false, "macrack.audit": false, "other.>": false,
	} {
		if got := covers(f, subjectPattern); got != want {
			t.Errorf("covers(%q, %q) = %v, want %v", f, subjectPattern, got, want)
		}
	}
	if err := errors.New("x"); subjectFull(err) || wrongLastSequence(err) {
		t.Error("a plain error read as JetStream's answer")
	}
}

// A JetStream API request that nobody answers (a server frozen, or the
// meta leader lost with it) holds up the publish that sent it, to its
// deadline, and no other: a publish waiting for that check of the stream
// gives up at its own deadline, and backs off.
func TestJetStreamPublishWaitsForAStuckCheckOnlyToItsOwnDeadline(t *testing.T) {
	s, err := natsserver.Start(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Kill() })
	sink := newSink(t, JetStreamOptions{URL: s.URL()})

	// Positive control: with the server answering, a publish is stored.
	if err := sink.Publish(t.Context(), leaseRecord(t, "a", 1, "created")); err != nil {
		t.Fatalf("publish to a live server: %v", err)
	}

	sink.setStream(nil) // as after a failed publish: the next one checks the stream again
	if err := s.Pause(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Resume() })
	first := make(chan error, 1)
	go func() { first <- sink.Publish(context.Background(), leaseRecord(t, "a", 2, "bound")) }()
	// The first publish holds the check; wait until it does.
	for len(sink.ensuring) == 0 {
		runtime.Gosched()
	}
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	err = sink.Publish(ctx, leaseRecord(t, "b", 1, "created"))
	select {
	case ferr := <-first:
		t.Fatalf("the second publish returned (%v) only after the stuck one did (%v)", err, ferr)
	default:
	}
	if err == nil || !strings.Contains(err.Error(), "waiting for another publish's check") {
		t.Fatalf("the second publish answered %v; want it to give up waiting for the stuck check", err)
	}
	if err := s.Resume(); err != nil {
		t.Fatal(err)
	}
	<-first // answered once the server thaws, or timed out: either way it returns
}
