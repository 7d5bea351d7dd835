package guest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"golang.org/x/crypto/ssh"
	"k8s.io/utils/clock"
)

// Server defaults, used when a ServerOptions field is zero.
const (
	DefaultHandshakeTimeout = 10 * time.Second
	// DefaultIdleTimeout bounds the wait for the next ReportRequest, so a
	// host that went away silently does not hold a goroutine forever. The
	// host polls well within it.
	DefaultIdleTimeout   = 2 * time.Minute
	DefaultWriteTimeout  = 10 * time.Second
	DefaultReportTimeout = 10 * time.Second
	// DefaultConfigureTimeout bounds a Workload's Configure, which only
	// takes the Config and starts the workload.
	DefaultConfigureTimeout = 10 * time.Second
	// DefaultStopTimeout bounds a Workload's Stop before a shutdown. The
	// host waits 5s for the shutdown's acknowledgement (its
	// guestShutdownTimeout), which comes after Stop: 3s leaves it room.
	DefaultStopTimeout = 3 * time.Second
)

// Accept retry backoff bounds.
const (
	minAcceptBackoff = 5 * time.Millisecond
	maxAcceptBackoff = time.Second
)

// ServerOptions configure a Server. Zero fields take the defaults.
type ServerOptions struct {
	// AgentVersion is sent in HelloAck.
	AgentVersion string
	// HandshakeTimeout bounds the wait for Hello after accepting.
	HandshakeTimeout time.Duration
	// IdleTimeout bounds the wait for each following request; a session,
	// once opened, has none.
	IdleTimeout time.Duration
	// WriteTimeout bounds each answer's write.
	WriteTimeout time.Duration
	// ReportTimeout bounds each Reporter call.
	ReportTimeout time.Duration
	// Clock times the backoff after a failed Accept; the real clock if nil.
	// Connection deadlines use the wall clock whatever this is: the
	// runtime's poller enforces them against it.
	Clock clock.Clock
	// Shutdown, if set, begins shutting the guest down and returns: it
	// answers a ShutdownRequest (`shutdown -h now` in a macOS guest). It
	// gets the connection's context. Without it, a ShutdownRequest is
	// answered with CodeShutdownFailed.
	Shutdown func(ctx context.Context) error
	// Workload, if set, is what the guest runs once configured: it takes a
	// Configure, adds its Status to every Report, and is stopped before a
	// ShutdownRequest's Shutdown. Without it, a Configure is answered with
	// CodeConfigureFailed.
	Workload Workload
	// ConfigureTimeout bounds each Workload.Configure call.
	ConfigureTimeout time.Duration
	// StopTimeout bounds Workload.Stop before a shutdown.
	StopTimeout time.Duration
	// Exec, if set, runs the commands of the host's exec sessions. Without
	// it, a session's exec is refused: exec is not supported by this guest.
	Exec Executor
	// Journal, if set, is the agent's log, which the server writes (its
	// start, boot stages, configuration, job phases, sessions, execs,
	// forwards and authorized keys) and a session's Logs reads. Without
	// it, Logs is refused.
	Journal *Journal
	// Dial connects a session's port forward to port on the guest's
	// loopback; an error wrapping syscall.ECONNREFUSED or ErrPortClosed
	// says nothing listens there. ctx bounds the connect
	// (DefaultDialTimeout). Nil: a real guest's, TCP to 127.0.0.1:port.
	Dial func(ctx context.Context, port uint16) (net.Conn, error)
	// Keys, if set, installs the MacRack-managed SSH keys a session's
	// SetAuthorizedKeys sends, and tells every Report the digest of those
	// installed. Without it, SetAuthorizedKeys is refused.
	Keys KeyInstaller
	// LoginUser is the user whose installed keys a Report's digest is of
	// until a session installs keys for a user: then that one's.
	// DefaultLoginUser if empty.
	LoginUser string
}

