package guest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"golang.org/x/crypto/ssh"
)

// DefaultDialTimeout bounds a guest's connect to a forwarded port, on its
// own loopback: refused or accepted at once, unless something is wrong.
const DefaultDialTimeout = 5 * time.Second

// forwardHost is the only host a forward reaches: the guest's loopback.
const forwardHost = "127.0.0.1"

// refusedPrefix starts the message of a forward the guest refused because
// nothing listens on its port, as OpenSSH's sshd says it.
const refusedPrefix = "connection refused"

// Forward connects conn to TCP port on the guest's loopback, copying both
// ways until either side closes or ctx ends. It returns nil on a clean
// end; an error wrapping ErrPortClosed (message naming the port) when the
// guest could not connect.
//
// The forward is an SSH "direct-tcpip" channel to 127.0.0.1. The end of
// conn's input is passed on as an end of input to the guest's connection
// (a half-close), and the end of the guest's output half-closes conn, if
// conn has a CloseWrite method, as *net.TCPConn and *net.UnixConn do;
// without one, the guest's end of output ends the forward. So a request
// and its answer (an SSH session, a tar stream) end cleanly. A copy that
// fails, such as a reset of conn, ends the forward with its error; ctx
// ending ends it with ctx's error. Forward closes conn before it returns,
// and waits for its goroutines: conn's Close must interrupt its Read, as
// a net.Conn's does. Forwards run concurrently with each other and with
// the session's execs and logs.
func (s *Session) Forward(ctx context.Context, port uint16, conn io.ReadWriteCloser) error {
	fail := func(err error) error { return fmt.Errorf("forwarding to guest port %d: %w", port, err) }
	if port == 0 {
		conn.Close()
		return fail(errors.New("no port"))
	}
	if err := ctx.Err(); err != nil {
		conn.Close()
		return fail(err)
	}
	// The guest answers the open once its connect is done, which its dial
	// timeout bounds.
	payload := ssh.Marshal(directTCPIPMsg{Host: forwardHost, Port: uint32(port), OriginHost: forwardHost})
	ch, reqs, err := s.ssh.OpenChannel(forwardChannelType, payload)
	if err != nil {
		conn.Close()
		var oe *ssh.OpenChannelError
		if errors.As(err, &oe) && oe.Reason == ssh.ConnectionFailed && strings.HasPrefix(strings.ToLower(oe.Message), refusedPrefix) {
			return fmt.Errorf("forwarding to guest port %d: %w (the guest's connect was refused)", port, ErrPortClosed)
		}
		return fail(openError(err))
	}
	if err := splice(ctx, ch, reqs, conn); err != nil {
		return fail(err)
	}
	return nil
}

// splice copies ch to local and local to ch, then closes both and waits
// for its goroutines. Each side's end of input is passed on as a
// half-close of the other's output: ch.CloseWrite (an EOF), or local's
// CloseWrite, if it has one, else the end of the whole splice. It ends
// once both ways ended, or the remote closed the channel and its way
// ended, or a copy failed, or ctx ended. It returns nil on a clean end,
// ctx's error, or the first copy's error: a write to a channel the remote
// closed, or a local that was closed, is a clean end.
func splice(ctx context.Context, ch ssh.Channel, reqs <-chan *ssh.Request, local io.ReadWriteCloser) error {
	var (
		once  sync.Once
		cause error // why the splice ended: nil for a clean end
	)
	shut := func(why error) {
		once.Do(func() {
			cause = why
			_ = ch.Close()
			_ = local.Close()
		})
	}
	stop := context.AfterFunc(ctx, func() { shut(ctx.Err()) })
	defer stop()

	const (
		sent         = iota // local's input ended: all of it was sent
		received            // ch's input ended: all of it was received
		remoteClosed        // the remote closed the channel
	)
	type event struct {
		what int
		err  error
	}
	events := make(chan event, 3)
	go func() {
		for req := range reqs {
			if req.WantReply {
				_ = req.Reply(false, nil)
			}
		}
		events <- event{what: remoteClosed}
	}()
	go func() {
		_, err := copyBuffered(ch, local)
		events <- event{sent, err}
	}()
	go func() {
		_, err := copyBuffered(local, ch)
		events <- event{received, err}
	}()

	var done [3]bool
	for range len(done) {
		e := <-events
		done[e.what] = true
		switch {
		case e.err != nil && cleanEnd(e.err):
			shut(nil)
		case e.err != nil:
			// After a shut, this is only its consequence: shut keeps the
			// first cause.
			shut(e.err)
		case e.what == sent:
			if err := ch.CloseWrite(); err != nil {
				shut(nil)
			}
		case e.what == received:
			if cw, ok := local.(interface{ CloseWrite() error }); ok {
				if err := cw.CloseWrite(); err != nil && !cleanEnd(err) {
					shut(err)
				}
			} else {
				// local cannot take a half-close: the remote's end of
				// output is the forward's.
				shut(nil)
			}
		}
		if done[received] && (done[sent] || done[remoteClosed]) {
			shut(nil)
		}
	}
	shut(nil)
	return cause
}

