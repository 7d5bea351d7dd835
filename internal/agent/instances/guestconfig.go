package instances

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	computev1alpha1 "github.com/boualleiguie/macrack-operator/api/compute/v1alpha1"
	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
	"github.com/boualleiguie/macrack-operator/internal/agent/helper"
	"github.com/boualleiguie/macrack-operator/internal/agent/jobs"
	"github.com/boualleiguie/macrack-operator/internal/gitlab"
	"github.com/boualleiguie/macrack-operator/internal/guest"
	"github.com/boualleiguie/macrack-operator/internal/sealing"
)

// guestReportTimeout bounds reaching the guest and its report: a guest
// that does not answer in time is booting, not broken.
const guestReportTimeout = 2 * time.Second

// maxGuestConfigMessage is status.runtime.guestConfig.message's schema
// limit, in characters.
const maxGuestConfigMessage = 256

// maxFailureReason is status.runtime.job.failureReason's schema limit.
const maxFailureReason = 64

// guestWord is what the guest said in one pass, and what became of its
// sealed config.
type guestWord struct {
	// report is the guest's latest report; nil if it did not answer.
	report *guest.Report
	// config is the guest config's new status; nil leaves it as it is.
	config *computev1alpha1.GuestConfigStatus
	// message is for status.runtime.message: why a config that opened did
	// not reach the guest. "" for none.
	message string
}

// tendGuest asks the guest agent, through the helper's vsock proxy, for a
// report and, if the instance has a sealed guest config the guest has not
// taken, hands it over, then asks again. Last, if the guest holds other
// SSH keys than spec.access names, it hands it those (tendKeys). A guest
// that does not answer yet is not an error: it is booting.
func (r *Instances) tendGuest(ctx context.Context, log logr.Logger, c *helper.Client, inst *computev1alpha1.MacOSInstance,
	img *fleetv1alpha1.MacOSImage) guestWord {
	rctx, cancel := context.WithTimeout(ctx, guestReportTimeout)
	defer cancel()
	conn, err := c.DialGuest(rctx, r.GuestPort)
	if err != nil {
		log.V(1).Info("Guest not reachable yet", "error", err.Error())
		return guestWord{}
	}
	gc := guest.NewClient(conn)
	defer gc.Close()
	ack, err := gc.Handshake(rctx)
	if err != nil {
		log.V(1).Info("Guest handshake failed", "error", err.Error())
		return guestWord{}
	}
	rep, err := gc.Report(rctx)
	if err != nil {
		log.V(1).Info("Guest report failed", "error", err.Error())
		return guestWord{}
	}
	// The VM's job is the host's: its loop runs in this process, and the
	// guest knows nothing of it.
	rep.Configured, rep.Job = r.Jobs.Status(inst.UID)
	w := guestWord{report: &rep}
	if owesConfig(inst, rep) {
		w.config, w.message = r.configureJob(ctx, log, ack, inst, img)
		rep.Configured, rep.Job = r.Jobs.Status(inst.UID)
	} else if lost := lostJob(inst, r.Jobs); lost != nil {
		rep.Job = lost
		// Said once: the next pass reads the job Failed.
		log.Info("The agent restarted under the VM's job, which ended with it; the job is the system's failure",
			"MacOSInstance", client.ObjectKeyFromObject(inst), "jobID", lost.ID)
	}
	// Last: a session takes the connection over.
	w.message = joinMessages(w.message, r.tendKeys(ctx, log, gc, ack, inst, img, *w.report))
	return w
}

