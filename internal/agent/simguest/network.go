package simguest

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"

	"github.com/go-logr/logr"
	"golang.org/x/crypto/ssh"
	"golang.org/x/sys/unix"

	"github.com/boualleiguie/macrack-operator/internal/agent/driver/sim"
	"github.com/boualleiguie/macrack-operator/internal/guest"
)

// The ports a sim guest listens on, on its loopback, for a host's
// forwards. Any other is closed: a forward to it is refused.
const (
	// PortSSH is an SSH server of the VM's own: a login as the user the
	// host last set keys for (admin until then), by one of those keys, runs
	// commands as kubectl exec does.
	PortSSH = 22
	// PortScreenSharing says RFBBanner, as a Mac's Screen Sharing first
	// does, then reads until the client hangs up.
	PortScreenSharing = 5900
	// PortDiscard reads everything and writes nothing (RFC 863), for
	// throughput benchmarks.
	PortDiscard = 9
	// PortEcho sends back what it reads (RFC 862), then ends its output
	// once its input ended.
	PortEcho = 7
)

// RFBBanner is what a VNC server, such as macOS's Screen Sharing, says
// first: the highest RFB protocol version it speaks.
const RFBBanner = "RFB 003.008\n"

// HostKeyFile is the sim guest's SSH host key, in its directory (Dir): an
// ed25519 key in OpenSSH's format, made at the first login to the VM and
// kept with its disk, as a Mac keeps its own; HostKeyFile+".pub" is its
// public half.
const HostKeyFile = "ssh_host_ed25519_key"

// guestDir is a sim guest's directory, made at its first use: its VM's
// Dir, or, for a guest whose context names no VM (a handler called
// directly, in tests), a temporary directory removed when that context
// ends.
type guestDir struct {
	vmCtx context.Context

	once sync.Once
	path string
	err  error
}

func (d *guestDir) get() (string, error) {
	d.once.Do(func() {
		if spec, ok := sim.GuestSpec(d.vmCtx); ok {
			d.path = Dir(spec)
			if err := os.MkdirAll(d.path, 0o755); err != nil {
				d.err = fmt.Errorf("making the sim guest's directory: %w", err)
			}
			return
		}
		tmp, err := os.MkdirTemp("", "sim-guest-")
		if err != nil {
			d.err = fmt.Errorf("making the sim guest's directory: %w", err)
			return
		}
		context.AfterFunc(d.vmCtx, func() { os.RemoveAll(tmp) })
		d.path = tmp
	})
	return d.path, d.err
}

// keys are a sim guest's MacRack-managed SSH keys: in memory, as the
// guest agent of one boot holds them, so a rebooted sim guest has none and
// reports so, and the host sets them again.
type keys struct {
	mu     sync.Mutex
	byUser map[string][]string
	last   string // the user keys were last set for
}

var _ guest.KeyInstaller = (*keys)(nil)

// Install implements guest.KeyInstaller.
func (k *keys) Install(user string, set []string) error {
	set, err := guest.ValidateAuthorizedKeys(set)
	if err != nil {
		return err
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.byUser == nil {
		k.byUser = map[string][]string{}
	}
	if len(set) == 0 {
		delete(k.byUser, user)
	} else {
		k.byUser[user] = set
	}
	k.last = user
	return nil
}

// Installed implements guest.KeyInstaller.
func (k *keys) Installed(user string) string {
	k.mu.Lock()
	defer k.mu.Unlock()
	return guest.AuthorizedKeysDigest(k.byUser[user])
}

// authorize lets user in with key: the login user (the one keys were last
// set for, else guest.DefaultLoginUser) by one of its keys.
func (k *keys) authorize(user string, key ssh.PublicKey) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	login := k.last
	if login == "" {
		login = guest.DefaultLoginUser
	}
	if user != login {
		return fmt.Errorf("user %q may not log in to this sim guest", user)
	}
	want := key.Marshal()
	for _, line := range k.byUser[user] {
		pk, _, _, _, err := ssh.ParseAuthorizedKey([]byte(line))
		if err == nil && bytes.Equal(pk.Marshal(), want) {
			return nil
		}
	}
	return fmt.Errorf("key %s is not one of %s's", ssh.FingerprintSHA256(key), user)
}

// network is a sim guest's loopback, as its forwards reach it: the
// services on its ports, in this process, each connection a socket pair.
type network struct {
	vmCtx context.Context
	dir   *guestDir
	exec  guest.Executor
	keys  *keys
	log   logr.Logger

	sshOnce sync.Once
	sshConf *ssh.ServerConfig
	sshErr  error
}