// Server is the guest side: it answers the host's handshake, report and
// shutdown requests on every connection a listener accepts.
type Server struct {
	reporter Reporter
	log      logr.Logger
	opts     ServerOptions
	// version is the protocol the server speaks: ProtocolVersion, or an
	// older one in tests that play an older guest agent.
	version string

	keyOnce sync.Once
	hostKey ssh.Signer
	keyErr  error

	// keysUser is the user a session last installed keys for, if any.
	keysUser atomic.Pointer[string]

	// What the journal last said, to note only changes.
	noted sync.Mutex
	stage string
	job   string
}

// NewServer returns a Server answering ReportRequests with reporter.
func NewServer(reporter Reporter, log logr.Logger, opts ServerOptions) *Server {
	if opts.HandshakeTimeout <= 0 {
		opts.HandshakeTimeout = DefaultHandshakeTimeout
	}
	if opts.IdleTimeout <= 0 {
		opts.IdleTimeout = DefaultIdleTimeout
	}
	if opts.WriteTimeout <= 0 {
		opts.WriteTimeout = DefaultWriteTimeout
	}
	if opts.ReportTimeout <= 0 {
		opts.ReportTimeout = DefaultReportTimeout
	}
	if opts.ConfigureTimeout <= 0 {
		opts.ConfigureTimeout = DefaultConfigureTimeout
	}
	if opts.StopTimeout <= 0 {
		opts.StopTimeout = DefaultStopTimeout
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.LoginUser == "" {
		opts.LoginUser = DefaultLoginUser
	}
	s := &Server{reporter: reporter, log: log, opts: opts, version: ProtocolVersion}
	s.opts.Journal.Addf("guest agent %s started, protocol %s", opts.AgentVersion, s.version)
	return s
}

// NoteBootStage writes the boot stage to the journal, unless it is the one
// the journal said last. The server notes the stage of every Report it
// sends; an agent notes its stages as it moves through them.
func (s *Server) NoteBootStage(stage BootStage) {
	s.noted.Lock()
	defer s.noted.Unlock()
	if string(stage) == s.stage || stage == "" {
		return
	}
	s.stage = string(stage)
	s.opts.Journal.Addf("boot stage: %s", stage)
}

// noteJob writes the job's phase to the journal when it changed.
func (s *Server) noteJob(configured bool, job *JobReport) {
	var line string
	switch {
	case job != nil && job.ID != 0:
		line = fmt.Sprintf("job %d: %s", job.ID, job.Phase)
	case job != nil:
		line = fmt.Sprintf("job: %s", job.Phase)
	case configured:
		line = "job: none yet"
	}
	if job != nil && job.Phase.Ended() {
		if job.FailureReason != "" {
			line += ", " + job.FailureReason
		}
		if job.ExitCode != nil {
			line += fmt.Sprintf(", exit code %d", *job.ExitCode)
		}
	}
	s.noted.Lock()
	defer s.noted.Unlock()
	if line == s.job || line == "" {
		return
	}
	s.job = line
	s.opts.Journal.Add(line)
}

// Serve accepts connections on l and serves each in its own goroutine until
// ctx is done, then closes l and every open connection, waits for their
// goroutines, and returns nil. It owns l: it closes it whenever it returns.
// If l is closed under it, Serve returns an error wrapping net.ErrClosed; any
// other Accept failure (such as running out of file descriptors) is logged
// and retried after a backoff, since the agent has nothing better to do.
func (s *Server) Serve(ctx context.Context, l net.Listener) error {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() {
		cancel()
		l.Close()
		wg.Wait()
	}()
	stop := context.AfterFunc(ctx, func() { l.Close() })
	defer stop()

	var backoff time.Duration
	for {
		conn, err := l.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if errors.Is(err, net.ErrClosed) {
				return fmt.Errorf("accepting guest connections on %s: %w", l.Addr(), err)
			}
			backoff = min(max(2*backoff, minAcceptBackoff), maxAcceptBackoff)
			s.log.Error(err, "Accepting a connection failed; retrying", "backoff", backoff)
			select {
			case <-ctx.Done():
				return nil
			case <-s.opts.Clock.After(backoff):
			}
			continue
		}
		backoff = 0
		wg.Go(func() { s.ServeConn(ctx, conn) })
	}
}

