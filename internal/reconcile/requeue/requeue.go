// Package requeue combines the results of a reconcile's phases: the pass
// comes back at the soonest time any phase asked for.
package requeue

import ctrl "sigs.k8s.io/controller-runtime"

// Lowest returns the result with the lowest non-zero RequeueAfter, or a
// zero result when none asks to come back.
func Lowest(results ...ctrl.Result) ctrl.Result {
	var out ctrl.Result
	for _, r := range results {
		if r.RequeueAfter > 0 && (out.RequeueAfter == 0 || r.RequeueAfter < out.RequeueAfter) {
			out = r
		}
	}
	return out
}