// dial is the sim guest's guest.ServerOptions.Dial.
func (n *network) dial(_ context.Context, port uint16) (net.Conn, error) {
	var serve func(c net.Conn)
	switch port {
	case PortSSH:
		conf, err := n.sshConfig()
		if err != nil {
			return nil, err
		}
		serve = func(c net.Conn) { n.serveSSH(conf, c) }
	case PortScreenSharing:
		serve = serveRFB
	case PortDiscard:
		serve = discard
	case PortEcho:
		serve = serveEcho
	default:
		return nil, &net.OpError{Op: "dial", Net: "tcp", Addr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: int(port)},
			Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	}
	mine, theirs, err := sim.StreamPair()
	if err != nil {
		return nil, err
	}
	go func() {
		// The service ends when the forward closes its end, or the VM stops.
		stop := context.AfterFunc(n.vmCtx, func() { mine.Close() })
		defer stop()
		defer mine.Close()
		serve(mine)
	}()
	return theirs, nil
}

// discard reads c to its end, 256 KiB at a time (io.Discard's ReadFrom
// reads 8 KiB).
func discard(c net.Conn) {
	buf := make([]byte, 256<<10)
	for {
		if _, err := c.Read(buf); err != nil {
			return
		}
	}
}

func serveRFB(c net.Conn) {
	if _, err := io.WriteString(c, RFBBanner); err != nil {
		return
	}
	_, _ = io.Copy(io.Discard, c)
}

func serveEcho(c net.Conn) {
	if _, err := io.Copy(c, c); err == nil {
		if cw, ok := c.(interface{ CloseWrite() error }); ok {
			_ = cw.CloseWrite()
		}
	}
}

// sshConfig is the SSH server's configuration, made at the first login:
// the VM's host key, and the keys the host set.
func (n *network) sshConfig() (*ssh.ServerConfig, error) {
	n.sshOnce.Do(func() {
		dir, err := n.dir.get()
		if err != nil {
			n.sshErr = err
			return
		}
		key, err := hostKey(dir)
		if err != nil {
			n.sshErr = err
			return
		}
		conf := &ssh.ServerConfig{
			PublicKeyCallback: func(meta ssh.ConnMetadata, key ssh.PublicKey) (*ssh.Permissions, error) {
				if err := n.keys.authorize(meta.User(), key); err != nil {
					return nil, err
				}
				return &ssh.Permissions{Extensions: map[string]string{"pubkey-fp": ssh.FingerprintSHA256(key)}}, nil
			},
			ServerVersion: "SSH-2.0-macrack-sim-guest",
		}
		conf.AddHostKey(key)
		n.sshConf = conf
	})
	return n.sshConf, n.sshErr
}

// hostKey reads the host key in dir, or makes it there.
func hostKey(dir string) (ssh.Signer, error) {
	path := filepath.Join(dir, HostKeyFile)
	b, err := os.ReadFile(path)
	if err == nil {
		s, err := ssh.ParsePrivateKey(b)
		if err != nil {
			return nil, fmt.Errorf("reading the sim guest's host key %s: %w", path, err)
		}
		return s, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("reading the sim guest's host key: %w", err)
	}
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("making the sim guest's host key: %w", err)
	}
	block, err := ssh.MarshalPrivateKey(priv, "sim guest host key")
	if err != nil {
		return nil, fmt.Errorf("making the sim guest's host key: %w", err)
	}
	s, err := ssh.NewSignerFromKey(priv)
	if err != nil {
		return nil, fmt.Errorf("making the sim guest's host key: %w", err)
	}
	if err := writeAtomically(path+".pub", ssh.MarshalAuthorizedKey(s.PublicKey()), 0o644); err != nil {
		return nil, err
	}
	if err := writeAtomically(path, pem.EncodeToMemory(block), 0o600); err != nil {
		return nil, err
	}
	return s, nil
}

// writeAtomically puts data at path at once: a temporary file, renamed.
func writeAtomically(path string, data []byte, mode os.FileMode) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Chmod(mode)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		os.Remove(f.Name())
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}

// serveSSH serves one SSH connection until the client or the VM ends it:
// "session" channels only, each one command or a shell.
func (n *network) serveSSH(conf *ssh.ServerConfig, c net.Conn) {
	sc, chans, reqs, err := ssh.NewServerConn(c, conf)
	if err != nil {
		n.log.V(1).Info("A login to the sim guest failed", "reason", err.Error())
		return
	}
	defer sc.Close()
	ctx, cancel := context.WithCancel(n.vmCtx)
	defer cancel()
	var wg sync.WaitGroup
	wg.Go(func() { ssh.DiscardRequests(reqs) })
	for nc := range chans {
		if nc.ChannelType() != "session" {
			_ = nc.Reject(ssh.UnknownChannelType, "this sim guest serves session channels only")
			continue
		}
		ch, creqs, err := nc.Accept()
		if err != nil {
			continue
		}
		wg.Go(func() { n.serveSession(ctx, sc.User(), ch, creqs) })
	}
	cancel()
	sc.Close()
	wg.Wait()
}