// ServeConn serves one connection until it ends or ctx does, then closes
// it: handshake, then one Report per ReportRequest, a ConfigureAck or an
// Error to a Configure, a ShutdownAck to a ShutdownRequest, after which
// the connection ends, and a SessionAck to a Session, after which the
// connection is that exec and logs session's until it ends. Any fault closes this connection only. ctx is also
// what the Reporter, the Workload and Shutdown are given.
func (s *Server) ServeConn(ctx context.Context, conn net.Conn) {
	log := s.log.WithValues("remoteAddr", conn.RemoteAddr().String())
	defer conn.Close()
	// Closing the conn is what interrupts a blocked read on shutdown.
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	log.V(1).Info("Connection accepted")

	hello, err := s.readHello(conn)
	if err != nil {
		s.readFailed(ctx, log, conn, err)
		return
	}
	log.V(1).Info("Host shook hands", "protocolVersion", hello.ProtocolVersion)
	if err := s.write(conn, HelloAck{ProtocolVersion: s.version, AgentVersion: s.opts.AgentVersion}); err != nil {
		s.writeFailed(ctx, log, err)
		return
	}
	for {
		req, err := s.readRequest(conn)
		if err != nil {
			s.readFailed(ctx, log, conn, err)
			return
		}
		switch req := req.(type) {
		case ShutdownRequest:
			done, err := s.answerShutdown(ctx, log, conn)
			if err != nil {
				s.writeFailed(ctx, log, err)
				return
			}
			if done {
				return
			}
		case Configure:
			if err := s.answerConfigure(ctx, log, conn, req); err != nil {
				s.writeFailed(ctx, log, err)
				return
			}
		case SessionRequest:
			done, err := s.answerSession(ctx, log, conn, req)
			if err != nil {
				s.writeFailed(ctx, log, err)
				return
			}
			if done {
				return
			}
		default:
			if err := s.answerReport(ctx, log, conn); err != nil {
				s.writeFailed(ctx, log, err)
				return
			}
		}
	}
}

// readHello reads the host's Hello and checks its protocol version.
func (s *Server) readHello(conn net.Conn) (Hello, error) {
	if err := conn.SetReadDeadline(time.Now().Add(s.opts.HandshakeTimeout)); err != nil {
		return Hello{}, fmt.Errorf("setting the handshake deadline: %w", err)
	}
	m, err := ReadMessage(conn)
	if err != nil {
		return Hello{}, err
	}
	hello, ok := m.(Hello)
	if !ok {
		return Hello{}, fmt.Errorf("%w: %s before Hello", ErrUnexpectedMessage, m.Type())
	}
	if err := compatible(s.version, hello.ProtocolVersion); err != nil {
		return Hello{}, fmt.Errorf("host Hello: %w", err)
	}
	return hello, nil
}

// readRequest waits up to the idle timeout for the next request: a
// ReportRequest, a Configure, a ShutdownRequest or a Session.
func (s *Server) readRequest(conn net.Conn) (Message, error) {
	if err := conn.SetReadDeadline(time.Now().Add(s.opts.IdleTimeout)); err != nil {
		return nil, fmt.Errorf("setting the idle deadline: %w", err)
	}
	f, err := ReadFrame(conn)
	if err != nil {
		return nil, err
	}
	m, err := f.Decode()
	if f.Type == TypeConfigure {
		// The decoded Configure holds its own copy; this one holds secrets.
		clear(f.Payload)
	}
	if err != nil {
		return nil, err
	}
	switch m.(type) {
	case ReportRequest, ShutdownRequest, Configure:
		return m, nil
	case SessionRequest:
		if KnowsSession(s.version) {
			return m, nil
		}
	}
	return nil, fmt.Errorf("%w: %s after the handshake", ErrUnexpectedMessage, m.Type())
}

