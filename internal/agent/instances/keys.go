package instances

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	computev1alpha1 "github.com/boualleiguie/macrack-operator/api/compute/v1alpha1"
	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
	"github.com/boualleiguie/macrack-operator/internal/guest"
)

// guestKeysTimeout bounds handing the guest its SSH keys: a session's
// handshake, and the guest writing the keys.
const guestKeysTimeout = 10 * time.Second

// keySetter is a guest session, as far as the keys need one.
type keySetter interface {
	SetAuthorizedKeys(ctx context.Context, keys []string) error
	Close() error
}

// openGuestSession turns gc's connection into a session as user.
func openGuestSession(ctx context.Context, gc *guest.Client, user string) (keySetter, error) {
	s, err := gc.Session(ctx, user)
	if err != nil {
		return nil, err
	}
	return s, nil
}

// owesKeys reports whether the guest is to be handed keys: what it says
// it has installed (rep.AuthorizedKeysDigest) is not keys. A guest that
// has installed none is not sent an empty list.
func owesKeys(keys []string, rep guest.Report) bool {
	if len(keys) == 0 && rep.AuthorizedKeysDigest == "" {
		return false
	}
	return rep.AuthorizedKeysDigest != guest.AuthorizedKeysDigest(keys)
}

// tendKeys installs the instance's spec.access SSH keys in the guest, for
// the image's login user, when the guest's report says it holds others;
// the next report confirms them. It opens a session on gc, whose
// connection is then the session's: it is the pass's last word with the
// guest. It returns a message for status.runtime.message, "" for none: a
// guest too old to take keys, or one that refused them (never in the
// guest's words, which go to the log). Each outcome is logged once while
// it stands.
func (r *Instances) tendKeys(ctx context.Context, log logr.Logger, gc *guest.Client, ack guest.HelloAck,
	inst *computev1alpha1.MacOSInstance, img *fleetv1alpha1.MacOSImage, rep guest.Report) string {
	keys := inst.Spec.SSHAuthorizedKeys()
	if !owesKeys(keys, rep) {
		r.keysOutcome(inst.UID, "")
		return ""
	}
	key := client.ObjectKeyFromObject(inst)
	user := img.Spec.LoginUserOrDefault()
	if !guest.KnowsSession(ack.ProtocolVersion) {
		msg := fmt.Sprintf("the guest agent %s speaks protocol %s, which cannot take spec.access.sshAuthorizedKeys; they are not installed",
			ack.AgentVersion, ack.ProtocolVersion)
		r.keysLog(log, inst.UID, msg).Info("The guest agent is too old to take the tenant's SSH keys", "MacOSInstance", key,
			"protocolVersion", ack.ProtocolVersion)
		return msg
	}
	kctx, cancel := context.WithTimeout(ctx, guestKeysTimeout)
	defer cancel()
	open := r.openKeys
	if open == nil {
		open = openGuestSession
	}
	s, err := open(kctx, gc, user)
	if err == nil {
		err = s.SetAuthorizedKeys(kctx, keys)
		_ = s.Close()
	}
	switch {
	case err == nil:
		// Logged once: a guest whose report does not confirm them is
		// handed them again at every pass.
		r.keysLog(log, inst.UID, "handed "+guest.AuthorizedKeysDigest(keys)).Info(
			"Handed the guest the tenant's SSH keys; its next report confirms them", "MacOSInstance", key, "user", user, "keys", len(keys))
		return ""
	case errors.Is(err, guest.ErrRemote) && !errors.Is(err, guest.ErrClosed):
		msg := fmt.Sprintf("the guest agent refused spec.access.sshAuthorizedKeys for user %s; they are offered again", user)
		r.keysLog(log, inst.UID, msg).Info("The guest agent refused the tenant's SSH keys", "MacOSInstance", key,
			"user", user, "keys", len(keys), "reason", err.Error())
		return msg
	}
	r.keysLog(log, inst.UID, "failed: "+err.Error()).Info("Handing the guest the tenant's SSH keys failed; they are offered again",
		"MacOSInstance", key, "user", user, "keys", len(keys), "error", err.Error())
	return ""
}

// keysLog is log for an outcome of the instance's keys: at level 0 the
// first time it is seen, at V(1) while it stands.
func (r *Instances) keysLog(log logr.Logger, uid types.UID, outcome string) logr.Logger {
	if r.keysOutcome(uid, outcome) {
		return log
	}
	return log.V(1)
}

// keysOutcome records the latest outcome of handing uid's guest its keys
// ("" when the guest holds them), and reports whether it is new.
func (r *Instances) keysOutcome(uid types.UID, outcome string) bool {
	r.keysMu.Lock()
	defer r.keysMu.Unlock()
	if r.keysSaid[uid] == outcome {
		return false
	}
	if outcome == "" {
		delete(r.keysSaid, uid)
		return true
	}
	if r.keysSaid == nil {
		r.keysSaid = map[types.UID]string{}
	}
	r.keysSaid[uid] = outcome
	return true
}

// joinMessages joins the messages of one pass for status.runtime.message.
func joinMessages(a, b string) string {
	switch {
	case a == "":
		return b
	case b == "":
		return a
	}
	return a + "; " + b
}
