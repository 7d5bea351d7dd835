package patch

import (
	"errors"
	"regexp"

	"github.com/prometheus/client_golang/prometheus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// refusedRule finds the rule id that opens an admission denial's message,
// from a ValidatingAdmissionPolicy ("... denied request: lease.floor: ...")
// or a webhook ("... denied the request: lease.floor: ...").
var refusedRule = regexp.MustCompile(`denied (?:the )?request: ([a-z][a-z0-9-]*(?:\.[a-z][a-z0-9-]*)+): `)

// Refusal reports whether err is an admission policy's refusal of a write,
// and the id of the rule that refused it ("unknown" when the message names
// none). A conflict, a missing object or a network error is no refusal.
func Refusal(err error) (rule string, refused bool) {
	var status apierrors.APIStatus
	if err == nil || !errors.As(err, &status) {
		return "", false
	}
	if !apierrors.IsInvalid(err) && !apierrors.IsForbidden(err) && !apierrors.IsBadRequest(err) {
		return "", false
	}
	if m := refusedRule.FindStringSubmatch(status.Status().Message); m != nil {
		return m[1], true
	}
	return "unknown", true
}

// refusals counts the operator's own status writes that a policy refused:
// each is a bug (the operator computed what its rules forbid), and each
// stalls the object it was for.
var refusals = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "macrack_status_write_refusals_total",
	Help: "Status writes of the operator's that an admission policy refused, by kind and rule id. Any increase is a bug; the object stalls, keeping its finalizer, until it is fixed.",
}, []string{"kind", "rule"})

// Collectors are the metrics to register.
func Collectors() []prometheus.Collector { return []prometheus.Collector{refusals} }

// CountRefusal counts one refused status write of kind by rule.
func CountRefusal(kind, rule string) { refusals.WithLabelValues(kind, rule).Inc() }