// owesConfig reports whether the guest is to be handed the instance's
// sealed config now: there is one, it did not open before (Unreadable
// stands: neither the spec nor the chassis' key changes), the guest says
// it has none (it restarted, say, after a host reboot), and the VM has
// taken no job yet: a VM whose job started runs no other, even when a
// restart interrupted that job, since its disk holds what the job left.
func owesConfig(inst *computev1alpha1.MacOSInstance, rep guest.Report) bool {
	if inst.Spec.GuestConfig == nil || rep.Configured {
		return false
	}
	rt := inst.Status.Runtime
	if rt == nil {
		return true
	}
	if rt.GuestConfig != nil && rt.GuestConfig.Phase == computev1alpha1.GuestConfigUnreadable {
		return false
	}
	return rt.Job == nil || (rt.Job.Phase == computev1alpha1.JobWaiting && rt.Job.ID == 0)
}

// configureJob opens the instance's sealed config with the chassis' key
// and hands the plaintext to the VM's job loop, which runs here, on the
// host: the runner token never enters the VM. It returns the config's new
// status (nil for no change) and a message for status.runtime.message.
// The plaintext lives only for the call: it is never logged, stored or
// reported, and is cleared once taken.
func (r *Instances) configureJob(ctx context.Context, log logr.Logger, ack guest.HelloAck, inst *computev1alpha1.MacOSInstance,
	img *fleetv1alpha1.MacOSImage) (*computev1alpha1.GuestConfigStatus, string) {
	key := client.ObjectKeyFromObject(inst)
	sealed := *inst.Spec.GuestConfig
	if !guest.KnowsSession(ack.ProtocolVersion) {
		// Not even opened: the job's scripts could not reach the VM.
		msg := fmt.Sprintf("the guest agent %s speaks protocol %s, which has no exec channel for the job's scripts; the VM runs no job",
			ack.AgentVersion, ack.ProtocolVersion)
		r.logOnce(log, inst, msg, "The guest agent is too old to run a job", "MacOSInstance", key, "protocolVersion", ack.ProtocolVersion)
		return nil, msg
	}
	plain, err := r.openGuestConfig(inst, sealed)
	if err != nil {
		st := unreadable(err, sealed, r.GuestKey)
		log.Info("The sealed guest config does not open; the VM runs no job", "MacOSInstance", key,
			"keyID", sealed.KeyID, "chassisKeyID", r.guestKeyID(), "reason", st.Message)
		return st, ""
	}
	err = r.Jobs.Configure(ctx, jobs.VM{Namespace: inst.Namespace, Name: inst.Name, UID: inst.UID,
		LoginUser: img.Spec.LoginUserOrDefault(), Scripts: r.Scripts(inst)}, plain)
	clear(plain)
	if err != nil {
		// The error never quotes the config: ParseConfig and the loop
		// name fields, not values.
		msg := "the agent could not start the VM's job: " + err.Error()
		r.logOnce(log, inst, msg, "Starting the VM's job failed", "MacOSInstance", key, "keyID", sealed.KeyID, "error", err.Error())
		return nil, truncate(msg, maxGuestConfigMessage)
	}
	log.Info("Started the VM's job loop on the host", "MacOSInstance", key, "keyID", sealed.KeyID)
	return &computev1alpha1.GuestConfigStatus{Phase: computev1alpha1.GuestConfigDelivered}, ""
}

// lostJob is the job status of a VM whose job started under an earlier
// run of this agent: the loop ended with that process, so the job is the
// system's failure, and the VM runs no other. Nil when the agent holds
// the VM's loop, or the VM had no job under way.
func lostJob(inst *computev1alpha1.MacOSInstance, j *jobs.Runners) *guest.JobReport {
	rt := inst.Status.Runtime
	if inst.Spec.GuestConfig == nil || rt == nil || rt.Job == nil || j.Holds(inst.UID) {
		return nil
	}
	if rt.Job.Phase != computev1alpha1.JobRunning && (rt.Job.Phase != computev1alpha1.JobWaiting || rt.Job.ID == 0) {
		return nil
	}
	lost := &guest.JobReport{Phase: guest.JobFailed, ID: rt.Job.ID, FailureReason: string(gitlab.FailureRunnerSystem), QueuedSeconds: rt.Job.QueuedSeconds}
	if rt.Job.StartedAt != nil {
		t := rt.Job.StartedAt.Time
		lost.StartedAt = &t
	}
	return lost
}

