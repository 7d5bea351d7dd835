package guest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"
)

func TestAHostShakesHandsAndGetsReports(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			reporter := &stubReporter{report: testReport}
			dial, _, _ := startServer(t, tr, reporter, ServerOptions{})
			c := dialClient(t, dial)

			ack, err := c.Handshake(callCtx(t))
			if err != nil {
				t.Fatalf("Handshake: %v", err)
			}
			if ack != (HelloAck{ProtocolVersion: ProtocolVersion, AgentVersion: "test-agent"}) {
				t.Fatalf("HelloAck: got %+v", ack)
			}
			mustReport(t, c)
			mustReport(t, c)
			if n := reporter.Calls(); n != 2 {
				t.Fatalf("the reporter ran %d times for 2 requests", n)
			}
		})
	}
}

func TestReportShakesHandsFirstIfTheHostDidNot(t *testing.T) {
	dial, _, _ := startServer(t, transports[0], &stubReporter{report: testReport}, ServerOptions{})
	mustReport(t, dialClient(t, dial))
}

// barrierReporter answers only once n calls are in flight together, which
// proves that the server serves connections concurrently.
type barrierReporter struct {
	n       int32
	arrived atomic.Int32
	all     chan struct{}
	once    sync.Once
}

func (r *barrierReporter) Report(ctx context.Context) (Report, error) {
	if r.arrived.Add(1) == r.n {
		r.once.Do(func() { close(r.all) })
	}
	select {
	case <-r.all:
		return testReport, nil
	case <-ctx.Done():
		return Report{}, fmt.Errorf("only %d of %d reports in flight: %w", r.arrived.Load(), r.n, ctx.Err())
	}
}

func TestManyHostsAreServedAtOnce(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			const clients = 32
			reporter := &barrierReporter{n: clients, all: make(chan struct{})}
			dial, _, _ := startServer(t, tr, reporter, ServerOptions{ReportTimeout: waitLimit})
			var wg sync.WaitGroup
			errs := make(chan error, clients)
			for range clients {
				conn, err := dial()
				if err != nil {
					t.Fatalf("dialing: %v", err)
				}
				c := NewClient(conn)
				t.Cleanup(func() { c.Close() })
				wg.Go(func() {
					r, err := c.Report(callCtx(t))
					if err == nil && !equalReports(r, testReport) {
						err = fmt.Errorf("got %+v", r)
					}
					errs <- err
				})
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				if err != nil {
					t.Fatalf("a concurrent client failed: %v", err)
				}
			}
		})
	}
}

