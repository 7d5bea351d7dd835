package instances

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	computev1alpha1 "github.com/boualleiguie/macrack-operator/api/compute/v1alpha1"
	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
	"github.com/boualleiguie/macrack-operator/internal/agent/driver/sim"
	"github.com/boualleiguie/macrack-operator/internal/guest"
	"github.com/boualleiguie/macrack-operator/internal/sealing"
)

// Two tenants' public keys: not secrets.
const (
	aliceKey = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHVzZXJzLWtleS1pcy1ub3QtYS1zZWNyZXQtYXQtYWxs alice@laptop"
	bobKey   = "ecdsa-sha2-nistp256 AAAAE2VjZHNhLXNoYTItbmlzdHAyNTYAAAAIbmlzdHAyNTY= bob"
)

// keysGuest plays a protocol 1.3 guest agent whose report says which SSH
// keys it holds: those the test's key sessions handed it.
type keysGuest struct {
	mu        sync.Mutex
	protocol  string
	installed []string
	// refuse, if set, is the guest's refusal of every key session.
	refuse string
	// handed are the sessions' users and keys, one line each.
	handed []string
	// other records any frame but Hello and ReportRequest.
	other []guest.MessageType
}

func (g *keysGuest) handler() sim.GuestHandler {
	return func(ctx context.Context, _ uint32, conn net.Conn) {
		defer conn.Close()
		for {
			f, err := guest.ReadFrame(conn)
			if err != nil {
				return
			}
			var answer guest.Message
			switch f.Type {
			case guest.TypeHello:
				answer = guest.HelloAck{ProtocolVersion: g.protocol, AgentVersion: "keys-test"}
			case guest.TypeReportRequest:
				g.mu.Lock()
				answer = guest.Report{BootStage: "ready", XcodeVersions: []string{"16.4"}, DiskHeadroomBytes: 1 << 30, ReadyForWork: true,
					Time: time.Now(), AuthorizedKeysDigest: guest.AuthorizedKeysDigest(g.installed)}
				g.mu.Unlock()
			default:
				g.mu.Lock()
				g.other = append(g.other, f.Type)
				g.mu.Unlock()
				_ = guest.WriteMessage(conn, guest.Error{Code: guest.CodeMalformed, Message: "unknown message type"})
				return
			}
			if err := guest.WriteMessage(conn, answer); err != nil {
				return
			}
		}
	}
}

// open is Instances.openKeys: a key session of this guest, as user.
func (g *keysGuest) open(_ context.Context, _ *guest.Client, user string) (keySetter, error) {
	return &keysSession{g: g, user: user}, nil
}

func (g *keysGuest) sessions() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.handed)
}

// sent are the frames the guest got but Hello and ReportRequest.
func (g *keysGuest) sent() []guest.MessageType {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.other)
}

type keysSession struct {
	g    *keysGuest
	user string
}

func (s *keysSession) SetAuthorizedKeys(_ context.Context, keys []string) error {
	s.g.mu.Lock()
	defer s.g.mu.Unlock()
	s.g.handed = append(s.g.handed, fmt.Sprintf("%s: %s", s.user, strings.Join(keys, " | ")))
	if s.g.refuse != "" {
		return fmt.Errorf("setting the authorized keys: %w: %s", guest.ErrRemote, s.g.refuse)
	}
	s.g.installed = slices.Clone(keys)
	return nil
}

func (s *keysSession) Close() error { return nil }

// newKeysRig is a host whose guest is g, whose image's login user is
// builder, and whose every log line is kept.
func newKeysRig(t *testing.T, g *keysGuest) *configRig {
	t.Helper()
	logs := &logLines{}
	qr := newQuarantineRig(t, []sim.Option{sim.WithGuestHandler(g.handler())}, "ci-1")
	qr.r.Log, qr.r.openKeys = logs.logger(), g.open
	img := &fleetv1alpha1.MacOSImage{}
	if err := qr.c.Get(context.Background(), client.ObjectKey{Name: testImage}, img); err != nil {
		t.Fatal(err)
	}
	img.Spec.LoginUser = "builder"
	if err := qr.c.Update(context.Background(), img); err != nil {
		t.Fatal(err)
	}
	return &configRig{quarantineRig: qr, workloads: &workloads{byVM: map[string][]*bootWorkload{}}, logs: logs}
}

