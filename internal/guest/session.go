package guest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"golang.org/x/crypto/ssh"
)

// Session is the host side of an exec and logs session: the guest
// connection, switched to an SSH connection whose channels are the
// session's commands, log streams and port forwards. Exec, Logs and
// Forward may run concurrently, each on its own channel, and beside them
// SetAuthorizedKeys. Close it when done.
type Session struct {
	c   *Client
	ssh *ssh.Client

	closeOnce sync.Once
	closeErr  error
}

// ExecOptions are a command to run in the guest, and its streams.
type ExecOptions struct {
	// Command is the argv, run directly (no shell).
	Command []string
	// Stdin is the command's input; nil: none (it reads an end of input).
	Stdin io.Reader
	// Stdout and Stderr take its output; nil discards it.
	Stdout io.Writer
	// Stderr is unused with TTY (merged, as a terminal does).
	Stderr io.Writer
	// TTY runs the command on a terminal (TERM=xterm-256color).
	TTY bool
	// Resize takes the terminal's new sizes; may be nil. A size already
	// waiting in it when Exec starts is the terminal's first; else it is
	// 80x24.
	Resize <-chan TerminalSize
}

// ExitError is a command that ran and exited non-zero (or by signal: Code 128+n).
type ExitError struct{ Code int }

func (e *ExitError) Error() string {
	return fmt.Sprintf("command exited with code %d", e.Code)
}

// Session opens the exec/logs session on a handshaken Client. user is the guest login user commands run as (e.g. "admin").
//
// It shakes hands first if needed. A guest agent older than 1.3 is not
// asked (ErrSessionUnsupported, naming its versions). From then on the
// connection is the Session's: the Client's other calls return ErrClosed,
// and closing either closes both. One that fails closes the connection,
// unless the guest refused the session with an Error (wrapping ErrRemote).
//
// The SSH underneath is only a channel multiplexer: the stream is the
// VM's own vsock, through its helper, so the VM boundary authenticates
// both ends. The guest's host key is not checked, and the guest asks no
// credentials.
func (c *Client) Session(ctx context.Context, user string) (*Session, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ack, err := c.handshake(ctx)
	if err != nil {
		return nil, err
	}
	if !KnowsSession(ack.ProtocolVersion) {
		return nil, fmt.Errorf("%w: guest agent %q speaks protocol %s, and exec and logs need protocol 1.3 or later: update the golden image's guest agent",
			ErrSessionUnsupported, ack.AgentVersion, ack.ProtocolVersion)
	}
	if user == "" {
		return nil, errors.New("opening a guest session: no user to run commands as")
	}
	m, err := c.roundTrip(ctx, SessionRequest{User: user})
	if err != nil {
		return nil, fmt.Errorf("opening a guest session: %w", err)
	}
	switch m := m.(type) {
	case SessionAck:
	case Error:
		err := remoteError(m)
		if m.Code != CodeSessionFailed {
			c.fail(err)
		}
		return nil, fmt.Errorf("opening a guest session: %w", err)
	default:
		err = fmt.Errorf("%w: guest answered a Session with %s", ErrUnexpectedMessage, m.Type())
		c.fail(err)
		return nil, err
	}
	// No frame follows on this stream, whatever happens next.
	c.failed = fmt.Errorf("%w: the connection carries an exec and logs session", ErrClosed)
	sc, err := c.sshHandshake(ctx, user)
	if err != nil {
		_ = c.closeConn()
		return nil, fmt.Errorf("opening a guest session: %w", err)
	}
	return &Session{c: c, ssh: sc}, nil
}

// sessionCiphers are a session's SSH ciphers, in order of preference, on
// both ends: AES-128-GCM first, which AES-NI and ARMv8's AES instructions
// make the fastest; the others only so that a peer without it still
// connects.
var sessionCiphers = []string{ssh.CipherAES128GCM, ssh.CipherAES256GCM, ssh.CipherChaCha20Poly1305}