// copyBufferSize is a forward's copy buffer: a read of a TCP or SSH
// channel's input takes all that is there, up to this, so that a fast
// stream moves in few large writes (eight SSH packets, one syscall) rather
// than many 32 KiB ones.
const copyBufferSize = 256 << 10

var copyBuffers = sync.Pool{New: func() any { return new([copyBufferSize]byte) }}

// copyBuffered is io.Copy through a pooled copyBufferSize buffer. Neither
// side's ReadFrom or WriteTo is used: an SSH channel has neither, and a
// TCP connection's, from or to one, copies through 32 KiB.
func copyBuffered(dst io.Writer, src io.Reader) (int64, error) {
	buf := copyBuffers.Get().(*[copyBufferSize]byte)
	defer copyBuffers.Put(buf)
	return io.CopyBuffer(onlyWriter{dst}, onlyReader{src}, buf[:])
}

// onlyWriter and onlyReader hide a ReaderFrom and a WriterTo from
// io.CopyBuffer, so that it uses its buffer.
type (
	onlyWriter struct{ io.Writer }
	onlyReader struct{ io.Reader }
)

// cleanEnd reports whether a copy's error just means that a side closed.
func cleanEnd(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) || errors.Is(err, io.ErrClosedPipe) || errors.Is(err, os.ErrClosed)
}

// dialLoopback is a real guest's Dial: TCP to port on its loopback.
func dialLoopback(ctx context.Context, port uint16) (net.Conn, error) {
	var d net.Dialer
	return d.DialContext(ctx, "tcp", net.JoinHostPort(forwardHost, strconv.Itoa(int(port))))
}

// refused reports whether a Dial's error says that nothing listens there.
func refused(err error) bool {
	return errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, ErrPortClosed)
}

// acceptForward checks a direct-tcpip open, then connects and serves it
// until either side closes or the session ends. The journal notes the
// forward's port, never its bytes.
func (s *Server) acceptForward(ctx context.Context, log logr.Logger, nc ssh.NewChannel) {
	var m directTCPIPMsg
	if err := ssh.Unmarshal(nc.ExtraData(), &m); err != nil {
		_ = nc.Reject(ssh.ConnectionFailed, "malformed direct-tcpip request: "+err.Error())
		return
	}
	switch m.Host {
	case forwardHost, "localhost", "::1":
	default:
		_ = nc.Reject(ssh.Prohibited, fmt.Sprintf("a forward reaches the guest's loopback only, not %q", m.Host))
		return
	}
	if m.Port == 0 || m.Port > 1<<16-1 {
		_ = nc.Reject(ssh.ConnectionFailed, fmt.Sprintf("no such port %d", m.Port))
		return
	}
	port := uint16(m.Port)
	dial := s.opts.Dial
	if dial == nil {
		dial = dialLoopback
	}
	dctx, cancel := context.WithTimeout(ctx, DefaultDialTimeout)
	conn, err := dial(dctx, port)
	cancel()
	if err != nil {
		if refused(err) {
			s.opts.Journal.Addf("forward to port %d refused: nothing listens on it", port)
			_ = nc.Reject(ssh.ConnectionFailed, fmt.Sprintf("%s: nothing listens on port %d of the guest's loopback", refusedPrefix, port))
			return
		}
		log.Info("A forward did not connect", "port", port, "reason", err.Error())
		s.opts.Journal.Addf("forward to port %d failed: %v", port, err)
		_ = nc.Reject(ssh.ConnectionFailed, fmt.Sprintf("connecting to port %d of the guest's loopback: %v", port, err))
		return
	}
	ch, reqs, err := nc.Accept()
	if err != nil {
		conn.Close()
		return
	}
	log.V(1).Info("Forward opened", "port", port)
	s.opts.Journal.Addf("forward to port %d opened", port)
	if err := splice(ctx, ch, reqs, conn); err != nil && ctx.Err() == nil {
		log.V(1).Info("A forward ended on an error", "port", port, "reason", err.Error())
	}
	s.opts.Journal.Addf("forward to port %d closed", port)
}