// setKeys sets the instance's spec.access, as its tenant does; nil
// removes it.
func (cr *configRig) setKeys(name string, k ...string) {
	cr.t.Helper()
	inst := cr.instance(name)
	inst.Spec.Access = nil
	if k != nil {
		inst.Spec.Access = &computev1alpha1.InstanceAccess{SSHAuthorizedKeys: k}
	}
	if err := cr.c.Update(context.Background(), inst); err != nil {
		cr.t.Fatal(err)
	}
}

// The tenant's keys reach the guest in a session as the image's login
// user, once: the next report confirms them, and the pass after hands
// nothing. A change of spec.access is handed over in the next pass, and
// removing it hands the guest an empty list.
func TestTheTenantsKeysReachTheGuestAsTheLoginUserOnce(t *testing.T) {
	g := &keysGuest{protocol: guest.ProtocolVersion}
	cr := newKeysRig(t, g)
	cr.setKeys("ci-1", aliceKey)
	cr.running("ci-1")
	cr.pass("ci-1")
	cr.pass("ci-1")
	want := []string{"builder: " + aliceKey}
	if got := g.sessions(); !slices.Equal(got, want) {
		t.Fatalf("key sessions %q, want %q", got, want)
	}
	if rt := cr.instance("ci-1").Status.Runtime; rt.Message != "" {
		t.Fatalf("status.runtime.message %q", rt.Message)
	}

	cr.setKeys("ci-1", aliceKey, bobKey)
	cr.pass("ci-1")
	cr.pass("ci-1")
	want = append(want, "builder: "+aliceKey+" | "+bobKey)
	if got := g.sessions(); !slices.Equal(got, want) {
		t.Fatalf("after a change, key sessions %q, want %q", got, want)
	}

	cr.setKeys("ci-1")
	cr.pass("ci-1")
	cr.pass("ci-1")
	want = append(want, "builder: ")
	if got := g.sessions(); !slices.Equal(got, want) {
		t.Fatalf("after removing them, key sessions %q, want %q", got, want)
	}
	if n := cr.logs.count("Handed the guest the tenant's SSH keys; its next report confirms them"); n != 3 {
		t.Fatalf("logged %d handovers, want 3", n)
	}
	if other := g.sent(); len(other) != 0 {
		t.Fatalf("the guest was sent %v", other)
	}
}

// An instance without keys, on a guest that holds none, opens no session.
func TestNoKeysOnAGuestWithNoneOpensNoSession(t *testing.T) {
	g := &keysGuest{protocol: guest.ProtocolVersion}
	cr := newKeysRig(t, g)
	cr.running("ci-1")
	cr.pass("ci-1")
	if got := g.sessions(); len(got) != 0 {
		t.Fatalf("key sessions %q", got)
	}
}

// A guest that refuses the keys is offered them again at every pass, the
// refusal logged once and told in status.runtime.message, never in the
// guest's words.
func TestAGuestThatRefusesTheKeysIsToldAgainAndLoggedOnce(t *testing.T) {
	g := &keysGuest{protocol: guest.ProtocolVersion, refuse: "no user builder here"}
	cr := newKeysRig(t, g)
	cr.setKeys("ci-1", aliceKey)
	cr.running("ci-1")
	cr.pass("ci-1")
	cr.pass("ci-1")
	if n := len(g.sessions()); n < 3 {
		t.Fatalf("the keys were offered %d times, want at every pass", n)
	}
	rt := cr.instance("ci-1").Status.Runtime
	if want := "the guest agent refused spec.access.sshAuthorizedKeys for user builder; they are offered again"; rt.Message != want {
		t.Fatalf("status.runtime.message %q, want %q", rt.Message, want)
	}
	if n := cr.logs.count("The guest agent refused the tenant's SSH keys"); n != 1 {
		t.Fatalf("the refusal was logged %d times at level 0, want once", n)
	}
	// Once the guest takes them, the message goes.
	g.mu.Lock()
	g.refuse = ""
	g.mu.Unlock()
	cr.pass("ci-1")
	cr.pass("ci-1")
	if rt := cr.instance("ci-1").Status.Runtime; rt.Message != "" {
		t.Fatalf("status.runtime.message %q after the guest took the keys", rt.Message)
	}
}

