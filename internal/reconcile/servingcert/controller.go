// Package servingcert approves and signs the host agents' kubelet serving
// certificates: CertificateSigningRequests of the signer
// macrack.io/kubelet-serving. A request is approved only when it is an
// agent's for its own Node and its chassis' enrolled address (Check), and
// denied otherwise, with the rules it failed; an approved request is
// signed with the CA the API server verifies kubelets with, after the same
// rules, whoever approved it. Requests of other signers are not looked at.
//
// With that CA as kube-apiserver's --kubelet-certificate-authority, the
// API server reaches a chassis' kubelet API only when the host there holds
// a certificate for that chassis' address: an agent cannot be certified
// for another chassis' address, nor for a name.
package servingcert

import (
	"context"
	"fmt"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
	"github.com/boualleiguie/macrack-operator/internal/conflict"
)

// +kubebuilder:rbac:groups=certificates.k8s.io,resources=certificatesigningrequests,verbs=get;list;watch
// +kubebuilder:rbac:groups=certificates.k8s.io,resources=certificatesigningrequests/approval,verbs=update
// +kubebuilder:rbac:groups=certificates.k8s.io,resources=certificatesigningrequests/status,verbs=update
// +kubebuilder:rbac:groups=certificates.k8s.io,resources=signers,resourceNames=macrack.io/kubelet-serving,verbs=approve;sign
// +kubebuilder:rbac:groups=fleet.macrack.io,resources=macnodes,verbs=get;list;watch

// Condition reasons and Event reasons.
const (
	ReasonApproved = "MacRackAgentOwnAddress"
	ReasonDenied   = "MacRackRulesFailed"
	ReasonFailed   = "MacRackSignerRefused"
	ReasonIssued   = "CertificateIssued"
)

// FieldOwner is the kubelet serving certificate controller's field manager.
// Each controller writes under its own, so that managedFields, and the
// writes suite's one-writer test, tell a status' owners apart.
const FieldOwner = "macrack-kubelet-serving"

// Reconciler approves, denies and signs the kubelet serving signer's
// requests.
type Reconciler struct {
	Client client.Client
	// CA signs the approved requests.
	CA *CA
	// AgentsNamespace holds the agents' ServiceAccounts, agent-<node>.
	AgentsNamespace string
	Clock           clock.PassiveClock
	Recorder        events.EventRecorder
}

// IsServingRequest selects the requests of the kubelet serving signer.
func IsServingRequest(obj client.Object) bool {
	csr, ok := obj.(*certificatesv1.CertificateSigningRequest)
	return ok && csr.Spec.SignerName == fleetv1alpha1.KubeletServingSigner
}

// SetupWithManager registers the controller: it watches only the kubelet
// serving signer's requests (the operator's cache holds no other,
// operator.CacheOptions).
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.CA == nil || r.Clock == nil || r.AgentsNamespace == "" {
		return fmt.Errorf("the kubelet serving certificate controller needs a CA, a clock and the agents' namespace")
	}
	return ctrl.NewControllerManagedBy(mgr).
		For(&certificatesv1.CertificateSigningRequest{}, builder.WithPredicates(predicate.NewPredicateFuncs(IsServingRequest))).
		Named("kubeletservingcsr").
		Complete(conflict.Quiet(r))
}

