package guest

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"golang.org/x/crypto/ssh"
)

// answerSession switches the connection to an exec and logs session and
// serves it until it ends (done), or answers CodeSessionFailed, after
// which the connection goes on in frames.
func (s *Server) answerSession(ctx context.Context, log logr.Logger, conn net.Conn, req SessionRequest) (done bool, err error) {
	if req.User == "" {
		return false, s.write(conn, errorMessage(CodeSessionFailed, errors.New("a session needs a user to run commands as")))
	}
	key, err := s.sessionKey()
	if err != nil {
		log.Error(err, "Making the session host key failed")
		return false, s.write(conn, errorMessage(CodeSessionFailed, err))
	}
	if err := s.write(conn, SessionAck{}); err != nil {
		return true, err
	}
	s.serveSession(ctx, log.WithValues("user", req.User), conn, req.User, key)
	return true, nil
}

// sessionKey is the server's SSH host key, made once: an ed25519 key that
// lives as long as the agent process. No one checks it (see
// Client.Session): SSH wants one.
func (s *Server) sessionKey() (ssh.Signer, error) {
	s.keyOnce.Do(func() {
		_, priv, err := ed25519.GenerateKey(rand.Reader)
		if err != nil {
			s.keyErr = fmt.Errorf("generating the session host key: %w", err)
			return
		}
		s.hostKey, s.keyErr = ssh.NewSignerFromKey(priv)
	})
	return s.hostKey, s.keyErr
}

// serveSession runs the SSH server side of a session on conn until the
// host closes it or ctx ends, then waits for its channels' handlers: their
// commands are killed, their log streams end.
func (s *Server) serveSession(ctx context.Context, log logr.Logger, conn net.Conn, user string, key ssh.Signer) {
	// The frames' idle timeout and write deadlines do not apply to a
	// session: it lives until either side closes it. Its handshake is
	// bounded like a Hello.
	if err := conn.SetDeadline(time.Now().Add(s.opts.HandshakeTimeout)); err != nil {
		log.Info("Setting the session's handshake deadline failed", "reason", err.Error())
		return
	}
	cfg := &ssh.ServerConfig{
		// The stream is the VM's own vsock, through its helper: the VM
		// boundary authenticates both ends, and SSH is only the session's
		// channel multiplexer.
		NoClientAuth:  true,
		ServerVersion: "SSH-2.0-macrack-guest",
	}
	cfg.AddHostKey(key)
	cfg.Ciphers = sessionCiphers
	aw := newAsyncWriter(conn)
	defer aw.Close()
	sc, chans, reqs, err := ssh.NewServerConn(newReadBuffered(aw), cfg)
	if err != nil {
		if ctx.Err() == nil {
			log.Info("A session's SSH handshake failed", "reason", err.Error())
		}
		return
	}
	if err := conn.SetDeadline(time.Time{}); err != nil {
		log.Info("Clearing the session's deadlines failed", "reason", err.Error())
		sc.Close()
		return
	}
	log.Info("Session opened")
	s.opts.Journal.Addf("session opened for user %s", user)
	sctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { s.serveGlobalRequests(log, user, reqs) })
	// chans ends with the connection: the host closed it, or ctx's end did.
	for nc := range chans {
		switch nc.ChannelType() {
		case execChannelType:
			if s.opts.Exec == nil {
				_ = nc.Reject(ssh.Prohibited, "exec is not supported by this guest agent")
				continue
			}
			ch, creqs, err := nc.Accept()
			if err != nil {
				continue
			}
			wg.Go(func() { s.serveExec(sctx, log, user, ch, creqs) })
		case logsChannelType:
			if s.opts.Journal == nil {
				_ = nc.Reject(ssh.Prohibited, "this guest agent keeps no log")
				continue
			}
			var o logsRequest
			if err := json.Unmarshal(nc.ExtraData(), &o); err != nil {
				_ = nc.Reject(ssh.ConnectionFailed, "malformed log options: "+err.Error())
				continue
			}
			ch, creqs, err := nc.Accept()
			if err != nil {
				continue
			}
			wg.Go(func() { s.serveLogs(sctx, ch, creqs, LogOptions(o)) })
		case forwardChannelType:
			// Its connect must not hold up the session's other channels.
			wg.Go(func() { s.acceptForward(sctx, log, nc) })
		default:
			_ = nc.Reject(ssh.UnknownChannelType, "unknown channel type "+nc.ChannelType())
		}
	}
	cancel()
	sc.Close()
	wg.Wait()
	log.Info("Session closed")
	s.opts.Journal.Addf("session closed for user %s", user)
}

