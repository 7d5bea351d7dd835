package journal

import (
	"slices"
	"strconv"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
)

// Keys of a chassis journal's observed map: what the node controller last
// journaled of the binding, which the lease controller writes.
const (
	observedLease = "leaseUID"
	// legacyObservedPhase is what earlier versions journaled of the phase,
	// when other controllers wrote it too. The node controller is now its
	// one writer, and compares it with its read; the key is dropped.
	legacyObservedPhase = "phase"
	// observedImages: the verified copies last journaled, as sorted
	// name@digest joined by commas. The agent reports its cache; the
	// journal's records are its changes.
	observedImages = "images"
)

// Record types of a chassis' golden copies.
const (
	RecordReplicated = "replicated"
	RecordEvicted    = "evicted"
)

// Chassis appends the records a MacNode's status write carries:
// enrolled (its first write), each phase it enters, bound and unbound as
// its binding is given and taken back, each step of a quarantine, and each
// golden copy that verified (replicated) or went (evicted). A quarantine's
// start and end are a pair, each naming the lease and tenant the outage fell on.
func Chassis(before *fleetv1alpha1.MacNodeStatus, mn *fleetv1alpha1.MacNode, now time.Time) (dropped int) {
	after := &mn.Status
	var recs []fleetv1alpha1.AuditRecord
	first := after.Audit == nil || after.Audit.NextSequence == 0
	if first {
		recs = append(recs, record("enrolled", mn.CreationTimestamp.Time, "", "", map[string]string{
			"serial": mn.Spec.Serial, "class": mn.Spec.NodeClassName,
		}))
	}
	// The node controller alone writes the phase, and journals each of its
	// writes: the phase it read is the one last journaled. The first
	// write's enrolled record says what phase Enrolled would.
	if last := before.Phase; after.Phase != last && after.Phase != "" && !(first && after.Phase == fleetv1alpha1.MacNodeEnrolled) {
		recs = append(recs, record(strings.ToLower(string(after.Phase)), now, string(after.Phase), "", map[string]string{
			"serial": mn.Spec.Serial, "from": string(last),
		}))
	}
	recs = append(recs, bindingRecords(after, mn.Spec.Serial, now)...)
	recs = append(recs, quarantineRecords(before.Quarantine, after.Quarantine, after.Binding, mn.Spec.Serial)...)
	copies := verifiedCopies(mn)
	recs = append(recs, copyRecords(after.Audit, copies, mn.Spec.Serial, now)...)
	dropped = Append(&after.Audit, recs...)
	if after.Audit != nil {
		setObserved(after.Audit, legacyObservedPhase, "")
		setObserved(after.Audit, observedImages, strings.Join(copies, ","))
	}
	if b := after.Binding; b != nil {
		setObserved(after.Audit, observedLease, string(b.LeaseUID))
	} else if after.Audit != nil {
		setObserved(after.Audit, observedLease, "")
	}
	return dropped
}

// verifiedCopies are the golden copies the chassis' agent reports Ready, as
// sorted name@digest: the journal's own form of them, kept here rather than
// read from internal/index so that journaling links no client.
func verifiedCopies(mn *fleetv1alpha1.MacNode) []string {
	if mn.Status.Reported == nil {
		return nil
	}
	var out []string
	for _, i := range mn.Status.Reported.Images {
		if i.Phase == fleetv1alpha1.ImageReady && i.Name != "" && i.Digest != "" {
			out = append(out, i.Name+"@"+i.Digest)
		}
	}
	slices.Sort(out)
	return out
}

func setObserved(j *fleetv1alpha1.AuditJournal, key, value string) {
	if value == "" {
		delete(j.Observed, key)
		if len(j.Observed) == 0 {
			j.Observed = nil
		}
		return
	}
	if j.Observed == nil {
		j.Observed = map[string]string{}
	}
	j.Observed[key] = value
}

