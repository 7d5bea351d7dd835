package v1alpha1

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
)

// MacNodeLeasePhase is where a lease is in its life.
// +kubebuilder:validation:Enum=Pending;Bound;Held;Released
type MacNodeLeasePhase string

// The phases of a MacNodeLease.
const (
	// LeasePending: no chassis is bound yet.
	LeasePending MacNodeLeasePhase = "Pending"
	// LeaseBound: a chassis is the tenant's.
	LeaseBound MacNodeLeasePhase = "Bound"
	// LeaseHeld: deleted before earliestReleaseAt; the chassis stays with the
	// tenant, and takes no one else, until then. The lease stays Held
	// through the release that follows, until Released.
	LeaseHeld MacNodeLeasePhase = "Held"
	// LeaseReleased: the chassis went back to the free pool.
	LeaseReleased MacNodeLeasePhase = "Released"
)

// images is fixed once the lease is written. The rule sits on the spec, not
// on images: a rule on a field runs only when both the old and the new value
// exist, so one there would let a list be added or removed.
// +kubebuilder:validation:XValidation:rule="has(self.images) == has(oldSelf.images) && (!has(self.images) || self.images == oldSelf.images)",message="images is immutable: the chassis pulls them at bind",fieldPath=".images"

// MacNodeLeaseSpec asks for one whole chassis of a class.
type MacNodeLeaseSpec struct {
	// nodeClassName names the MacNodeClass to lease.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	NodeClassName string `json:"nodeClassName"`

	// minimumDuration is how long the chassis is the tenant's at least, as a
	// duration string such as "24h", "36h30m" or "90000s": hours, minutes and
	// seconds, in that order, each at most six digits with an optional
	// fraction, so that every value fits a Go duration (those end at
	// 2562047h). It is never below 24h nor above 87600h (ten years), and
	// never shrinks once the lease is bound. The defaulting webhook writes
	// "24h" when it is unset; without that webhook an unset value is refused.
	// +required
	// +kubebuilder:validation:MinLength=2
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:Pattern=`^[0-9]{1,6}(\.[0-9]+)?(h([0-9]{1,6}(\.[0-9]+)?m)?([0-9]{1,6}(\.[0-9]+)?s)?|m([0-9]{1,6}(\.[0-9]+)?s)?|s)$`
	MinimumDuration string `json:"minimumDuration"`

	// images are MacOSImage names to pull onto the chassis at bind, before
	// the tenant asks for an instance; the ImagesReady condition says when
	// they have verified. The chassis never evicts them while the lease
	// holds it. They are read at bind, so they are immutable.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=8
	// +kubebuilder:validation:items:MaxLength=253
	Images []string `json:"images,omitempty"`
}

// MacNodeLeaseStatus is written by the operator. Every transition stamps its
// time here, for billing.
type MacNodeLeaseStatus struct {
	// phase is Pending, Bound, Held or Released.
	// +optional
	Phase MacNodeLeasePhase `json:"phase,omitempty"`

	// observedGeneration is the generation the operator last reconciled.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// nodeName is the Node (and MacNode) bound to this lease.
	// +optional
	NodeName string `json:"nodeName,omitempty"`

	// serial is the bound chassis' serial.
	// +optional
	Serial string `json:"serial,omitempty"`

	// boundAt is when the chassis was claimed.
	// +optional
	BoundAt *metav1.Time `json:"boundAt,omitempty"`

	// earliestReleaseAt is boundAt plus minimumDuration.
	// +optional
	EarliestReleaseAt *metav1.Time `json:"earliestReleaseAt,omitempty"`

	// heldAt is when a delete before earliestReleaseAt put the lease in Held.
	// +optional
	HeldAt *metav1.Time `json:"heldAt,omitempty"`

	// releasedAt is when the chassis went back to the pool.
	// +optional
	ReleasedAt *metav1.Time `json:"releasedAt,omitempty"`

	// conditions: Bound, Held, Released.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// audit is this object's journal of unexported transitions; see
	// AuditJournal for who writes what.
	// +optional
	Audit *fleetv1alpha1.AuditJournal `json:"audit,omitempty"`

	// reservations are the instances the validating webhook has admitted on
	// this lease that the API server may not have stored yet. Each counts
	// toward the chassis' cap until its instance is stored, or for
	// ReservationTTL if it never is (a later admission step refused it).
	// The webhook is their one writer, under the field manager
	// ReservationFieldManager, with the lease's resourceVersion: it admits
	// an instance only when the live instances and these stay within the
	// class's vmCapacity.
	// +optional
	// +listType=map
	// +listMapKey=uid
	// +kubebuilder:validation:MaxItems=16
	Reservations []InstanceReservation `json:"reservations,omitempty"`

	// reservationsListVersion is the resourceVersion of the list of the
	// lease's instances that the webhook last decided on. The webhook lists
	// them again at least this new, so that a reservation it dropped because
	// its instance was listed is never counted by a list without it.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	ReservationsListVersion string `json:"reservationsListVersion,omitempty"`
}

// InstanceReservation is one instance admitted and not yet stored.
type InstanceReservation struct {
	// uid is the admitted instance's metadata.uid.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=64
	UID string `json:"uid"`
	// name is the admitted instance's name.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
	// at is when the webhook admitted it.
	// +required
	At metav1.Time `json:"at"`
}

// ReservationTTL is how long a reservation whose instance was never stored
// counts: twice the validating webhook's timeoutSeconds (10), past which no
// request it admitted can still be stored.
const ReservationTTL = 20 * time.Second

// ReservationFieldManager is the field manager of the one writer of
// status.reservations, the validating webhook.
const ReservationFieldManager = "macrack-admission"

// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=mnl,categories=macrack
// The columns read only fields the operator writes anyway, at a transition:
// a column that changed with time would cost a write per lease per tick.
// Reason is the Bound condition's, which says why a Pending lease waits.
// Committed Until is a string, not a date: kubectl renders a date as the
// time since it, and a future one as <invalid>.
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Bound")].reason`
// +kubebuilder:printcolumn:name="Class",type=string,JSONPath=`.spec.nodeClassName`
// +kubebuilder:printcolumn:name="Serial",type=string,JSONPath=`.status.serial`
// +kubebuilder:printcolumn:name="Bound At",type=date,JSONPath=`.status.boundAt`
// +kubebuilder:printcolumn:name="Committed Until",type=string,format=date-time,JSONPath=`.status.earliestReleaseAt`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`

// MacNodeLease gives its namespace one whole chassis of a class, for at least
// minimumDuration.
//
// Once the lease is bound (status.boundAt is set, as the lease controller
// does when it claims a chassis, and never clears), spec.nodeClassName is
// immutable: the chassis was chosen by that class, and admission and
// placement must read the same one. A pending lease may change class.
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.status) || !has(oldSelf.status.boundAt) || self.spec.nodeClassName == oldSelf.spec.nodeClassName",message="spec.nodeClassName is immutable once the lease is bound",fieldPath=".spec.nodeClassName"
type MacNodeLease struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec MacNodeLeaseSpec `json:"spec"`
	// +optional
	Status MacNodeLeaseStatus `json:"status,omitempty"`
}

// +kubebuilder:object:root=true

// MacNodeLeaseList contains a list of MacNodeLease.
type MacNodeLeaseList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []MacNodeLease `json:"items"`
}
