package guest

import (
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
)

// waitLimit bounds every wait in these tests, so a hang fails, not stalls.
const waitLimit = 5 * time.Second

// logBuffer collects a logger's lines for assertions.
type logBuffer struct {
	mu  sync.Mutex
	buf strings.Builder
}

func (b *logBuffer) logger() logr.Logger {
	return funcr.New(func(prefix, args string) {
		b.mu.Lock()
		defer b.mu.Unlock()
		b.buf.WriteString(prefix + " " + args + "\n")
	}, funcr.Options{Verbosity: 1})
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// stubReporter answers a fixed Report, or the error its fail returns.
type stubReporter struct {
	report Report
	mu     sync.Mutex
	calls  int
	fail   func(call int) error
}

func (r *stubReporter) Report(ctx context.Context) (Report, error) {
	r.mu.Lock()
	r.calls++
	call := r.calls
	r.mu.Unlock()
	if r.fail != nil {
		if err := r.fail(call); err != nil {
			return Report{}, err
		}
	}
	return r.report, nil
}

func (r *stubReporter) Calls() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.calls
}

var testReport = Report{
	BootStage:         string(BootStageReady),
	XcodeVersions:     []string{"16.2", "26.0"},
	DiskHeadroomBytes: 80 << 30,
	ReadyForWork:      true,
	Time:              time.Date(2026, 6, 2, 13, 0, 0, 0, time.UTC),
}

// pipeListener is a net.Listener over net.Pipe: Dial hands the server end
// to Accept.
type pipeListener struct {
	conns  chan net.Conn
	once   sync.Once
	closed chan struct{}
}

func newPipeListener() *pipeListener {
	return &pipeListener{conns: make(chan net.Conn), closed: make(chan struct{})}
}

func (l *pipeListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.closed:
		return nil, net.ErrClosed
	}
}

func (l *pipeListener) Close() error {
	l.once.Do(func() { close(l.closed) })
	return nil
}

func (l *pipeListener) Addr() net.Addr { return pipeAddr{} }

func (l *pipeListener) Dial() (net.Conn, error) {
	client, server := net.Pipe()
	select {
	case l.conns <- server:
		return client, nil
	case <-l.closed:
		return nil, net.ErrClosed
	}
}

type pipeAddr struct{}

func (pipeAddr) Network() string { return "pipe" }
func (pipeAddr) String() string  { return "pipe" }

// transport is a listener and a way to dial it.
type transport struct {
	name   string
	listen func(t *testing.T) (net.Listener, func() (net.Conn, error))
}

var transports = []transport{
	{"over net.Pipe", func(t *testing.T) (net.Listener, func() (net.Conn, error)) {
		l := newPipeListener()
		return l, l.Dial
	}},
	{"over a Unix socket", listenUnix},
}

func listenUnix(t *testing.T) (net.Listener, func() (net.Conn, error)) {
	t.Helper()
	// A short directory: socket paths are limited to about 100 bytes.
	dir, err := os.MkdirTemp("", "guest")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	path := filepath.Join(dir, "g.sock")
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	return l, func() (net.Conn, error) { return net.Dial("unix", path) }
}

// running is a Serve call in the background.
type running struct {
	cancel context.CancelFunc
	result chan error
	once   sync.Once
	err    error
}

// stop cancels Serve's ctx and returns what Serve returned.
func (r *running) stop() error {
	r.cancel()
	r.once.Do(func() {
		select {
		case r.err = <-r.result:
		case <-time.After(waitLimit):
			r.err = errors.New("Serve did not return")
		}
	})
	return r.err
}

// serve runs s on l until the test ends, then checks that Serve returned
// nil promptly.
func serve(t *testing.T, s *Server, l net.Listener) *running {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{cancel: cancel, result: make(chan error, 1)}
	go func() { r.result <- s.Serve(ctx, l) }()
	t.Cleanup(func() {
		if err := r.stop(); err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return r
}

// startServer serves reporter on a new listener of tr.
func startServer(t *testing.T, tr transport, reporter Reporter, opts ServerOptions) (dial func() (net.Conn, error), logs *logBuffer, r *running) {
	t.Helper()
	logs = &logBuffer{}
	if opts.AgentVersion == "" {
		opts.AgentVersion = "test-agent"
	}
	l, dial := tr.listen(t)
	r = serve(t, NewServer(reporter, logs.logger(), opts), l)
	return dial, logs, r
}

// dialClient dials and wraps the connection in a Client closed at the end.
func dialClient(t *testing.T, dial func() (net.Conn, error)) *Client {
	t.Helper()
	conn, err := dial()
	if err != nil {
		t.Fatalf("dialing: %v", err)
	}
	c := NewClient(conn)
	t.Cleanup(func() { c.Close() })
	return c
}

func callCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	t.Cleanup(cancel)
	return ctx
}

// mustReport asserts a Report call that succeeds with testReport.
func mustReport(t *testing.T, c *Client) {
	t.Helper()
	got, err := c.Report(callCtx(t))
	if err != nil {
		t.Fatalf("Report: %v", err)
	}
	if !equalReports(got, testReport) {
		t.Fatalf("Report: got %+v, want %+v", got, testReport)
	}
}

func equalReports(a, b Report) bool {
	return a.BootStage == b.BootStage && a.DiskHeadroomBytes == b.DiskHeadroomBytes &&
		a.ReadyForWork == b.ReadyForWork && a.Time.Equal(b.Time) &&
		strings.Join(a.XcodeVersions, ",") == strings.Join(b.XcodeVersions, ",")
}

// frameBytes encodes m, for tests that write raw frames.
func frameBytes(t *testing.T, m Message) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := WriteMessage(&buf, m); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// syncBuffer is a bytes.Buffer safe to read while a command writes it.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// eventually polls cond until it holds, or fails the test after waitLimit.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitLimit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// streamAll is the whole journal.
func streamAll(t *testing.T, j *Journal) string {
	t.Helper()
	var b bytes.Buffer
	if err := j.Stream(context.Background(), &b, LogOptions{}); err != nil {
		t.Fatalf("Stream: %v", err)
	}
	return b.String()
}
