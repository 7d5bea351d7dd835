package policy

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/open-policy-agent/opa/v1/topdown"

	"github.com/boualleiguie/macrack-operator/policies"
)

// TestACancelledQueryFailsClosed: a request's cancel stops its Rego
// evaluations, which then answer with an error, never with an empty set of
// violations; the positive control runs the same rule uncancelled.
func TestACancelledQueryFailsClosed(t *testing.T) {
	e, err := Load(context.Background(), policies.FS)
	if err != nil {
		t.Fatal(err)
	}
	r, _ := e.Rule("lease.floor")
	p, err := e.prepare(partsInput())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()

	live := topdown.NewCancel()
	if out := r.rego.decide(ctx, p, live); len(out.errs) != 0 || len(out.violations) != 0 {
		t.Fatalf("uncancelled: want an allowed answer, got %+v", out)
	}

	cancelled := topdown.NewCancel()
	cancelled.Cancel()
	out := r.rego.decide(ctx, p, cancelled)
	if len(out.errs) == 0 || !strings.Contains(strings.Join(out.errs, " "), "cancel") {
		t.Fatalf("cancelled: want a cancellation error, got %+v", out)
	}
}

// TestCancelOnDoneFiresWithTheContext: the cancel fires when the request's
// context ends, and not before; release unregisters it.
func TestCancelOnDoneFiresWithTheContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	c, _ := cancelOnDone(ctx)
	if c.Cancelled() {
		t.Fatal("cancelled before the context ended")
	}
	cancel()
	deadline := time.Now().Add(10 * time.Second)
	for !c.Cancelled() {
		if time.Now().After(deadline) {
			t.Fatal("not cancelled 10s after the context ended")
		}
		time.Sleep(time.Millisecond)
	}

	ctx2, cancel2 := context.WithCancel(context.Background())
	defer cancel2()
	_, release := cancelOnDone(ctx2)
	if !release() {
		t.Fatal("release found the cancel already fired or released")
	}
}
