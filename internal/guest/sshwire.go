package guest

import (
	"bufio"
	"net"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// A session's SSH connection carries three kinds of channel, all opened by
// the host:
//
//	"session"          one exec: optional "pty-req", then "exec-argv@macrack.io"
//	                   (JSON {"argv":[…]}) from the host; stdin, stdout, and
//	                   stderr as extended data; "window-change" from the host;
//	                   "exit-status" or "exit-signal", or "exec-error@macrack.io"
//	                   (JSON {"message","notFound"}) when nothing ran, from
//	                   the guest, which then closes the channel. The host
//	                   closing it first kills the command's process group.
//	"logs@macrack.io"  the guest agent's journal, its options (JSON) as the
//	                   open's extra data; the lines as data, then
//	                   "exit-status" 0 once all was sent, and a close.
//	"direct-tcpip"     a port forward (RFC 4254 7.2) to a TCP port on the
//	                   guest's loopback: the bytes both ways, each way's end
//	                   as an EOF, then a close. A port nothing listens on is
//	                   refused with reason "connect failed" and a message
//	                   that starts "connection refused", as OpenSSH's sshd
//	                   says it.
//
// and one global request, from the host:
//
//	"authorized-keys@macrack.io"  JSON {"keys":[…]}: the session user's
//	                   MacRack-managed SSH keys, replacing the previous set.
//	                   Success has no payload; a failure's is JSON
//	                   {"message","invalid"}, invalid when the keys were refused
//	                   as such.
//
// Standard requests have RFC 4254's payloads.
const (
	execChannelType    = "session"
	logsChannelType    = "logs@macrack.io"
	forwardChannelType = "direct-tcpip"

	reqAuthorizedKeys = "authorized-keys@macrack.io"

	reqPty          = "pty-req"
	reqWindowChange = "window-change"
	reqExecArgv     = "exec-argv@macrack.io"
	reqExecError    = "exec-error@macrack.io"
	reqExitStatus   = "exit-status"
	reqExitSignal   = "exit-signal"

	// signalSuffix marks a signal RFC 4254 does not name, by number.
	signalSuffix = "@macrack.io"
)

// execArgvRequest is an exec-argv@macrack.io request's payload.
type execArgvRequest struct {
	Argv []string `json:"argv"`
}

// execErrorRequest is an exec-error@macrack.io request's payload: why a
// command did not run.
type execErrorRequest struct {
	Message  string `json:"message"`
	NotFound bool   `json:"notFound,omitempty"`
}

// authorizedKeysRequest is an authorized-keys@macrack.io request's payload.
type authorizedKeysRequest struct {
	Keys []string `json:"keys"`
}

// requestFailure is a failed authorized-keys@macrack.io request's payload.
type requestFailure struct {
	Message string `json:"message"`
	// Invalid says the keys were refused as such: sending them again fails
	// again.
	Invalid bool `json:"invalid,omitempty"`
}

// directTCPIPMsg is a direct-tcpip channel's extra data (RFC 4254 7.2):
// where to connect, and where the connection came from.
type directTCPIPMsg struct {
	Host       string
	Port       uint32
	OriginHost string
	OriginPort uint32
}

// logsRequest is a logs@macrack.io channel's extra data.
type logsRequest struct {
	Follow     bool       `json:"follow,omitempty"`
	TailLines  *int64     `json:"tailLines,omitempty"`
	Timestamps bool       `json:"timestamps,omitempty"`
	LimitBytes *int64     `json:"limitBytes,omitempty"`
	SinceTime  *time.Time `json:"sinceTime,omitempty"`
}

// RFC 4254's payloads.
type ptyRequestMsg struct {
	Term     string
	Columns  uint32
	Rows     uint32
	Width    uint32
	Height   uint32
	Modelist string
}

type windowChangeMsg struct {
	Columns uint32
	Rows    uint32
	Width   uint32
	Height  uint32
}

type exitStatusMsg struct {
	Status uint32
}

type exitSignalMsg struct {
	Signal     string
	CoreDumped bool
	Error      string
	Lang       string
}

// signalName is sig's name on the wire: RFC 4254's, without "SIG", or
// "<number>@macrack.io" for one without a name.
func signalName(sig syscall.Signal) string {
	if n := unix.SignalName(sig); n != "" {
		return strings.TrimPrefix(n, "SIG")
	}
	return strconv.Itoa(int(sig)) + signalSuffix
}

// signalNumber is the number of a signal named on the wire, 0 if unknown.
// Host and guest are the same OS (macOS, or Linux for the sim guest), so
// names map to the same numbers on both.
func signalNumber(name string) int {
	if n, ok := strings.CutSuffix(name, signalSuffix); ok {
		if v, err := strconv.Atoi(n); err == nil && v > 0 {
			return v
		}
		return 0
	}
	return int(unix.SignalNum("SIG" + name))
}

// asyncWriter is a session's connection as SSH writes it: its writes
// return once queued, and one goroutine writes out all that is queued in
// one write. SSH has both peers write before they read at points of its
// handshake (the version lines, the new keys), which deadlocks on a
// transport without buffers such as net.Pipe; and x/crypto/ssh writes
// each 32 KiB packet in two writes (through a 4 KiB buffer), which this
// batches with the packets queued beside it. A full queue (maxQueued)
// blocks writers, as a socket's full buffer would.
type asyncWriter struct {
	net.Conn

	mu      sync.Mutex
	cond    *sync.Cond
	pending []byte // queued, not yet taken by loop
	spare   []byte // the buffer loop last wrote out, for reuse
	writing int    // bytes loop is writing
	err     error  // the first failed write's, or net.ErrClosed
	flushed chan struct{}
}

const maxQueued = 256 << 10

func newAsyncWriter(conn net.Conn) *asyncWriter {
	w := &asyncWriter{Conn: conn, flushed: make(chan struct{})}
	w.cond = sync.NewCond(&w.mu)
	go w.loop()
	return w
}

func (w *asyncWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for len(w.pending)+w.writing >= maxQueued && w.err == nil {
		w.cond.Wait()
	}
	if w.err != nil {
		return 0, w.err
	}
	w.pending = append(w.pending, p...)
	w.cond.Broadcast()
	return len(p), nil
}

// loop writes the queue out until a write fails or the conn is closed.
func (w *asyncWriter) loop() {
	defer close(w.flushed)
	w.mu.Lock()
	defer w.mu.Unlock()
	for {
		for len(w.pending) == 0 && w.err == nil {
			w.cond.Wait()
		}
		if w.err != nil {
			return
		}
		batch := w.pending
		w.pending, w.spare = w.spare[:0], nil
		w.writing = len(batch)
		w.mu.Unlock()
		_, err := w.Conn.Write(batch)
		w.mu.Lock()
		w.writing = 0
		w.spare = batch[:0]
		if err != nil && w.err == nil {
			w.err = err
		}
		w.cond.Broadcast()
	}
}

// Close closes the conn, dropping what was not written yet, and waits for
// the writing goroutine.
func (w *asyncWriter) Close() error {
	w.mu.Lock()
	if w.err == nil {
		w.err = net.ErrClosed
	}
	w.pending, w.spare = nil, nil
	w.cond.Broadcast()
	w.mu.Unlock()
	err := w.Conn.Close()
	<-w.flushed
	return err
}

// readBuffered is a session's connection as SSH reads it: through a
// transportReadBuffer buffer, so that a read takes many SSH packets at
// once. x/crypto/ssh reads through 4 KiB, so each 32 KiB packet took
// two or three reads of the stream.
type readBuffered struct {
	net.Conn
	r *bufio.Reader
}

const transportReadBuffer = 256 << 10

func newReadBuffered(conn net.Conn) *readBuffered {
	return &readBuffered{Conn: conn, r: bufio.NewReaderSize(conn, transportReadBuffer)}
}

func (c *readBuffered) Read(p []byte) (int, error) { return c.r.Read(p) }
