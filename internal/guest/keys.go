package guest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/go-logr/logr"
	"golang.org/x/crypto/ssh"
)

// DefaultLoginUser is the guest login user whose MacRack-managed keys a
// guest reports until a host installs keys for another.
const DefaultLoginUser = "admin"

// MaxAuthorizedKeysSize bounds a SetAuthorizedKeys request (its keys in
// JSON): some hundred keys, well within one SSH packet (256 KiB), which a
// larger request would overflow, ending the session.
const MaxAuthorizedKeysSize = 128 << 10

// KeyInstaller installs the MacRack-managed SSH keys of the guest's login
// users: UnixKeyInstaller in a real guest, one in memory in the sim guest.
// The Server calls it from its sessions concurrently.
type KeyInstaller interface {
	// Install makes keys user's MacRack-managed authorized keys, replacing
	// the previous set; none removes them. The keys are plain OpenSSH
	// authorized_keys lines, trimmed, which ValidateAuthorizedKeys passed.
	// It leaves whatever else the user authorized as it is.
	Install(user string, keys []string) error
	// Installed is the AuthorizedKeysDigest of user's MacRack-managed keys
	// now, "" for none or when they cannot be read: the host then sends
	// them again, and Install says what is wrong.
	Installed(user string) string
}

// AuthorizedKeysDigest is the digest a guest reports for keys: sha256 hex of the sorted, trimmed, newline-joined lines; "" for none.
func AuthorizedKeysDigest(keys []string) string {
	if len(keys) == 0 {
		return ""
	}
	lines := make([]string, len(keys))
	for i, k := range keys {
		lines[i] = strings.TrimSpace(k)
	}
	slices.Sort(lines)
	sum := sha256.Sum256([]byte(strings.Join(lines, "\n")))
	return hex.EncodeToString(sum[:])
}

// ValidateAuthorizedKeys checks that each of keys is one plain public key
// in OpenSSH's authorized_keys format ("type base64 [comment]"), and
// returns them trimmed. It refuses the whole set, in an error wrapping
// ErrInvalidAuthorizedKeys that names the first bad one's index (from 0),
// if one does not parse, holds options (such as command= or from=: MacRack
// installs plain keys only) or a line break. The error never quotes a key.
func ValidateAuthorizedKeys(keys []string) ([]string, error) {
	out := make([]string, 0, len(keys))
	for i, k := range keys {
		bad := func(why string) error {
			return fmt.Errorf("%w: key %d (of %d) %s", ErrInvalidAuthorizedKeys, i, len(keys), why)
		}
		line := strings.TrimSpace(k)
		switch {
		case line == "":
			return nil, bad("is empty")
		case strings.ContainsAny(line, "\r\n"):
			return nil, bad("holds a line break: give one key per line")
		case strings.HasPrefix(line, "#"):
			return nil, bad("is a comment, not a key")
		}
		_, _, options, rest, err := ssh.ParseAuthorizedKey([]byte(line))
		switch {
		case err != nil:
			return nil, bad("is not an OpenSSH public key: " + err.Error())
		case len(options) > 0:
			return nil, bad("holds options before its key type: give the key alone")
		case len(rest) > 0:
			return nil, bad("holds more than one key")
		}
		out = append(out, line)
	}
	return out, nil
}

