package sink

import (
	"context"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
)

// laggingStream is a replicated stream whose leader has acknowledged
// messages 1..last and whose R1 consumer sits on a follower that has
// applied only 1..applied so far: each message delivered there says nothing
// is pending beyond what the follower holds. The follower applies the rest
// once the reader has drained what it held.
type laggingStream struct {
	jetstream.Stream
	last, applied uint64
	// deleted are sequences the leader no longer holds.
	deleted map[uint64]bool
	gets    int
}

func (s *laggingStream) Info(context.Context, ...jetstream.StreamInfoOpt) (*jetstream.StreamInfo, error) {
	return &jetstream.StreamInfo{State: jetstream.StreamState{Msgs: s.last - uint64(len(s.deleted)), LastSeq: s.last}}, nil
}

func (s *laggingStream) OrderedConsumer(context.Context, jetstream.OrderedConsumerConfig) (jetstream.Consumer, error) {
	return &laggingConsumer{s: s}, nil
}

// GetMsg answers as the leader, with "next by subject".
func (s *laggingStream) GetMsg(_ context.Context, seq uint64, _ ...jetstream.GetMsgOpt) (*jetstream.RawStreamMsg, error) {
	s.gets++
	for ; seq <= s.last; seq++ {
		if !s.deleted[seq] {
			return &jetstream.RawStreamMsg{Sequence: seq}, nil
		}
	}
	return nil, jetstream.ErrMsgNotFound
}

type laggingConsumer struct {
	jetstream.Consumer
	s *laggingStream
}

func (c *laggingConsumer) Messages(...jetstream.PullMessagesOpt) (jetstream.MessagesContext, error) {
	return &laggingIterator{s: c.s}, nil
}

type laggingIterator struct {
	s    *laggingStream
	next uint64
}

func (c *laggingIterator) Next(...jetstream.NextOpt) (jetstream.Msg, error) {
	c.next++
	for c.s.deleted[c.next] {
		c.next++
	}
	if c.next > c.s.applied {
		c.s.applied = c.s.last // the follower catches up
	}
	if c.next > c.s.applied {
		return nil, jetstream.ErrMsgIteratorClosed
	}
	pending := uint64(0)
	for q := c.next + 1; q <= c.s.applied; q++ {
		if !c.s.deleted[q] {
			pending++
		}
	}
	return laggingMsg{seq: c.next, pending: pending}, nil
}

func (c *laggingIterator) Stop()  {}
func (c *laggingIterator) Drain() {}

type laggingMsg struct {
	jetstream.Msg
	seq, pending uint64
}

func (m laggingMsg) Metadata() (*jetstream.MsgMetadata, error) {
	return &jetstream.MsgMetadata{Sequence: jetstream.SequencePair{Stream: m.seq}, NumPending: m.pending}, nil
}

func readAll(t *testing.T, s jetstream.Stream) []uint64 {
	t.Helper()
	var seqs []uint64
	last, err := eachMsg(t.Context(), s, false, func(m jetstream.Msg) error {
		meta, _ := m.Metadata()
		seqs = append(seqs, meta.Sequence.Stream)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(seqs); n > 0 && seqs[n-1] != last {
		t.Fatalf("read returned %d, its last message was %d", last, seqs[n-1])
	}
	return seqs
}

// A record the leader acknowledged is read even when the reader's consumer
// sits on a follower that has not applied it yet: a billing report or a
// migration that stopped at the follower's end would miss it.
func TestReadingAReplicatedStreamWaitsForWhatItsLeaderAcknowledged(t *testing.T) {
	s := &laggingStream{last: 5, applied: 3}
	if got := readAll(t, s); len(got) != 5 {
		t.Fatalf("read %v of a stream whose leader holds 1..5", got)
	}
	if s.gets != 1 {
		t.Errorf("asked the leader %d times, want once (at the follower's end)", s.gets)
	}

	// Positive control: a consumer on a current replica reads to the end
	// without asking the leader.
	s = &laggingStream{last: 5, applied: 5}
	if got := readAll(t, s); len(got) != 5 || s.gets != 0 {
		t.Fatalf("read %v with %d questions to the leader; want 1..5 and none", got, s.gets)
	}
}

// A read ends at the last message it can get when those after it, up to
// the stream's last sequence at the start, were deleted since.
func TestReadingAStreamEndsWhereTheRestWasDeleted(t *testing.T) {
	s := &laggingStream{last: 5, applied: 5, deleted: map[uint64]bool{4: true, 5: true}}
	if got := readAll(t, s); len(got) != 3 || got[2] != 3 {
		t.Fatalf("read %v; want 1..3", got)
	}
	if s.gets != 1 {
		t.Errorf("asked the leader %d times, want once", s.gets)
	}
}
