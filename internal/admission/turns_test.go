package admission

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"
)

// One admission at a time per lease; other leases do not wait; a caller
// whose context ends stops waiting; nothing is kept once all have left.
func TestTurnsOnePerLease(t *testing.T) {
	var tr turns
	a := client.ObjectKey{Namespace: "t", Name: "a"}
	b := client.ObjectKey{Namespace: "t", Name: "b"}
	ctx := context.Background()

	releaseA, err := tr.take(ctx, a)
	if err != nil {
		t.Fatal(err)
	}
	// The control: another lease's turn is free.
	releaseB, err := tr.take(ctx, b)
	if err != nil {
		t.Fatalf("lease b waited on lease a: %v", err)
	}
	releaseB()

	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if _, err := tr.take(short, a); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a second take on a held lease: %v, want it to wait until its context ends", err)
	}

	var mu sync.Mutex
	inside, most := 0, 0
	var wg sync.WaitGroup
	for range 20 {
		wg.Go(func() {
			release, err := tr.take(ctx, a)
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			inside++
			most = max(most, inside)
			mu.Unlock()
			time.Sleep(time.Millisecond)
			mu.Lock()
			inside--
			mu.Unlock()
			release()
		})
	}
	releaseA()
	wg.Wait()
	if most != 1 {
		t.Errorf("%d admissions held lease a's turn at once, want 1", most)
	}
	if n := tr.inFlight(); n != 0 {
		t.Errorf("%d leases kept after every admission left, want 0", n)
	}
}