// badPeer opens a raw connection, optionally shakes hands, writes raw, and
// returns the Error the server answers with; it then checks that the server
// closed the connection.
func badPeer(t *testing.T, dial func() (net.Conn, error), handshake bool, raw []byte, halfClose bool) Error {
	t.Helper()
	conn, err := dial()
	if err != nil {
		t.Fatalf("dialing: %v", err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(waitLimit))
	if handshake {
		if err := WriteMessage(conn, Hello{ProtocolVersion: ProtocolVersion}); err != nil {
			t.Fatalf("writing Hello: %v", err)
		}
		if m, err := ReadMessage(conn); err != nil || m.Type() != TypeHelloAck {
			t.Fatalf("handshake: got %v, %v", m, err)
		}
	}
	if _, err := conn.Write(raw); err != nil {
		t.Fatalf("writing the bad bytes: %v", err)
	}
	if halfClose {
		if err := conn.(*net.UnixConn).CloseWrite(); err != nil {
			t.Fatalf("half-closing: %v", err)
		}
	}
	m, err := ReadMessage(conn)
	if err != nil {
		t.Fatalf("reading the server's answer: %v", err)
	}
	e, ok := m.(Error)
	if !ok {
		t.Fatalf("the server answered %#v, want an Error", m)
	}
	if _, err := ReadFrame(conn); err != io.EOF {
		t.Fatalf("after the Error: got %v, want the server to close (io.EOF)", err)
	}
	return e
}

func TestABadPeerIsToldWhyAndLosesOnlyItsOwnConnection(t *testing.T) {
	hello := frameBytes(t, Hello{ProtocolVersion: ProtocolVersion})
	for _, tc := range []struct {
		name      string
		handshake bool
		raw       []byte
		halfClose bool
		code      string
		says      string
	}{
		{"a peer that opens with the wrong magic", false, []byte("GET / HTTP/1.1\r\n\r\n"), false, CodeMalformed, "bad frame magic"},
		{"a peer with a future frame format", false, rawFrame("MRG\x09", 1, 2, "{}"), false, CodeUnsupportedVersion, "frame format version 9"},
		{"a peer that sends an unknown message type", false, rawFrame("MRG\x01", 42, 2, "{}"), false, CodeMalformed, "unknown message type: 42"},
		{"a peer that claims a 4 GiB frame", false, rawFrame("MRG\x01", 1, 0xFFFFFFFF, ""), false, CodeMalformed, "frame too large"},
		{"a peer that sends invalid JSON", false, rawFrame("MRG\x01", 1, 6, "{nope}"), false, CodeMalformed, "invalid JSON"},
		{"a peer that stops in the middle of a payload", false, rawFrame("MRG\x01", 1, 30, `{"protocolVersion"`), true, CodeMalformed, "truncated frame"},
		{"a peer whose Hello is not a Hello", false, rawFrame("MRG\x01", 1, 22, `{"protocolVersion":10}`), false, CodeMalformed, "malformed frame"},
		{"a peer that asks for a report before Hello", false, frameBytes(t, ReportRequest{}), false, CodeUnexpectedMessage, "ReportRequest before Hello"},
		{"a peer of protocol 2", false, frameBytes(t, Hello{ProtocolVersion: "2.0"}), false, CodeUnsupportedVersion, "peer speaks protocol 2.0"},
		{"a peer whose version is not major.minor", false, frameBytes(t, Hello{ProtocolVersion: "latest"}), false, CodeMalformed, "is not major.minor"},
		{"a peer that sends garbage after the handshake", true, []byte("\x00\x00\x00\x00\x00\x00\x00\x00\x00"), false, CodeMalformed, "bad frame magic"},
		{"a peer that says Hello twice", true, hello, false, CodeUnexpectedMessage, "Hello after the handshake"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dial, logs, _ := startServer(t, transports[1], &stubReporter{report: testReport}, ServerOptions{})
			good := dialClient(t, dial)
			mustReport(t, good)

			e := badPeer(t, dial, tc.handshake, tc.raw, tc.halfClose)
			if e.Code != tc.code || !strings.Contains(e.Message, tc.says) {
				t.Fatalf("the server answered %+v, want code %q saying %q", e, tc.code, tc.says)
			}
			// The positive control: the good host, connected all along, is
			// still served on its connection.
			mustReport(t, good)
			if l := logs.String(); !strings.Contains(l, "Closing a connection that broke the protocol") || !strings.Contains(l, tc.says) {
				t.Fatalf("the server did not log the refusal; logs:\n%s", l)
			}
		})
	}
}