// SetAuthorizedKeys makes keys (OpenSSH authorized_keys lines) the guest login user's MacRack-managed keys, replacing the previous set; empty removes them.
//
// The login user is the session's. The guest keeps the user's other
// authorized keys, and reports the digest of the set it has in each
// Report (AuthorizedKeysDigest). Keys the guest refused as such (one that
// does not parse, holds options or a line break, named by its index) are
// an error wrapping ErrInvalidAuthorizedKeys and ErrRemote, and nothing
// changed; a guest that could not install them says why in an error
// wrapping ErrRemote. ctx ending returns its error at once, and the guest
// may still install the keys.
func (s *Session) SetAuthorizedKeys(ctx context.Context, keys []string) error {
	fail := func(err error) error { return fmt.Errorf("setting the guest's authorized keys: %w", err) }
	if err := ctx.Err(); err != nil {
		return fail(err)
	}
	if keys == nil {
		keys = []string{}
	}
	payload, err := json.Marshal(authorizedKeysRequest{Keys: keys})
	if err != nil {
		return fail(err)
	}
	if len(payload) > MaxAuthorizedKeysSize {
		return fail(fmt.Errorf("%w: %d keys make %d bytes, over the %d a guest takes", ErrInvalidAuthorizedKeys, len(keys), len(payload), MaxAuthorizedKeysSize))
	}
	type answer struct {
		ok      bool
		payload []byte
		err     error
	}
	answers := make(chan answer, 1)
	// SendRequest cannot be interrupted but by the session's end.
	go func() {
		ok, p, err := s.ssh.SendRequest(reqAuthorizedKeys, true, payload)
		answers <- answer{ok, p, err}
	}()
	var a answer
	select {
	case <-ctx.Done():
		return fail(ctx.Err())
	case a = <-answers:
	}
	switch {
	case a.err != nil:
		return fail(fmt.Errorf("%w: the session is over: %w", ErrClosed, a.err))
	case a.ok:
		return nil
	}
	var f requestFailure
	if json.Unmarshal(a.payload, &f) != nil || f.Message == "" {
		return fail(fmt.Errorf("%w: the guest agent does not take authorized keys", ErrRemote))
	}
	if f.Invalid {
		return fail(fmt.Errorf("%w: %w: %s", ErrInvalidAuthorizedKeys, ErrRemote, f.Message))
	}
	return fail(fmt.Errorf("%w: %s", ErrRemote, f.Message))
}

// serveGlobalRequests answers a session's global requests until the
// session ends: authorized-keys@macrack.io, one at a time; no other.
func (s *Server) serveGlobalRequests(log logr.Logger, user string, reqs <-chan *ssh.Request) {
	for req := range reqs {
		if req.Type != reqAuthorizedKeys {
			if req.WantReply {
				_ = req.Reply(false, nil)
			}
			continue
		}
		ok, payload := s.setAuthorizedKeys(log, user, req.Payload)
		_ = req.Reply(ok, payload)
	}
}

// setAuthorizedKeys installs an authorized-keys@macrack.io request's keys
// as user's MacRack-managed keys, replacing the previous set, and returns
// the request's answer. The journal says how many, never which.
func (s *Server) setAuthorizedKeys(log logr.Logger, user string, payload []byte) (bool, []byte) {
	failure := func(err error) (bool, []byte) {
		p, merr := json.Marshal(requestFailure{Message: err.Error(), Invalid: errors.Is(err, ErrInvalidAuthorizedKeys)})
		if merr != nil {
			return false, nil
		}
		return false, p
	}
	if s.opts.Keys == nil {
		return failure(errors.New("this guest agent does not manage SSH keys"))
	}
	var m authorizedKeysRequest
	if err := json.Unmarshal(payload, &m); err != nil {
		return failure(fmt.Errorf("malformed authorized keys request: %w", err))
	}
	keys, err := ValidateAuthorizedKeys(m.Keys)
	if err == nil {
		err = s.opts.Keys.Install(user, keys)
	}
	if err != nil {
		log.Info("Setting the authorized keys failed", "reason", err.Error())
		s.opts.Journal.Addf("authorized keys of user %s: refused: %v", user, err)
		return failure(err)
	}
	s.keysUser.Store(&user)
	if len(keys) == 0 {
		s.opts.Journal.Addf("authorized keys of user %s: removed", user)
	} else {
		s.opts.Journal.Addf("authorized keys of user %s: %d installed", user, len(keys))
	}
	return true, nil
}

// installedKeysDigest is what a Report says of the authorized keys: the
// digest of those of the user a host last installed keys for, or of the
// login user's; "" without a KeyInstaller.
func (s *Server) installedKeysDigest() string {
	if s.opts.Keys == nil {
		return ""
	}
	user := s.opts.LoginUser
	if u := s.keysUser.Load(); u != nil {
		user = *u
	}
	return s.opts.Keys.Installed(user)
}
