package guest

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestTheJournalKeepsItsNewestLinesWithinItsBounds(t *testing.T) {
	j := NewJournal(JournalOptions{Lines: 3, Bytes: 1 << 10})
	for _, l := range []string{"one", "two", "three", "four", "five"} {
		j.Add(l)
	}
	if got := streamAll(t, j); got != "three\nfour\nfive\n" {
		t.Fatalf("a journal of 3 lines holds %q", got)
	}

	j = NewJournal(JournalOptions{Bytes: 10})
	j.Add("12345")
	j.Add("67890")
	j.Add("abc")
	if got := streamAll(t, j); got != "67890\nabc\n" {
		t.Fatalf("a journal of 10 bytes holds %q", got)
	}

	// One line over the whole bound stays, alone: the newest is never lost.
	j.Add(strings.Repeat("x", 20))
	if j.Len() != 1 {
		t.Fatalf("%d lines after one of twice the bound, want 1", j.Len())
	}
}

func TestTheJournalSplitsAndBoundsLines(t *testing.T) {
	j := NewJournal(JournalOptions{})
	j.Add("first\nsecond\r\n")
	j.Add(strings.Repeat("é", maxJournalLine))
	got := strings.Split(streamAll(t, j), "\n")
	if got[0] != "first" || got[1] != "second" {
		t.Fatalf("a line with a newline became %q", got[:2])
	}
	if n := len(got[2]); n > maxJournalLine+len("…") || !strings.HasSuffix(got[2], "…") || !strings.HasPrefix(got[2], "é") {
		t.Fatalf("a long line was kept as %d bytes ending %q", n, got[2][n-8:])
	}
	var nilJournal *Journal
	nilJournal.Add("nothing happens")
	nilJournal.Addf("nor %s", "here")
	if nilJournal.Len() != 0 {
		t.Fatal("a nil journal has lines")
	}
}

// A follower that fell behind the ring's bound goes on with what is left.
func TestAFollowerThatFellBehindSkipsWhatTheJournalDropped(t *testing.T) {
	j := NewJournal(JournalOptions{Lines: 2})
	j.Add("old")
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	w := &gatedWriter{entered: make(chan struct{}), gate: make(chan struct{})}
	done := make(chan error, 1)
	go func() { done <- j.Stream(ctx, w, LogOptions{Follow: true}) }()
	<-w.entered // writing "old", held at the gate
	for _, l := range []string{"a", "b", "c", "d"} {
		j.Add(l)
	}
	close(w.gate)
	eventually(t, "the newest lines", func() bool { return strings.HasSuffix(w.String(), "c\nd\n") })
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Stream: %v", err)
	}
	if got := w.String(); got != "old\nc\nd\n" {
		t.Fatalf("the follower wrote %q, want the lines the ring still had", got)
	}
}

// gatedWriter holds its first write until its gate opens.
type gatedWriter struct {
	syncBuffer
	entered chan struct{}
	gate    chan struct{}
	once    sync.Once
}

func (w *gatedWriter) Write(p []byte) (int, error) {
	w.once.Do(func() {
		close(w.entered)
		<-w.gate
	})
	return w.syncBuffer.Write(p)
}

func TestStreamStopsAtItsByteLimitEvenWhenFollowing(t *testing.T) {
	j := NewJournal(JournalOptions{})
	j.Add("abcdef")
	limit := int64(4)
	var b bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	start := time.Now()
	if err := j.Stream(ctx, &b, LogOptions{Follow: true, LimitBytes: &limit}); err != nil || b.String() != "abcd" {
		t.Fatalf("Stream: %q, %v", b.String(), err)
	}
	if time.Since(start) > waitLimit/2 {
		t.Fatal("a follow that reached its limit went on waiting")
	}
}
