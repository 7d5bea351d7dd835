package requeue

import (
	"testing"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"
)

func TestLowest(t *testing.T) {
	for _, tc := range []struct {
		name    string
		results []ctrl.Result
		want    time.Duration
	}{
		{"no result asks for nothing", nil, 0},
		{"zero results ask for nothing", []ctrl.Result{{}, {}}, 0},
		{"a zero result never wins over a requeue", []ctrl.Result{{}, {RequeueAfter: time.Minute}}, time.Minute},
		{"a requeue is kept when the next asks for nothing", []ctrl.Result{{RequeueAfter: time.Minute}, {}}, time.Minute},
		{"the soonest of several wins", []ctrl.Result{{RequeueAfter: time.Hour}, {RequeueAfter: time.Second}, {RequeueAfter: time.Minute}}, time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Lowest(tc.results...).RequeueAfter; got != tc.want {
				t.Fatalf("Lowest(%v) = %s, want %s", tc.results, got, tc.want)
			}
		})
	}
}
