package admission

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/boualleiguie/macrack-operator/internal/audit/denial"
	"github.com/boualleiguie/macrack-operator/internal/audit/event"
)

// TestEachRefusalGoesToTheAuditBufferAndAFullBufferCounts: a refused lease
// becomes one denial with its rule, code and revision; the admitted lease
// beside it none; and a refusal that finds the buffer full is dropped and
// counted, never waited on.
func TestEachRefusalGoesToTheAuditBufferAndAFullBufferCounts(t *testing.T) {
	v := validator(t)
	dropped := 0
	v.Denials = denial.NewBuffer(1, func() { dropped++ })
	leaseKind := metav1.GroupVersionKind{Group: "leasing.macrack.io", Version: "v1alpha1", Kind: "MacNodeLease"}
	lease := func(d string) map[string]any {
		return map[string]any{"apiVersion": "leasing.macrack.io/v1alpha1", "kind": "MacNodeLease",
			"metadata": map[string]any{"name": "mini", "namespace": "t"},
			"spec":     map[string]any{"nodeClassName": "m4", "minimumDuration": d}}
	}
	ok := request(t, leaseKind, "alice", lease("24h"))
	if resp := v.Handle(context.Background(), ok); !resp.Allowed || v.Denials.Len() != 0 {
		t.Fatalf("an admitted lease: allowed=%v, %d denials buffered", resp.Allowed, v.Denials.Len())
	}
	bad := request(t, leaseKind, "alice", lease("23h"))
	bad.UID, bad.Namespace, bad.Name = types.UID("req-1"), "t", "mini" // as the API server fills them
	if resp := v.Handle(context.Background(), bad); resp.Allowed {
		t.Fatal("a 23h lease was admitted")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	d, got := v.Denials.Next(ctx)
	if !got || d.Rule != "lease.floor" || d.Code != "lease.floor" || d.Revision != v.Engine.Revision() ||
		d.Layer != "webhook" || d.User != "alice" || d.Namespace != "t" || d.Key != "req-1" {
		t.Fatalf("the denial: %+v", d)
	}
	v.Handle(context.Background(), bad)
	v.Handle(context.Background(), bad)
	if v.Denials.Len() != 1 || dropped != 1 {
		t.Fatalf("a buffer of 1 after two refusals: %d buffered, %d dropped; want 1 and 1", v.Denials.Len(), dropped)
	}
	ev, err := event.Origin{Cluster: "c"}.Denial(d)
	if err != nil || ev.Type() != "io.macrack.denial.webhook" {
		t.Fatalf("the denial as a record: %v %v", ev.Type(), err)
	}
	again, _ := event.Origin{Cluster: "c"}.Denial(d)
	if again.ID() != ev.ID() {
		t.Fatalf("the same refusal made two ids: %s, %s", ev.ID(), again.ID())
	}
}
