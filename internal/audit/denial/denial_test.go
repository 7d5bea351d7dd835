package denial

import (
	"context"
	"testing"
)

func TestAFullBufferDropsTheNewestAndCountsIt(t *testing.T) {
	dropped := 0
	b := NewBuffer(2, func() { dropped++ })
	for _, key := range []string{"req-1", "req-2", "req-3"} {
		b.Offer(Denial{Rule: "lease.floor", Key: key})
	}
	if b.Len() != 2 || dropped != 1 {
		t.Fatalf("%d waiting and %d dropped, want 2 and 1", b.Len(), dropped)
	}
	// Positive control: what waits is the first two, in order, and a
	// drained buffer takes the next one.
	ctx := context.Background()
	for _, want := range []string{"req-1", "req-2"} {
		if d, ok := b.Next(ctx); !ok || d.Key != want {
			t.Fatalf("next %q (%v), want %q", d.Key, ok, want)
		}
	}
	b.Offer(Denial{Key: "req-4"})
	if d, ok := b.Next(ctx); !ok || d.Key != "req-4" || dropped != 1 {
		t.Fatalf("after draining: next %q (%v), %d dropped", d.Key, ok, dropped)
	}
}

func TestANilBufferTakesNothingAndNextEndsWithItsContext(t *testing.T) {
	var b *Buffer
	b.Offer(Denial{Key: "req-1"}) // a decider without an exporter
	if b.Len() != 0 {
		t.Fatalf("a nil buffer holds %d", b.Len())
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, ok := NewBuffer(1, nil).Next(ctx); ok {
		t.Fatal("Next on an empty buffer returned a denial after its context ended")
	}
}