func TestASilentPeerIsDisconnectedWhileOthersAreServed(t *testing.T) {
	for _, tc := range []struct {
		name      string
		handshake bool
	}{
		{"a peer that never says Hello", false},
		{"a peer that goes quiet after the handshake", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const timeout = 100 * time.Millisecond
			dial, logs, _ := startServer(t, transports[1], &stubReporter{report: testReport},
				ServerOptions{HandshakeTimeout: timeout, IdleTimeout: timeout})
			silent, err := dial()
			if err != nil {
				t.Fatal(err)
			}
			defer silent.Close()
			silent.SetDeadline(time.Now().Add(waitLimit))
			if tc.handshake {
				if _, err := silent.Write(frameBytes(t, Hello{ProtocolVersion: ProtocolVersion})); err != nil {
					t.Fatal(err)
				}
				if m, err := ReadMessage(silent); err != nil || m.Type() != TypeHelloAck {
					t.Fatalf("handshake: got %v, %v", m, err)
				}
			}
			// A well-behaved host works in the meantime, reconnecting as
			// the idle timeout requires.
			start := time.Now()
			mustReport(t, dialClient(t, dial))
			if _, err := ReadFrame(silent); err != io.EOF {
				t.Fatalf("the silent peer read %v, want the server to close (io.EOF)", err)
			}
			if waited := time.Since(start); waited > 2*time.Second {
				t.Fatalf("the server held a silent peer for %v with a %v timeout", waited, timeout)
			}
			if !strings.Contains(logs.String(), "Closing a silent connection") {
				t.Fatalf("the server did not log the timeout; logs:\n%s", logs.String())
			}
		})
	}
}

func TestServeClosesEverythingWhenItsContextIsDone(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			dial, _, r := startServer(t, tr, &stubReporter{report: testReport}, ServerOptions{})
			c := dialClient(t, dial)
			mustReport(t, c)

			if err := r.stop(); err != nil {
				t.Fatalf("Serve after cancellation: got %v, want nil", err)
			}
			if _, err := c.Report(callCtx(t)); err == nil {
				t.Fatal("a connection outlived the server")
			}
			if conn, err := dial(); err == nil {
				conn.Close()
				t.Fatal("the listener still accepts after the server stopped")
			}
		})
	}
}

func TestServeFailsWhenItsListenerIsClosedUnderIt(t *testing.T) {
	l := newPipeListener()
	done := make(chan error, 1)
	go func() {
		done <- NewServer(&stubReporter{}, (&logBuffer{}).logger(), ServerOptions{}).Serve(context.Background(), l)
	}()
	l.Close()
	select {
	case err := <-done:
		if !errors.Is(err, net.ErrClosed) {
			t.Fatalf("got %v, want net.ErrClosed", err)
		}
	case <-time.After(waitLimit):
		t.Fatal("Serve did not return")
	}
}

// flakyListener fails its first Accept, then hands out pipe connections.
type flakyListener struct {
	*pipeListener
	failed atomic.Bool
}

func (l *flakyListener) Accept() (net.Conn, error) {
	if !l.failed.Swap(true) {
		return nil, errors.New("accept: too many open files")
	}
	return l.pipeListener.Accept()
}

func TestAFailedAcceptIsRetriedAfterABackoff(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Date(2026, 6, 2, 13, 0, 0, 0, time.UTC))
	l := &flakyListener{pipeListener: newPipeListener()}
	logs := &logBuffer{}
	serve(t, NewServer(&stubReporter{report: testReport}, logs.logger(), ServerOptions{Clock: clk}), l)

	deadline := time.Now().Add(waitLimit)
	for !clk.HasWaiters() {
		if time.Now().After(deadline) {
			t.Fatal("the server did not wait on its clock after a failed Accept")
		}
		time.Sleep(time.Millisecond)
	}
	accepted := make(chan net.Conn, 1)
	go func() {
		if conn, err := l.Dial(); err == nil {
			accepted <- conn
		}
	}()
	select {
	case <-accepted:
		t.Fatal("the server accepted again before its backoff passed")
	case <-time.After(50 * time.Millisecond):
	}
	clk.Step(minAcceptBackoff)
	select {
	case conn := <-accepted:
		c := NewClient(conn)
		defer c.Close()
		mustReport(t, c)
	case <-time.After(waitLimit):
		t.Fatal("the server did not accept after its backoff")
	}
	if !strings.Contains(logs.String(), "too many open files") {
		t.Fatalf("the Accept failure was not logged; logs:\n%s", logs.String())
	}
}
