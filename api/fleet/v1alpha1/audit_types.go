package v1alpha1

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// The audit and billing stream. Every transition of a lease, a chassis or an
// image is first written into its object, as an AuditRecord, in the same
// write as the transition itself; the exporter then publishes it and, when
// the journal needs the room, advances the object's exportedSequence. An
// instance's records are derived from the facts its status keeps (its
// placement, its run's start, its last stop, its wipe). A record therefore
// lives in the API until a sink has acknowledged it.
const (
	// AuditFinalizer keeps a released lease, or a deleted instance,
	// chassis or image, until its final audit records are acknowledged. Only the operator removes it
	// (rule audit.finalizer).
	AuditFinalizer = "macrack.io/audit"

	// MaxAuditRecords bounds a journal. A journal is pruned of exported
	// records whenever its writer appends; it fills only while the sink is
	// down, and each object makes few transitions.
	MaxAuditRecords = 64

	// AuditEventTypePrefix starts every record's CloudEvents type:
	// io.macrack.<kind>.<record type>.
	AuditEventTypePrefix = "io.macrack."
)

// The kinds of the stream, as they appear in event types, ids and subjects.
const (
	AuditKindLease    = "lease"
	AuditKindInstance = "instance"
	AuditKindChassis  = "chassis"
	AuditKindImage    = "image"
	AuditKindDenial   = "denial"
)

// AuditJournal is an object's unexported transitions. records and
// nextSequence have one writer, the object's controller; exportedSequence
// has one writer, the exporter.
type AuditJournal struct {
	// nextSequence is the sequence number the next record will take. The
	// first record is 1.
	// +optional
	// +kubebuilder:validation:Minimum=0
	NextSequence int64 `json:"nextSequence,omitempty"`

	// exportedSequence is the highest sequence number a sink acknowledged.
	// +optional
	// +kubebuilder:validation:Minimum=0
	ExportedSequence int64 `json:"exportedSequence,omitempty"`

	// records are the transitions not yet pruned, oldest first.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=64
	Records []AuditRecord `json:"records,omitempty"`

	// observed is what the journal's writer last journaled of facts that
	// another writes (a chassis' binding and its golden copies).
	// +optional
	Observed map[string]string `json:"observed,omitempty"`
}

// AuditRecord is one transition.
type AuditRecord struct {
	// sequence numbers the object's records from 1, without gaps.
	// +kubebuilder:validation:Minimum=1
	Sequence int64 `json:"sequence"`
	// type is the transition, e.g. bound, held, released, condition,
	// quarantine.started.
	// +kubebuilder:validation:MaxLength=63
	Type string `json:"type"`
	// time is when the transition happened, on the operator's clock.
	Time metav1.Time `json:"time"`
	// reason is a CamelCase reason, where the transition has one.
	// +optional
	// +kubebuilder:validation:MaxLength=128
	Reason string `json:"reason,omitempty"`
	// message is for people.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Message string `json:"message,omitempty"`
	// attributes are the transition's facts: serial, tenant, lease,
	// timestamps, evidence.
	// +optional
	// +kubebuilder:validation:MaxProperties=32
	Attributes map[string]string `json:"attributes,omitempty"`
}

// Unexported returns the records past exportedSequence.
func (j *AuditJournal) Unexported() []AuditRecord {
	if j == nil {
		return nil
	}
	var out []AuditRecord
	for _, r := range j.Records {
		if r.Sequence > j.ExportedSequence {
			out = append(out, r)
		}
	}
	return out
}

// Next is the sequence number the next record will take; 0 for a journal
// not written yet. A write that moved it numbered records.
func (j *AuditJournal) Next() int64 {
	if j == nil {
		return 0
	}
	return j.NextSequence
}

// Backlog counts the records not yet acknowledged.
func (j *AuditJournal) Backlog() int64 {
	if j == nil || j.NextSequence == 0 {
		return 0
	}
	return max(0, j.NextSequence-1-j.ExportedSequence)
}
