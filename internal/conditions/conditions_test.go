package conditions

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestSet(t *testing.T) {
	t0 := metav1.NewTime(time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC))
	t1 := metav1.NewTime(t0.Add(time.Hour))
	var list []metav1.Condition

	if !Set(&list, False("Ready", "Waiting", "a"), 1, t0) {
		t.Fatal("a new condition counts as a flip")
	}
	if Set(&list, False("Ready", "StillWaiting", "b"), 2, t1) {
		t.Fatal("the same status is not a flip")
	}
	if got := list[0]; !got.LastTransitionTime.Equal(&t0) || got.ObservedGeneration != 2 || got.Reason != "StillWaiting" {
		t.Fatalf("an unflipped condition keeps its transition time and takes the new generation and reason, got %+v", got)
	}
	if !Set(&list, True("Ready", "Done", "c"), 3, t1) || !list[0].LastTransitionTime.Equal(&t1) {
		t.Fatalf("a flip stamps the transition time, got %+v", list[0])
	}
	Set(&list, True("Bound", "Bound", ""), 3, t1)
	if list[0].Type != "Bound" || list[1].Type != "Ready" {
		t.Fatalf("conditions are kept sorted by type, got %v", list)
	}
}
