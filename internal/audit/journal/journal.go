// Package journal is the audit journal each object carries in its status:
// the records of its transitions, numbered without gaps, pruned once a sink
// acknowledged them. It is pure: the controllers that journal a status
// write link no sink and no event format (test/boundaries holds them to it).
package journal

import (
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
)

// Append numbers recs, adds them to the journal, and prunes the records a
// sink already acknowledged. It returns how many unexported records had to
// go to keep the journal within MaxAuditRecords: they are lost, and the
// caller counts them.
func Append(j **fleetv1alpha1.AuditJournal, recs ...fleetv1alpha1.AuditRecord) (dropped int) {
	if len(recs) == 0 {
		return 0
	}
	if *j == nil {
		*j = &fleetv1alpha1.AuditJournal{}
	}
	jr := *j
	if jr.NextSequence == 0 {
		jr.NextSequence = 1
	}
	kept := jr.Records[:0:0]
	for _, r := range jr.Records {
		if r.Sequence > jr.ExportedSequence {
			kept = append(kept, r)
		}
	}
	for _, r := range recs {
		r.Sequence = jr.NextSequence
		jr.NextSequence++
		kept = append(kept, r)
	}
	if over := len(kept) - fleetv1alpha1.MaxAuditRecords; over > 0 {
		kept = kept[over:]
		dropped = over
	}
	jr.Records = kept
	return dropped
}

// record builds one unnumbered record.
func record(typ string, at time.Time, reason, message string, attrs map[string]string) fleetv1alpha1.AuditRecord {
	if len(message) > 1024 {
		message = strings.ToValidUTF8(message[:1021], "") + "..." // never half a character
	}
	for k, v := range attrs {
		if v == "" {
			delete(attrs, k)
		}
	}
	return fleetv1alpha1.AuditRecord{Type: typ, Time: metav1.NewTime(at.UTC().Truncate(time.Second)), Reason: reason, Message: message, Attributes: attrs}
}

func stamp(t *metav1.Time) string {
	if t == nil {
		return ""
	}
	return t.UTC().Format(time.RFC3339)
}

// timeOr returns t, or fallback when t is unset.
func timeOr(t *metav1.Time, fallback time.Time) time.Time {
	if t == nil {
		return fallback
	}
	return t.Time
}

// conditionChanges lists the conditions whose status or reason differ
// between before and after: each is a transition a tenant sees. A message
// alone changing is not one, nor a condition that starts out false.
func conditionChanges(before, after []metav1.Condition, now time.Time) []fleetv1alpha1.AuditRecord {
	var out []fleetv1alpha1.AuditRecord
	for _, c := range after {
		var old *metav1.Condition
		for i := range before {
			if before[i].Type == c.Type {
				old = &before[i]
			}
		}
		if old != nil && old.Status == c.Status && old.Reason == c.Reason {
			continue
		}
		if old == nil && c.Status != metav1.ConditionTrue {
			continue // a condition born false records nothing yet
		}
		at := now
		if !c.LastTransitionTime.IsZero() {
			at = c.LastTransitionTime.Time
		}
		out = append(out, record("condition", at, c.Reason, c.Message, map[string]string{
			"condition": c.Type, "status": string(c.Status),
		}))
	}
	return out
}
