package images

import (
	"context"
	"testing"
	"time"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
	"github.com/boualleiguie/macrack-operator/internal/golden"
)

// TestAPrePullYieldsToAnOnDemandPull: while an on-demand pull runs, a
// pre-pull fetches no chunk; once the on-demand pull is done it goes on and
// ends Ready. The positive control: a pre-pull alone runs at once.
func TestAPrePullYieldsToAnOnDemandPull(t *testing.T) {
	env := startRegistry(t)
	wanted := env.pushRandom(t, "goldens/wanted", 6, 256<<10, 21, golden.LZ4)
	booked := env.pushRandom(t, "goldens/booked", 6, 256<<10, 22, golden.LZ4)
	se := env.newStore(t, t.TempDir(), nil)

	// The on-demand pull's chunk 2 is held until the test lets it go.
	release := make(chan struct{})
	held := make(chan struct{}, 1)
	se.fetches.setHook(func(ctx context.Context, desc ocispec.Descriptor, _ int) error {
		if desc.Digest == wanted.g.Chunks[2].Layer.Digest {
			select {
			case held <- struct{}{}:
			default:
			}
			select {
			case <-release:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return nil
	})
	wantedImg, bookedImg := macOSImage("wanted", wanted.ref), macOSImage("booked", booked.ref)
	se.s.Ensure(wantedImg, false)
	select {
	case <-held:
	case <-time.After(20 * time.Second):
		t.Fatal("the on-demand pull never reached its chunk 2")
	}
	se.s.Ensure(bookedImg, true)
	time.Sleep(300 * time.Millisecond) // long enough for a pre-pull that did not yield to fetch its chunks
	for _, c := range booked.g.Chunks {
		if n := se.fetches.count(c.Layer.Digest); n != 0 {
			t.Fatalf("the pre-pull fetched chunk %d (%d times) while an on-demand pull ran", c.Index, n)
		}
	}
	close(release)
	se.ensureReady(t, wantedImg)
	se.await(t, bookedImg, "the pre-pull, Ready once the on-demand pull is done", func(st State) bool {
		return st.Phase == fleetv1alpha1.ImageReady
	})

	// Positive control: alone, a pre-pull runs at once.
	alone := env.pushRandom(t, "goldens/alone", 3, 256<<10, 23, golden.LZ4)
	aloneImg := macOSImage("alone", alone.ref)
	se.s.Ensure(aloneImg, true)
	deadline := time.Now().Add(20 * time.Second)
	for !se.s.Puller.Ready("alone", alone.g.Manifest.Digest) {
		if time.Now().After(deadline) {
			t.Fatalf("a pre-pull with no on-demand pull beside it never finished: %+v", se.s.Puller.Progress("alone"))
		}
		time.Sleep(5 * time.Millisecond)
	}
}