// sshHandshake runs the SSH client's handshake on the connection within
// ctx, or DefaultCallTimeout, then clears the deadlines: a session lives
// until it is closed. It runs under c.mu.
func (c *Client) sshHandshake(ctx context.Context, user string) (*ssh.Client, error) {
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(DefaultCallTimeout)
	}
	if err := c.conn.SetDeadline(deadline); err != nil {
		return nil, fmt.Errorf("setting the handshake deadline: %w", err)
	}
	fired := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		c.conn.SetDeadline(time.Unix(1, 0))
		close(fired)
	})
	cfg := &ssh.ClientConfig{
		User: user,
		// The guest's key is a fresh one of each agent process: the VM
		// boundary, not the key, says who the guest is (see Session).
		HostKeyCallback: ssh.InsecureIgnoreHostKey(),
		ClientVersion:   "SSH-2.0-macrack-host",
	}
	cfg.Ciphers = sessionCiphers
	// Batched writes, as the guest's: SSH's own send 32 KiB packets in
	// two writes each. Closing the SSH client closes aw.
	aw := newAsyncWriter(c.conn)
	conn, chans, reqs, err := ssh.NewClientConn(newReadBuffered(aw), "guest", cfg)
	if !stop() {
		<-fired
	}
	if err != nil {
		_ = aw.Close()
		if cerr := ctx.Err(); cerr != nil {
			err = fmt.Errorf("%w: %w", cerr, err)
		}
		return nil, fmt.Errorf("SSH handshake: %w", err)
	}
	if err := c.conn.SetDeadline(time.Time{}); err != nil {
		conn.Close()
		return nil, fmt.Errorf("clearing the handshake deadline: %w", err)
	}
	return ssh.NewClient(conn, chans, reqs), nil
}

// Close ends the session, its commands (the guest kills them) and log
// streams, and the connection.
func (s *Session) Close() error {
	s.closeOnce.Do(func() {
		s.closeErr = s.c.Close()
		// The connection is closed: this only ends the SSH goroutines.
		_ = s.ssh.Close()
		_ = s.ssh.Wait()
	})
	return s.closeErr
}

// Exec runs o.Command in the guest, as the session's user, and returns
// when it ended and all of its output was written: nil if it exited 0, an
// *ExitError if it exited otherwise or was killed by a signal (Code
// 128+n). An argv[0] the guest does not find is an error wrapping
// ErrCommandNotFound (no *ExitError: nothing ran); a guest agent without
// exec says so in an error wrapping ErrRemote. ctx ending closes the
// command's channel, which kills its process group in the guest, and Exec
// returns ctx's error. Exec does not wait for a Read of o.Stdin that is
// blocked when the command ends.
func (s *Session) Exec(ctx context.Context, o ExecOptions) error {
	if len(o.Command) == 0 || o.Command[0] == "" {
		return errors.New("exec in the guest: no command")
	}
	name := o.Command[0]
	fail := func(err error) error { return fmt.Errorf("exec %s in the guest: %w", name, err) }
	if err := ctx.Err(); err != nil {
		return fail(err)
	}
	argv, err := json.Marshal(execArgvRequest{Argv: o.Command})
	if err != nil {
		return fail(err)
	}
	ch, reqs, err := s.ssh.OpenChannel(execChannelType, nil)
	if err != nil {
		return fail(openError(err))
	}
	results := make(chan execResult, 1)
	go func() { results <- collectResult(reqs) }()
	stop := context.AfterFunc(ctx, func() { ch.Close() })
	defer stop()

	if err := s.startExec(ch, o, argv); err != nil {
		ch.Close()
		<-results
		if cerr := ctx.Err(); cerr != nil {
			err = cerr
		}
		return fail(err)
	}
	go func() {
		if o.Stdin != nil {
			_, _ = io.Copy(ch, o.Stdin)
		}
		_ = ch.CloseWrite()
	}()
	var wg sync.WaitGroup
	done := make(chan struct{})
	if o.TTY && o.Resize != nil {
		wg.Go(func() {
			for {
				select {
				case size, ok := <-o.Resize:
					if !ok {
						return
					}
					_, _ = ch.SendRequest(reqWindowChange, false, ssh.Marshal(windowChange(size)))
				case <-done:
					return
				}
			}
		})
	}
	var outErr error
	var outMu sync.Mutex
	copyOut := func(w io.Writer, r io.Reader) {
		if w == nil {
			w = io.Discard
		}
		if _, err := io.Copy(w, r); err != nil {
			outMu.Lock()
			if outErr == nil {
				outErr = err
			}
			outMu.Unlock()
			// The caller's writer failed: the command ends with its channel.
			ch.Close()
			_, _ = io.Copy(io.Discard, r)
		}
	}
	var out sync.WaitGroup
	out.Go(func() { copyOut(o.Stdout, ch) })
	out.Go(func() { copyOut(o.Stderr, ch.Stderr()) })
	out.Wait()
	r := <-results
	close(done)
	wg.Wait()

	switch {
	case ctx.Err() != nil:
		return fail(ctx.Err())
	case outErr != nil:
		return fail(fmt.Errorf("writing its output: %w", outErr))
	}
	return r.err(name)
}