// A guest agent older than 1.3 opens no session, so takes no keys: it is
// not asked, the status says why, and the log says it once.
func TestAGuestTooOldForKeysIsNotAskedAndLoggedOnce(t *testing.T) {
	for _, protocol := range []string{"1.1", "1.2"} {
		t.Run(protocol, func(t *testing.T) {
			g := &keysGuest{protocol: protocol}
			cr := newKeysRig(t, g)
			cr.r.openKeys = func(context.Context, *guest.Client, string) (keySetter, error) {
				t.Error("a key session was opened on a guest of protocol " + protocol)
				return nil, errors.New("too old")
			}
			cr.setKeys("ci-1", aliceKey)
			cr.running("ci-1")
			cr.pass("ci-1")
			cr.pass("ci-1")
			rt := cr.instance("ci-1").Status.Runtime
			if !strings.Contains(rt.Message, "speaks protocol "+protocol+", which cannot take spec.access.sshAuthorizedKeys") {
				t.Fatalf("status.runtime.message %q", rt.Message)
			}
			if n := cr.logs.count("The guest agent is too old to take the tenant's SSH keys"); n != 1 {
				t.Fatalf("logged %d times at level 0, want once", n)
			}
			if other := g.sent(); len(other) != 0 {
				t.Fatalf("the guest was sent %v", other)
			}
		})
	}
}

// A guest config's message and the keys' share status.runtime.message,
// and a config's condition is still logged once beside the keys'.
func TestTheKeysMessageJoinsTheConfigsMessage(t *testing.T) {
	g := &keysGuest{protocol: "1.1"}
	cr := newKeysRig(t, g)
	key, err := sealing.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	cr.r.GuestKey = key
	cr.giveConfig("ci-1", cr.seal(key, testNS, "ci-1", testNode))
	cr.setKeys("ci-1", aliceKey)
	cr.running("ci-1")
	cr.pass("ci-1")
	cr.pass("ci-1")
	rt := cr.instance("ci-1").Status.Runtime
	if !strings.Contains(rt.Message, "has no exec channel for the job's scripts") || !strings.Contains(rt.Message, "cannot take spec.access.sshAuthorizedKeys") {
		t.Fatalf("status.runtime.message %q, want both", rt.Message)
	}
	if n := cr.logs.count("The guest agent is too old to run a job"); n != 1 {
		t.Fatalf("the config's condition was logged %d times at level 0, want once", n)
	}
}

func TestOwesKeys(t *testing.T) {
	for _, c := range []struct {
		name      string
		spec      []string
		installed []string
		reported  string
		want      bool
	}{
		{name: "no keys, none installed", want: false},
		{name: "keys, none installed", spec: []string{aliceKey}, want: true},
		{name: "keys, the same installed", spec: []string{aliceKey}, installed: []string{aliceKey}, want: false},
		{name: "keys, others installed", spec: []string{aliceKey, bobKey}, installed: []string{aliceKey}, want: true},
		{name: "no keys, some installed", installed: []string{aliceKey}, want: true},
		{name: "keys, a guest that reports no digest", spec: []string{aliceKey}, reported: "", want: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			rep := guest.Report{AuthorizedKeysDigest: c.reported}
			if c.installed != nil {
				rep.AuthorizedKeysDigest = guest.AuthorizedKeysDigest(c.installed)
			}
			if got := owesKeys(c.spec, rep); got != c.want {
				t.Fatalf("owesKeys: %v, want %v", got, c.want)
			}
		})
	}
}