// openGuestConfig opens the instance's sealed config, bound to the
// instance on this node.
func (r *Instances) openGuestConfig(inst *computev1alpha1.MacOSInstance, sealed computev1alpha1.SealedGuestConfig) ([]byte, error) {
	if r.GuestKey == nil {
		return nil, ErrNoGuestKey
	}
	return r.GuestKey.Open(sealed, sealing.Binding{Namespace: inst.Namespace, Name: inst.Name, NodeName: r.NodeName})
}

// unreadable is the Unreadable status for err: the reason and the key ids,
// never the content.
func unreadable(err error, sealed computev1alpha1.SealedGuestConfig, k *sealing.Key) *computev1alpha1.GuestConfigStatus {
	var msg string
	switch {
	case errors.Is(err, ErrNoGuestKey):
		msg = fmt.Sprintf("sealed to guest key %s, but this chassis' agent has no guest key", sealed.KeyID)
	case errors.Is(err, sealing.ErrWrongKey):
		msg = fmt.Sprintf("sealed to guest key %s, not to this chassis' key %s", sealed.KeyID, k.ID())
	case errors.Is(err, sealing.ErrUnreadable):
		msg = fmt.Sprintf("names this chassis' key %s, but does not open: sealed for another instance, node or key, or altered", sealed.KeyID)
	default:
		msg = fmt.Sprintf("sealed to guest key %s, and cannot be opened here", sealed.KeyID)
	}
	return &computev1alpha1.GuestConfigStatus{Phase: computev1alpha1.GuestConfigUnreadable, Message: truncate(msg, maxGuestConfigMessage)}
}

func (r *Instances) guestKeyID() string {
	if r.GuestKey == nil {
		return ""
	}
	return r.GuestKey.ID()
}

// logOnce logs msg's condition when the instance's status does not say
// msg yet: a condition that stands is logged once, not at every poll.
func (r *Instances) logOnce(log logr.Logger, inst *computev1alpha1.MacOSInstance, msg, logMsg string, kv ...any) {
	// Contains: the pass may say more than msg (joinMessages).
	if rt := inst.Status.Runtime; rt != nil && strings.Contains(rt.Message, msg) {
		log.V(1).Info(logMsg, kv...)
		return
	}
	log.Info(logMsg, kv...)
}

// jobStatus is the guest's job report as status.runtime.job holds it. A
// report the API's schema would refuse, which would fail the whole status
// write, is not taken (false): a phase it does not know, a negative job
// id. A field out of bounds is left out or cut.
func jobStatus(j *guest.JobReport) (*computev1alpha1.GuestJob, bool) {
	if j == nil || !j.Phase.Known() || j.ID < 0 {
		return nil, false
	}
	out := &computev1alpha1.GuestJob{Phase: computev1alpha1.JobPhase(j.Phase), ID: j.ID,
		StartedAt: apiTime(j.StartedAt), FinishedAt: apiTime(j.FinishedAt),
		FailureReason: truncate(j.FailureReason, maxFailureReason)}
	if q := j.QueuedSeconds; q != nil && *q >= 0 {
		v := *q
		out.QueuedSeconds = &v
	}
	if c := j.ExitCode; c != nil {
		v := *c
		out.ExitCode = &v
	}
	return out, true
}

// apiTime is t as the API stores it: UTC, to the second. A time RFC 3339
// cannot spell (a year past 9999), which the API server would refuse with
// the whole write, is left out, as is the zero time.
func apiTime(t *time.Time) *metav1.Time {
	if t == nil || t.IsZero() || t.UTC().Year() < 1 || t.UTC().Year() > 9999 {
		return nil
	}
	at := metav1.NewTime(t.UTC().Truncate(time.Second))
	return &at
}