// answerShutdown begins the guest's shutdown and acknowledges it, after
// which the connection is done; or answers CodeShutdownFailed, after which
// it goes on.
func (s *Server) answerShutdown(ctx context.Context, log logr.Logger, conn net.Conn) (done bool, err error) {
	if s.opts.Shutdown == nil {
		return false, s.write(conn, errorMessage(CodeShutdownFailed, errors.New("this guest agent cannot shut the guest down")))
	}
	if w := s.opts.Workload; w != nil {
		// First, so that a job that runs is reported failed by the guest
		// itself, rather than left running in the CI system's eyes when the
		// VM powers off; bounded, so the shutdown goes ahead regardless.
		sctx, cancel := context.WithTimeout(ctx, s.opts.StopTimeout)
		err := w.Stop(sctx)
		cancel()
		if err != nil {
			log.Error(err, "Stopping the workload before the shutdown failed; shutting down all the same")
		}
	}
	if err := s.opts.Shutdown(ctx); err != nil {
		log.Error(err, "Shutting the guest down failed")
		return false, s.write(conn, errorMessage(CodeShutdownFailed, err))
	}
	log.Info("Shutting the guest down, as the host asked")
	s.opts.Journal.Add("shutting down, as the host asked")
	return true, s.write(conn, ShutdownAck{})
}

// answerConfigure hands the Config to the Workload and acknowledges it, or
// answers CodeConfigureFailed; the connection goes on either way. The
// Config is never logged: it holds secrets.
func (s *Server) answerConfigure(ctx context.Context, log logr.Logger, conn net.Conn, req Configure) error {
	err := s.configure(ctx, req.Config)
	// Best effort: the decoded Config's strings live on in the Workload.
	clear(req.Config)
	if err != nil {
		log.Error(err, "Configuring the guest failed")
		s.opts.Journal.Add("a configuration was refused")
		return s.write(conn, errorMessage(CodeConfigureFailed, err))
	}
	log.Info("Configured the guest, as the host asked")
	s.opts.Journal.Add("workload configured")
	return s.write(conn, ConfigureAck{})
}

func (s *Server) configure(ctx context.Context, raw []byte) error {
	if s.opts.Workload == nil {
		return ErrNoWorkload
	}
	c, err := ParseConfig(raw)
	if err != nil {
		return err
	}
	cctx, cancel := context.WithTimeout(ctx, s.opts.ConfigureTimeout)
	defer cancel()
	if err := s.opts.Workload.Configure(cctx, c); err != nil {
		return fmt.Errorf("the workload refused its config: %w", err)
	}
	return nil
}

// answerReport calls the Reporter and writes its Report, with the
// Workload's status, or an Error with CodeReportFailed that keeps the
// connection open.
func (s *Server) answerReport(ctx context.Context, log logr.Logger, conn net.Conn) error {
	rctx, cancel := context.WithTimeout(ctx, s.opts.ReportTimeout)
	defer cancel()
	r, err := s.reporter.Report(rctx)
	if err == nil && s.opts.Workload != nil {
		// The workload's word, not the Reporter's: one place knows it.
		r.Configured, r.Job = s.opts.Workload.Status()
	}
	if err == nil && s.opts.Keys != nil {
		// The installer's word, as the workload's: the keys on the guest.
		r.AuthorizedKeysDigest = s.installedKeysDigest()
	}
	if err == nil {
		s.NoteBootStage(BootStage(r.BootStage))
		s.noteJob(r.Configured, r.Job)
	}
	if err == nil {
		// Encoding first turns a Report we cannot send into an Error the
		// host can read, rather than a dropped connection.
		var f Frame
		if f, err = Encode(r); err == nil {
			return s.writeFrame(conn, f)
		}
	}
	log.Error(err, "Building a report failed")
	return s.write(conn, errorMessage(CodeReportFailed, err))
}