// bindingRecords compares the binding with the one last journaled.
func bindingRecords(st *fleetv1alpha1.MacNodeStatus, serial string, now time.Time) []fleetv1alpha1.AuditRecord {
	var last string
	if st.Audit != nil {
		last = st.Audit.Observed[observedLease]
	}
	var cur string
	if st.Binding != nil {
		cur = string(st.Binding.LeaseUID)
	}
	if cur == last {
		return nil
	}
	var out []fleetv1alpha1.AuditRecord
	if last != "" {
		out = append(out, record("unbound", now, "", "", map[string]string{"serial": serial, "leaseUID": last}))
	}
	if b := st.Binding; b != nil {
		out = append(out, record("bound", b.BoundAt.Time, "", "", map[string]string{
			"serial": serial, "tenant": b.LeaseNamespace, "lease": b.LeaseName, "leaseUID": string(b.LeaseUID),
			"earliestReleaseAt": stamp(&b.EarliestReleaseAt),
		}))
	}
	return out
}

// copyRecords compares the verified copies with those last journaled: a
// record for each that joined, and each that left.
func copyRecords(j *fleetv1alpha1.AuditJournal, copies []string, serial string, now time.Time) []fleetv1alpha1.AuditRecord {
	var last []string
	if j != nil && j.Observed[observedImages] != "" {
		last = strings.Split(j.Observed[observedImages], ",")
	}
	var out []fleetv1alpha1.AuditRecord
	for _, c := range []struct {
		typ      string
		from, to []string
	}{{RecordReplicated, last, copies}, {RecordEvicted, copies, last}} {
		for _, cp := range c.to {
			if _, found := slices.BinarySearch(c.from, cp); found {
				continue
			}
			name, digest, _ := strings.Cut(cp, "@")
			out = append(out, record(c.typ, now, "", "", map[string]string{"serial": serial, "image": name, "digest": digest}))
		}
	}
	return out
}

// quarantineSteps are the quarantine loop's steps after its start, each
// with the timestamp that marks it done.
var quarantineSteps = []struct {
	typ string
	at  func(*fleetv1alpha1.QuarantineStatus) *metav1.Time
}{
	{"quarantine.reboot-requested", func(q *fleetv1alpha1.QuarantineStatus) *metav1.Time { return q.RebootRequestedAt }},
	{"quarantine.rebooted", func(q *fleetv1alpha1.QuarantineStatus) *metav1.Time { return q.RebootedAt }},
	{"quarantine.ended", func(q *fleetv1alpha1.QuarantineStatus) *metav1.Time { return q.RecoveredAt }},
}

// quarantineRecords are the steps of the quarantine loop set on this write.
// A quarantine is known by its quarantinedAt: a new one records its start
// again, and every step anew.
func quarantineRecords(before, after *fleetv1alpha1.QuarantineStatus, b *fleetv1alpha1.Binding, serial string) []fleetv1alpha1.AuditRecord {
	if after == nil {
		return nil
	}
	same := before != nil && before.QuarantinedAt.Equal(&after.QuarantinedAt)
	attrs := func() map[string]string {
		m := map[string]string{"serial": serial, "bootID": after.BootID, "quarantinedAt": stamp(&after.QuarantinedAt)}
		if b != nil {
			m["tenant"], m["lease"], m["leaseUID"] = b.LeaseNamespace, b.LeaseName, string(b.LeaseUID)
		}
		return m
	}
	var out []fleetv1alpha1.AuditRecord
	if !same {
		out = append(out, record("quarantine.started", after.QuarantinedAt.Time, "QuotaStuck", after.Evidence, attrs()))
	}
	for _, st := range quarantineSteps {
		at := st.at(after)
		if at == nil || (same && st.at(before) != nil) {
			continue
		}
		a := attrs()
		if st.typ == "quarantine.ended" {
			a["recoveredAt"] = stamp(at)
			a["outageSeconds"] = strconv.FormatInt(int64(at.Sub(after.QuarantinedAt.Time)/time.Second), 10)
		}
		out = append(out, record(st.typ, at.Time, "", "", a))
	}
	if after.NeedsAttention && !(same && before.NeedsAttention) {
		out = append(out, record("quarantine.needs-attention", after.QuarantinedAt.Time, "TooManyQuarantines", "", attrs()))
	}
	return out
}