// Reconcile decides one request, then signs it once approved.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	log := ctrl.LoggerFrom(ctx)
	csr := &certificatesv1.CertificateSigningRequest{}
	if err := r.Client.Get(ctx, req.NamespacedName, csr); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !IsServingRequest(csr) || len(csr.Status.Certificate) > 0 ||
		hasCondition(csr, certificatesv1.CertificateDenied) || hasCondition(csr, certificatesv1.CertificateFailed) {
		return ctrl.Result{}, nil
	}
	review, err := Check(csr, r.AgentsNamespace, r.macNode(ctx))
	if err != nil {
		return ctrl.Result{}, err
	}
	approved := hasCondition(csr, certificatesv1.CertificateApproved)
	switch {
	case !approved && !review.Approved():
		msg := "denied by MacRack's kubelet serving rules: " + review.Message()
		r.setCondition(csr, certificatesv1.CertificateDenied, ReasonDenied, msg)
		if err := r.Client.SubResource("approval").Update(ctx, csr); err != nil {
			return ctrl.Result{}, fmt.Errorf("denying %s: %w", csr.Name, err)
		}
		log.Info("Denied a kubelet serving certificate request", "csr", csr.Name, "requester", csr.Spec.Username, "reasons", review.Message())
		r.Recorder.Eventf(csr, nil, corev1.EventTypeWarning, ReasonDenied, "Deny", "%s", msg)
		return ctrl.Result{}, nil
	case !approved:
		msg := fmt.Sprintf("agent of %s, for its enrolled address %s", review.Node, review.Request.IPAddresses[0])
		r.setCondition(csr, certificatesv1.CertificateApproved, ReasonApproved, msg)
		if err := r.Client.SubResource("approval").Update(ctx, csr); err != nil {
			return ctrl.Result{}, fmt.Errorf("approving %s: %w", csr.Name, err)
		}
		log.Info("Approved a kubelet serving certificate request", "csr", csr.Name, "node", review.Node)
		r.Recorder.Eventf(csr, nil, corev1.EventTypeNormal, ReasonApproved, "Approve", "approved: %s", msg)
	case !review.Approved():
		// Approved by someone else: the CA signs nothing the rules refuse.
		msg := "the macrack.io/kubelet-serving signer does not sign it: " + review.Message()
		r.setCondition(csr, certificatesv1.CertificateFailed, ReasonFailed, msg)
		if err := r.Client.Status().Update(ctx, csr); err != nil {
			return ctrl.Result{}, fmt.Errorf("failing %s: %w", csr.Name, err)
		}
		log.Info("Refused to sign an approved kubelet serving certificate request", "csr", csr.Name, "reasons", review.Message())
		r.Recorder.Eventf(csr, nil, corev1.EventTypeWarning, ReasonFailed, "Sign", "%s", msg)
		return ctrl.Result{}, nil
	}
	now := r.Clock.Now()
	cert, err := r.CA.Sign(csr, review.Request, now)
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("signing %s: %w", csr.Name, err)
	}
	csr.Status.Certificate = cert
	if err := r.Client.Status().Update(ctx, csr); err != nil {
		if apierrors.IsConflict(err) {
			// A stale read; the next pass signs again on the fresh one.
			log.V(1).Info("Signing conflicted; retrying", "csr", csr.Name)
		}
		return ctrl.Result{}, fmt.Errorf("issuing %s: %w", csr.Name, err)
	}
	log.Info("Issued a kubelet serving certificate", "csr", csr.Name, "node", review.Node, "validity", Validity(csr).String())
	r.Recorder.Eventf(csr, nil, corev1.EventTypeNormal, ReasonIssued, "Sign", "issued for %s, valid %s", review.Request.IPAddresses[0], Validity(csr))
	return ctrl.Result{}, nil
}

// macNode reads a chassis from the cache.
func (r *Reconciler) macNode(ctx context.Context) MacNodes {
	return func(name string) (*fleetv1alpha1.MacNode, error) {
		mn := &fleetv1alpha1.MacNode{}
		if err := r.Client.Get(ctx, client.ObjectKey{Name: name}, mn); err != nil {
			if apierrors.IsNotFound(err) {
				return nil, nil
			}
			return nil, err
		}
		return mn, nil
	}
}

func hasCondition(csr *certificatesv1.CertificateSigningRequest, t certificatesv1.RequestConditionType) bool {
	for _, c := range csr.Status.Conditions {
		if c.Type == t && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}

func (r *Reconciler) setCondition(csr *certificatesv1.CertificateSigningRequest, t certificatesv1.RequestConditionType, reason, msg string) {
	now := metav1.NewTime(r.Clock.Now())
	csr.Status.Conditions = append(csr.Status.Conditions, certificatesv1.CertificateSigningRequestCondition{
		Type: t, Status: corev1.ConditionTrue, Reason: reason, Message: msg, LastUpdateTime: now, LastTransitionTime: now,
	})
}
