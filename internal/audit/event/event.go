// Package event is the audit stream's format: each journaled record, each
// deletion and each refusal as a CloudEvent (structured JSON) with a
// deterministic id that consumers deduplicate on. It knows no sink.
package event

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2/event"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
	"github.com/boualleiguie/macrack-operator/internal/audit/denial"
)

// Data is every record's CloudEvents data, as JSON.
type Data struct {
	Kind       string            `json:"kind"`
	UID        string            `json:"uid"`
	Namespace  string            `json:"namespace,omitempty"`
	Name       string            `json:"name"`
	Sequence   int64             `json:"sequence,omitempty"`
	Reason     string            `json:"reason,omitempty"`
	Message    string            `json:"message,omitempty"`
	Attributes map[string]string `json:"attributes,omitempty"`
}

// Origin says where records come from: the CloudEvents source is
// macrack://<cluster>/<controller>.
type Origin struct {
	Cluster string
}

func (o Origin) source(controller string) string {
	return "macrack://" + o.Cluster + "/" + controller
}

// ID is a record's deterministic id: the object's kind and UID and the
// record's sequence number. A consumer deduplicates on it.
func ID(kind string, uid string, seq int64) string {
	return kind + "/" + uid + "/" + strconv.FormatInt(seq, 10)
}

// FactID is the deterministic id of a record derived from a fact its
// object keeps (an instance's: issue 39), rather than journaled under a
// sequence: the object's kind and UID, the record's type and the fact's
// own time, to the second. Whoever derives the fact again, after a
// restart or under a new leader, names it the same.
func FactID(kind, uid, typ string, at time.Time) string {
	return kind + "/" + uid + "/" + typ + "/" + at.UTC().Format(time.RFC3339)
}

// DeletedID is the id of the one record an object's deletion makes.
func DeletedID(kind, uid string) string { return kind + "/" + uid + "/deleted" }

// Type is a record's CloudEvents type: io.macrack.<kind>.<transition>.
func Type(kind, transition string) string {
	return fleetv1alpha1.AuditEventTypePrefix + kind + "." + transition
}

func subject(obj metav1.Object) string {
	if obj.GetNamespace() == "" {
		return obj.GetName()
	}
	return obj.GetNamespace() + "/" + obj.GetName()
}

// Event makes one journaled record a CloudEvent.
func (o Origin) Event(kind, controller string, obj metav1.Object, rec fleetv1alpha1.AuditRecord) (cloudevents.Event, error) {
	return o.event(ID(kind, string(obj.GetUID()), rec.Sequence), Type(kind, rec.Type), controller, subject(obj), rec.Time.Time, Data{
		Kind: kind, UID: string(obj.GetUID()), Namespace: obj.GetNamespace(), Name: obj.GetName(),
		Sequence: rec.Sequence, Reason: rec.Reason, Message: rec.Message, Attributes: rec.Attributes,
	})
}

// Fact makes a record derived from a fact of obj a CloudEvent, under
// FactID: it carries no sequence.
func (o Origin) Fact(kind, controller string, obj metav1.Object, rec fleetv1alpha1.AuditRecord) (cloudevents.Event, error) {
	return o.event(FactID(kind, string(obj.GetUID()), rec.Type, rec.Time.Time), Type(kind, rec.Type), controller, subject(obj), rec.Time.Time, Data{
		Kind: kind, UID: string(obj.GetUID()), Namespace: obj.GetNamespace(), Name: obj.GetName(),
		Reason: rec.Reason, Message: rec.Message, Attributes: rec.Attributes,
	})
}

// Deleted is the last record of an object whose audit finalizer comes off.
func (o Origin) Deleted(kind, controller string, obj metav1.Object, now time.Time) (cloudevents.Event, error) {
	at := now
	if t := obj.GetDeletionTimestamp(); t != nil {
		at = t.Time
	}
	return o.event(DeletedID(kind, string(obj.GetUID())), Type(kind, "deleted"), controller, subject(obj), at, Data{
		Kind: kind, UID: string(obj.GetUID()), Namespace: obj.GetNamespace(), Name: obj.GetName(),
	})
}

func (o Origin) event(id, typ, controller, subj string, at time.Time, data Data) (cloudevents.Event, error) {
	ev := cloudevents.New(cloudevents.CloudEventsVersionV1)
	ev.SetID(id)
	ev.SetType(typ)
	ev.SetSource(o.source(controller))
	ev.SetSubject(subj)
	ev.SetTime(at.UTC())
	if err := ev.SetData(cloudevents.ApplicationJSON, data); err != nil {
		return ev, fmt.Errorf("encoding the data of %s: %w", id, err)
	}
	return ev, ev.Validate()
}

// Denial makes a refusal a CloudEvent, with the rule, the code and the
// policy revision.
func (o Origin) Denial(d denial.Denial) (cloudevents.Event, error) {
	subj := d.Name
	if d.Namespace != "" {
		subj = d.Namespace + "/" + d.Name
	}
	id := "denial/" + digest(d.Layer, d.Rule, d.Code, d.Revision, d.Kind, d.Namespace, d.Name, d.UID, d.Key)
	return o.event(id, Type("denial", d.Layer), "macrack-"+d.Layer, subj, d.At, Data{
		Kind: d.Kind, UID: d.UID, Namespace: d.Namespace, Name: d.Name, Reason: d.Code, Message: d.Message,
		Attributes: map[string]string{"rule": d.Rule, "code": d.Code, "revision": d.Revision, "layer": d.Layer,
			"operation": d.Operation, "user": d.User},
	})
}

// digest is a short, stable hash of parts.
func digest(parts ...string) string {
	h := sha256.New()
	for _, p := range parts {
		h.Write([]byte(p))
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil))[:32]
}