// RFC 4254's payloads.
type ptyRequest struct {
	Term     string
	Columns  uint32
	Rows     uint32
	Width    uint32
	Height   uint32
	Modelist string
}

type windowChange struct {
	Columns uint32
	Rows    uint32
	Width   uint32
	Height  uint32
}

type execRequest struct {
	Command string
}

type exitStatus struct {
	Status uint32
}

type exitSignal struct {
	Signal     string
	CoreDumped bool
	Error      string
	Lang       string
}

func terminalSize(cols, rows uint32) guest.TerminalSize {
	return guest.TerminalSize{Width: uint16(min(cols, 1<<16-1)), Height: uint16(min(rows, 1<<16-1))}
}

// serveSession runs one session channel as sshd does: "pty-req",
// "window-change" and "env" (ignored), then "exec" (its command through
// `sh -c`) or "shell" (sh), in the user's home, through the same executor
// as the host's execs; then "exit-status" or "exit-signal", and a close.
// The client closing the channel first, or the VM stopping, kills the
// command's process group.
func (n *network) serveSession(ctx context.Context, user string, ch ssh.Channel, reqs <-chan *ssh.Request) {
	defer ch.Close()
	var tty *ptyRequest
	var argv []string
	for argv == nil {
		var req *ssh.Request
		select {
		case r, ok := <-reqs:
			if !ok {
				return
			}
			req = r
		case <-ctx.Done():
			return
		}
		ok := false
		switch req.Type {
		case "pty-req":
			var m ptyRequest
			if ssh.Unmarshal(req.Payload, &m) == nil {
				tty, ok = &m, true
			}
		case "window-change":
			var m windowChange
			if ssh.Unmarshal(req.Payload, &m) == nil && tty != nil {
				tty.Columns, tty.Rows = m.Columns, m.Rows
			}
		case "env":
			// Accepted, and ignored.
			ok = true
		case "exec":
			var m execRequest
			if ssh.Unmarshal(req.Payload, &m) == nil {
				argv, ok = []string{"sh", "-c", m.Command}, true
			}
		case "shell":
			argv, ok = []string{"sh"}, true
		}
		_ = req.Reply(ok, nil)
	}
	spec := guest.ProcessSpec{Argv: argv, User: user, Stdout: ch, Stderr: ch.Stderr()}
	if tty != nil {
		term := tty.Term
		if term == "" {
			term = "xterm-256color"
		}
		spec.TTY, spec.Env, spec.Size = true, []string{"TERM=" + term}, terminalSize(tty.Columns, tty.Rows)
	}
	proc, err := n.exec.Start(ctx, spec)
	if err != nil {
		// As a shell says a command it cannot run.
		fmt.Fprintf(ch.Stderr(), "sh: %v\n", err)
		_, _ = ch.SendRequest("exit-status", false, ssh.Marshal(exitStatus{Status: 127}))
		_ = ch.CloseWrite()
		return
	}
	exited := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		_, _ = io.Copy(proc.Stdin(), ch)
		_ = proc.Stdin().Close()
	})
	wg.Go(func() {
		stopped := ctx.Done()
		for {
			select {
			case req, ok := <-reqs:
				if !ok {
					select {
					case <-exited:
					default:
						_ = proc.Kill()
					}
					return
				}
				if req.Type == "window-change" {
					var m windowChange
					if ssh.Unmarshal(req.Payload, &m) == nil {
						_ = proc.Resize(terminalSize(m.Columns, m.Rows))
					}
				}
				_ = req.Reply(false, nil)
			case <-stopped:
				_ = proc.Kill()
				stopped = nil
			}
		}
	})
	st, err := proc.Wait()
	close(exited)
	switch {
	case err != nil:
		n.log.Info("Waiting for a sim guest's command failed", "reason", err.Error())
	case st.Signal != 0:
		name := strings.TrimPrefix(unix.SignalName(st.Signal), "SIG")
		_, _ = ch.SendRequest("exit-signal", false, ssh.Marshal(exitSignal{Signal: name}))
	default:
		_, _ = ch.SendRequest("exit-status", false, ssh.Marshal(exitStatus{Status: uint32(st.Code)}))
	}
	_ = ch.CloseWrite()
	_ = ch.Close()
	wg.Wait()
}