// serveExec runs one exec channel: the command's terminal and argv, then
// the command, its streams and resizes, then how it ended. The host
// closing the channel before the command ends, or the session ending,
// kills the command's process group.
func (s *Server) serveExec(ctx context.Context, log logr.Logger, user string, ch ssh.Channel, reqs <-chan *ssh.Request) {
	defer ch.Close()
	var tty *ptyRequestMsg
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
		case reqPty:
			var m ptyRequestMsg
			if ssh.Unmarshal(req.Payload, &m) == nil {
				tty, ok = &m, true
			}
		case reqExecArgv:
			var m execArgvRequest
			if json.Unmarshal(req.Payload, &m) == nil && len(m.Argv) > 0 && m.Argv[0] != "" {
				argv, ok = m.Argv, true
			}
		}
		if req.WantReply {
			_ = req.Reply(ok, nil)
		}
	}
	// Only argv[0]: the arguments may hold secrets.
	name := argv[0]
	spec := ProcessSpec{Argv: argv, User: user, Stdout: ch, Stderr: ch.Stderr()}
	if tty != nil {
		term := tty.Term
		if term == "" {
			term = "xterm-256color"
		}
		spec.TTY, spec.Env = true, []string{"TERM=" + term}
		spec.Size = TerminalSize{Width: uint16(min(tty.Columns, 1<<16-1)), Height: uint16(min(tty.Rows, 1<<16-1))}
	}
	proc, err := s.opts.Exec.Start(ctx, spec)
	if err != nil {
		log.Info("A command did not start", "command", name, "reason", err.Error())
		s.opts.Journal.Addf("exec %s: not started: %v", name, err)
		msg := execErrorRequest{Message: err.Error(), NotFound: errors.Is(err, ErrCommandNotFound)}
		if p, merr := json.Marshal(msg); merr == nil {
			_, _ = ch.SendRequest(reqExecError, false, p)
		}
		return
	}
	log.V(1).Info("Command started", "command", name)
	s.opts.Journal.Addf("exec %s: started", name)
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
					// The host closed the channel, or the session ended.
					select {
					case <-exited:
					default:
						_ = proc.Kill()
					}
					return
				}
				if req.Type == reqWindowChange {
					var m windowChangeMsg
					if ssh.Unmarshal(req.Payload, &m) == nil {
						_ = proc.Resize(TerminalSize{Width: uint16(min(m.Columns, 1<<16-1)), Height: uint16(min(m.Rows, 1<<16-1))})
					}
				}
				if req.WantReply {
					_ = req.Reply(false, nil)
				}
			case <-stopped:
				_ = proc.Kill()
				// Keep reading: the channel's close ends this.
				stopped = nil
			}
		}
	})
	st, err := proc.Wait()
	close(exited)
	switch {
	case err != nil:
		log.Info("Waiting for a command failed", "command", name, "reason", err.Error())
		s.opts.Journal.Addf("exec %s: %v", name, err)
	case st.Signal != 0:
		s.opts.Journal.Addf("exec %s: killed by signal %s, exit code %d", name, signalName(st.Signal), 128+int(st.Signal))
		_, _ = ch.SendRequest(reqExitSignal, false, ssh.Marshal(exitSignalMsg{Signal: signalName(st.Signal)}))
	default:
		s.opts.Journal.Addf("exec %s: exit code %d", name, st.Code)
		_, _ = ch.SendRequest(reqExitStatus, false, ssh.Marshal(exitStatusMsg{Status: uint32(st.Code)}))
	}
	_ = ch.CloseWrite()
	_ = ch.Close()
	wg.Wait()
}

// serveLogs streams the journal on one logs channel, until it is all
// written or, following, until the host closes the channel or the session
// ends.
func (s *Server) serveLogs(ctx context.Context, ch ssh.Channel, reqs <-chan *ssh.Request, o LogOptions) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	drained := make(chan struct{})
	go func() {
		defer close(drained)
		for req := range reqs {
			if req.WantReply {
				_ = req.Reply(false, nil)
			}
		}
		// The host closed the channel: stop following.
		cancel()
	}()
	if err := s.opts.Journal.Stream(ctx, ch, o); err == nil {
		_, _ = ch.SendRequest(reqExitStatus, false, ssh.Marshal(exitStatusMsg{}))
	}
	_ = ch.CloseWrite()
	_ = ch.Close()
	<-drained
}
