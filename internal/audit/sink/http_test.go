package sink

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
	"github.com/boualleiguie/macrack-operator/internal/audit/event"
)

// TestTheHTTPSinkSendsCloudEventsAndTakesOnlyA2xxAsAcknowledged: a real
// HTTP server decodes each POST as a CloudEvent; a 503 is an error the
// exporter retries, and the same record sent again is accepted.
func TestTheHTTPSinkSendsCloudEventsAndTakesOnlyA2xxAsAcknowledged(t *testing.T) {
	var mu sync.Mutex
	var got []string
	status := http.StatusServiceUnavailable
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ev, err := cehttp.NewEventFromHTTPRequest(r)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if status == http.StatusOK {
			got = append(got, ev.ID()+" "+ev.Type()+" "+ev.Source()+" "+ev.Subject())
		}
		w.WriteHeader(status)
	}))
	defer srv.Close()

	lease := &metav1.ObjectMeta{Name: "mini", Namespace: "tenant-a", UID: "l-1"}
	ev, err := event.Origin{Cluster: "prod"}.Event("lease", "macrack-lease", lease, fleetv1alpha1.AuditRecord{
		Sequence: 7, Type: "bound", Time: metav1.NewTime(time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)),
	})
	if err != nil {
		t.Fatal(err)
	}
	h, err := NewHTTP(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Publish(context.Background(), ev); err == nil {
		t.Fatal("a 503 was taken as acknowledged")
	}
	mu.Lock()
	status = http.StatusOK
	mu.Unlock()
	if err := h.Publish(context.Background(), ev); err != nil {
		t.Fatalf("a 200: %v", err)
	}
	want := "lease/l-1/7 io.macrack.lease.bound macrack://prod/macrack-lease tenant-a/mini"
	if len(got) != 1 || got[0] != want {
		t.Fatalf("the server received %q, want [%q]", got, want)
	}
}

// TestAReceiverThatNeverAnswersIsAFailure: the send gives up at its
// timeout, and the exporter backs off, rather than wait for ever.
func TestAReceiverThatNeverAnswersIsAFailure(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-release }))
	defer srv.Close()
	defer close(release)
	h, err := NewHTTP(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	h.timeout = 50 * time.Millisecond
	lease := &metav1.ObjectMeta{Name: "mini", Namespace: "tenant-a", UID: "l-1"}
	ev, _ := event.Origin{Cluster: "prod"}.Event("lease", "macrack-lease", lease, fleetv1alpha1.AuditRecord{Sequence: 1, Type: "created", Time: metav1.Now()})
	done := make(chan error, 1)
	go func() { done <- h.Publish(context.Background(), ev) }()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("an unanswered send was taken as acknowledged")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the send did not give up")
	}
}