// startExec asks for a terminal if o wants one, then for the command.
func (s *Session) startExec(ch ssh.Channel, o ExecOptions, argv []byte) error {
	if o.TTY {
		size := defaultTerminalSize
		if o.Resize != nil {
			select {
			case first, ok := <-o.Resize:
				if ok {
					size = first
				}
			default:
			}
		}
		pty := ptyRequestMsg{Term: "xterm-256color", Columns: uint32(size.Width), Rows: uint32(size.Height)}
		ok, err := ch.SendRequest(reqPty, true, ssh.Marshal(pty))
		if err != nil {
			return fmt.Errorf("asking for a terminal: %w", err)
		}
		if !ok {
			return fmt.Errorf("%w: the guest refused a terminal", ErrRemote)
		}
	}
	ok, err := ch.SendRequest(reqExecArgv, true, argv)
	if err != nil {
		return fmt.Errorf("asking to run it: %w", err)
	}
	if !ok {
		return fmt.Errorf("%w: the guest refused to run it", ErrRemote)
	}
	return nil
}

func windowChange(s TerminalSize) windowChangeMsg {
	return windowChangeMsg{Columns: uint32(s.Width), Rows: uint32(s.Height)}
}

// execResult is what the guest said of a command's end.
type execResult struct {
	exited   bool
	code     int
	signal   string
	startErr *execErrorRequest
}

// collectResult reads the guest's requests on an exec channel until it
// closes.
func collectResult(reqs <-chan *ssh.Request) execResult {
	var r execResult
	for req := range reqs {
		switch req.Type {
		case reqExitStatus:
			var m exitStatusMsg
			if ssh.Unmarshal(req.Payload, &m) == nil {
				r.exited, r.code = true, int(m.Status)
			}
		case reqExitSignal:
			var m exitSignalMsg
			if ssh.Unmarshal(req.Payload, &m) == nil {
				r.signal = m.Signal
			}
		case reqExecError:
			var m execErrorRequest
			if json.Unmarshal(req.Payload, &m) == nil {
				r.startErr = &m
			}
		}
		if req.WantReply {
			_ = req.Reply(false, nil)
		}
	}
	return r
}

// err is the result as Exec returns it, but for Exec's wrapping.
func (r execResult) err(name string) error {
	switch {
	case r.startErr != nil && r.startErr.NotFound:
		return fmt.Errorf("exec %s in the guest: %w: %s", name, ErrCommandNotFound, r.startErr.Message)
	case r.startErr != nil:
		return fmt.Errorf("exec %s in the guest: %w: %s", name, ErrRemote, r.startErr.Message)
	case r.signal != "":
		return &ExitError{Code: 128 + signalNumber(r.signal)}
	case r.exited && r.code == 0:
		return nil
	case r.exited:
		return &ExitError{Code: r.code}
	}
	return fmt.Errorf("exec %s in the guest: the session ended before the command did", name)
}

// Logs writes the guest agent's log to w, as o selects, and returns when
// done, or ctx ends while following (returning ctx's error). A guest agent
// that keeps no log says so in an error wrapping ErrRemote.
func (s *Session) Logs(ctx context.Context, o LogOptions, w io.Writer) error {
	fail := func(err error) error { return fmt.Errorf("reading the guest agent's log: %w", err) }
	if err := ctx.Err(); err != nil {
		return fail(err)
	}
	opts, err := json.Marshal(logsRequest(o))
	if err != nil {
		return fail(err)
	}
	ch, reqs, err := s.ssh.OpenChannel(logsChannelType, opts)
	if err != nil {
		return fail(openError(err))
	}
	results := make(chan execResult, 1)
	go func() { results <- collectResult(reqs) }()
	stop := context.AfterFunc(ctx, func() { ch.Close() })
	defer stop()
	_, err = io.Copy(w, ch)
	ch.Close()
	r := <-results
	switch {
	case ctx.Err() != nil:
		return fail(ctx.Err())
	case err != nil:
		return fail(err)
	case !r.exited:
		return fail(errors.New("the session ended before the log did"))
	}
	return nil
}

// openError explains a channel the guest refused.
func openError(err error) error {
	var oe *ssh.OpenChannelError
	if errors.As(err, &oe) {
		return fmt.Errorf("%w: %s", ErrRemote, oe.Message)
	}
	return fmt.Errorf("%w: the session is over: %w", ErrClosed, err)
}
