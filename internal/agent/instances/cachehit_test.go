package instances

import (
	"context"
	"testing"

	computev1alpha1 "github.com/boualleiguie/macrack-operator/api/compute/v1alpha1"
)

func (rg *rig) cacheHits() int64 {
	for _, c := range rg.r.Images.PullCounters() {
		if c.Name == testImage {
			return c.CacheHits
		}
	}
	return 0
}

// An instance whose golden was in the cache when it asked is a cache hit,
// counted once, when its disk is cloned, however often it is reconciled
// after; one that reported waiting for the pull is not.
func TestAnInstanceThatDidNotWaitForItsGoldenIsACacheHitCountedOnce(t *testing.T) {
	rg := newRig(t, "ci-1", "ci-2")
	rg.run("ci-1")
	for range 3 {
		if err := rg.reconcile("ci-1"); err != nil {
			t.Fatal(err)
		}
	}
	if got := rg.cacheHits(); got != 1 {
		t.Fatalf("after ci-1 ran: %d cache hits, want 1", got)
	}

	// ci-2 reported its golden pulling (a reconcile before the pull ended).
	ci2 := rg.instance("ci-2")
	ci2.Status.Runtime = &computev1alpha1.RuntimeStatus{Phase: computev1alpha1.VMPulling, Message: "pulling golden: 50%"}
	if err := rg.c.Status().Update(context.Background(), ci2); err != nil {
		t.Fatal(err)
	}
	rg.run("ci-2")
	if got := rg.cacheHits(); got != 1 {
		t.Fatalf("after ci-2, which waited for the pull, ran: %d cache hits, want 1", got)
	}
}