func (s *Server) write(conn net.Conn, m Message) error {
	f, err := Encode(m)
	if err != nil {
		return err
	}
	return s.writeFrame(conn, f)
}

func (s *Server) writeFrame(conn net.Conn, f Frame) error {
	if err := conn.SetWriteDeadline(time.Now().Add(s.opts.WriteTimeout)); err != nil {
		return fmt.Errorf("setting a write deadline: %w", err)
	}
	return WriteFrame(conn, f)
}

// maxErrorMessage bounds an Error's message, so that it always fits a frame.
const maxErrorMessage = 1 << 10

// errorMessage is the Error telling the peer about err.
func errorMessage(code string, err error) Error {
	msg := err.Error()
	if len(msg) > maxErrorMessage {
		msg = strings.ToValidUTF8(msg[:maxErrorMessage], "") + "…"
	}
	return Error{Code: code, Message: msg}
}

// readFailed logs why reading from the peer failed and, if the peer broke
// the protocol, tells it why in an Error frame; the caller then closes.
func (s *Server) readFailed(ctx context.Context, log logr.Logger, conn net.Conn, err error) {
	code := errorCode(err)
	switch {
	case ctx.Err() != nil:
		log.V(1).Info("Connection closed on shutdown")
	case errors.Is(err, io.EOF):
		log.V(1).Info("Connection closed by the peer")
	case errors.Is(err, os.ErrDeadlineExceeded):
		log.Info("Closing a silent connection", "reason", err.Error())
	case code == "":
		log.Info("Reading from the connection failed", "reason", err.Error())
	default:
		log.Error(err, "Closing a connection that broke the protocol", "code", code)
		// Best effort: the peer may be gone or not reading.
		if werr := s.write(conn, errorMessage(code, err)); werr != nil {
			log.V(1).Info("Sending an error frame failed", "reason", werr.Error())
			return
		}
		linger(conn)
	}
}

// Bounds of the lingering close after an Error frame.
const (
	lingerTimeout  = 500 * time.Millisecond
	lingerMaxBytes = 2 * (HeaderSize + MaxPayloadSize)
)

// linger gives the peer a moment to read our Error frame before the
// connection closes. Closing a socket with unread input resets it, and a
// reset can discard the Error before the peer reads it; so signal the end
// of our output where the transport can, then drain a bounded amount of
// input until the peer closes or the short deadline passes.
func linger(conn net.Conn) {
	if cw, ok := conn.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	}
	if err := conn.SetReadDeadline(time.Now().Add(lingerTimeout)); err != nil {
		return
	}
	_, _ = io.CopyN(io.Discard, conn, lingerMaxBytes)
}

// writeFailed logs a failed answer; the caller then closes.
func (s *Server) writeFailed(ctx context.Context, log logr.Logger, err error) {
	if ctx.Err() != nil {
		log.V(1).Info("Connection closed on shutdown")
		return
	}
	log.Info("Writing an answer failed", "reason", err.Error())
}

// errorCode is the Error code telling a peer how it broke the protocol, or
// "" for a failure that is not its fault.
func errorCode(err error) string {
	switch {
	case errors.Is(err, ErrUnsupportedVersion):
		return CodeUnsupportedVersion
	case errors.Is(err, ErrUnexpectedMessage):
		return CodeUnexpectedMessage
	case errors.Is(err, ErrBadMagic), errors.Is(err, ErrUnknownType), errors.Is(err, ErrFrameTooLarge),
		errors.Is(err, ErrTruncated), errors.Is(err, ErrMalformed):
		return CodeMalformed
	}
	return ""
}
