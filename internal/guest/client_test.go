package guest

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"
)

// fakeGuest plays the guest on the far end of a pipe: for each answer it
// reads one request and writes the answer's raw bytes, or hangs up if the
// answer is nil. After the last answer it hangs up if hangUp, or else reads
// until the client closes. closed is closed when the guest's end is.
func fakeGuest(t *testing.T, hangUp bool, answers ...[]byte) (c *Client, requests <-chan Frame, closed <-chan struct{}) {
	t.Helper()
	host, guest := net.Pipe()
	reqs := make(chan Frame, len(answers)+8)
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer guest.Close()
		for _, a := range answers {
			f, err := ReadFrame(guest)
			if err != nil {
				return
			}
			reqs <- f
			if a == nil {
				return
			}
			// The client may close before reading all of a bad answer.
			_, _ = guest.Write(a)
		}
		for !hangUp {
			f, err := ReadFrame(guest)
			if err != nil {
				return
			}
			reqs <- f
		}
	}()
	c = NewClient(host)
	t.Cleanup(func() {
		c.Close()
		<-done
	})
	return c, reqs, done
}

// waitClosed asserts that the client closed its end.
func waitClosed(t *testing.T, closed <-chan struct{}) {
	t.Helper()
	select {
	case <-closed:
	case <-time.After(waitLimit):
		t.Fatal("the client left the connection open")
	}
}

func TestTheHostAcceptsAGuestOfItsMajorAndRefusesOthers(t *testing.T) {
	for _, tc := range []struct {
		name  string
		guest string
		want  error
	}{
		{"a guest of the same version is accepted", "1.0", nil},
		{"a guest of a later minor is accepted", "1.7", nil},
		{"a guest of the next major is refused", "2.0", ErrUnsupportedVersion},
		{"a guest of an older major is refused", "0.9", ErrUnsupportedVersion},
		{"a guest whose version is not major.minor is refused", "one", ErrMalformed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, reqs, closed := fakeGuest(t, false, frameBytes(t, HelloAck{ProtocolVersion: tc.guest, AgentVersion: "g1"}))
			ack, err := c.Handshake(callCtx(t))
			if hello := <-reqs; hello.Type != TypeHello || !strings.Contains(string(hello.Payload), `"protocolVersion":"`+ProtocolVersion+`"`) {
				t.Fatalf("the host opened with %s %s", hello.Type, hello.Payload)
			}
			if tc.want == nil {
				if err != nil || ack.ProtocolVersion != tc.guest || ack.AgentVersion != "g1" {
					t.Fatalf("got %+v, %v; want the guest's HelloAck", ack, err)
				}
				return
			}
			if !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
			if !strings.Contains(err.Error(), tc.guest) {
				t.Fatalf("error %q does not name the guest's version %q", err, tc.guest)
			}
			waitClosed(t, closed)
			if _, err := c.Report(callCtx(t)); !errors.Is(err, ErrClosed) {
				t.Fatalf("Report after a refused handshake: got %v, want ErrClosed", err)
			}
		})
	}
}

func TestAGuestOfAnotherMajorRefusesTheHostClearly(t *testing.T) {
	dial, _, _ := startServer(t, transports[1], &stubReporter{report: testReport}, ServerOptions{})
	future := dialClient(t, dial)
	future.version = "2.0"
	_, err := future.Handshake(callCtx(t))
	if !errors.Is(err, ErrUnsupportedVersion) || !errors.Is(err, ErrRemote) || !strings.Contains(err.Error(), "2.0") {
		t.Fatalf("got %v, want the guest's refusal naming version 2.0", err)
	}
	// The positive control: a host of the guest's major is served.
	current := dialClient(t, dial)
	if _, err := current.Handshake(callCtx(t)); err != nil {
		t.Fatalf("a host of the same major was refused: %v", err)
	}
}

func TestGarbageFromTheGuestFailsTheCallAndClosesTheConnection(t *testing.T) {
	ack := frameBytes(t, HelloAck{ProtocolVersion: ProtocolVersion, AgentVersion: "g1"})
	for _, tc := range []struct {
		name    string
		answers [][]byte
		hangUp  bool
		want    error
	}{
		{"a guest that answers Hello with noise", [][]byte{[]byte("SSH-2.0-OpenSSH_9.6\r\n")}, false, ErrBadMagic},
		{"a guest that claims a 4 GiB report", [][]byte{ack, rawFrame("MRG\x01", 4, 0xFFFFFFFF, "")}, false, ErrFrameTooLarge},
		{"a guest that answers with invalid JSON", [][]byte{ack, rawFrame("MRG\x01", 4, 3, "{]}")}, false, ErrMalformed},
		{"a guest whose report has a bad time", [][]byte{ack, rawFrame("MRG\x01", 4, 15, `{"time":"soon"}`)}, false, ErrMalformed},
		{"a guest that answers Hello with a Report", [][]byte{frameBytes(t, testReport)}, false, ErrUnexpectedMessage},
		{"a guest that answers a ReportRequest with a HelloAck", [][]byte{ack, ack}, false, ErrUnexpectedMessage},
		{"a guest that hangs up mid-answer", [][]byte{ack, rawFrame("MRG\x01", 4, 40, `{"bootStage"`)}, true, ErrTruncated},
		{"a guest that hangs up instead of answering", [][]byte{ack, nil}, false, io.EOF},
		{"a guest that reports a protocol error", [][]byte{ack, frameBytes(t, Error{Code: CodeMalformed, Message: "bad frame magic"})}, false, ErrRemote},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, _, closed := fakeGuest(t, tc.hangUp, tc.answers...)
			_, err := c.Report(callCtx(t))
			if !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
			waitClosed(t, closed)
			if _, err := c.Report(callCtx(t)); !errors.Is(err, ErrClosed) {
				t.Fatalf("the next call: got %v, want ErrClosed", err)
			}
		})
	}
}

func TestAGuestThatCannotReportKeepsTheConnection(t *testing.T) {
	reporter := &stubReporter{report: testReport, fail: func(call int) error {
		if call == 1 {
			return errors.New("statfs /: input/output error")
		}
		return nil
	}}
	dial, _, _ := startServer(t, transports[0], reporter, ServerOptions{})
	c := dialClient(t, dial)
	_, err := c.Report(callCtx(t))
	if !errors.Is(err, ErrRemote) || errors.Is(err, ErrClosed) || !strings.Contains(err.Error(), "input/output error") {
		t.Fatalf("got %v, want the guest's report failure with the connection kept", err)
	}
	mustReport(t, c)
}

func TestTheHostHonoursItsContext(t *testing.T) {
	for _, tc := range []struct {
		name string
		ctx  func() (context.Context, context.CancelFunc)
		want error
	}{
		{"a deadline that passes while the guest is silent", func() (context.Context, context.CancelFunc) {
			return context.WithTimeout(context.Background(), 50*time.Millisecond)
		}, context.DeadlineExceeded},
		{"a cancellation while the guest is silent", func() (context.Context, context.CancelFunc) {
			ctx, cancel := context.WithCancel(context.Background())
			time.AfterFunc(50*time.Millisecond, cancel)
			return ctx, cancel
		}, context.Canceled},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// The guest reads the Hello and never answers.
			c, reqs, closed := fakeGuest(t, false)
			ctx, cancel := tc.ctx()
			defer cancel()
			start := time.Now()
			_, err := c.Report(ctx)
			if !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
			if waited := time.Since(start); waited > 2*time.Second {
				t.Fatalf("the call took %v after its context ended", waited)
			}
			if f := <-reqs; f.Type != TypeHello {
				t.Fatalf("the guest got %s, want Hello", f.Type)
			}
			// The answer may still come: the stream is out of step.
			waitClosed(t, closed)
		})
	}
}

func TestAContextDoneBeforeTheCallSendsNothingAndKeepsTheConnection(t *testing.T) {
	dial, _, _ := startServer(t, transports[0], &stubReporter{report: testReport}, ServerOptions{})
	c := dialClient(t, dial)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := c.Report(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v, want context.Canceled", err)
	}
	mustReport(t, c)
}

func TestAClosedClientRefusesCalls(t *testing.T) {
	dial, _, _ := startServer(t, transports[0], &stubReporter{report: testReport}, ServerOptions{})
	c := dialClient(t, dial)
	mustReport(t, c)
	if err := c.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if _, err := c.Report(callCtx(t)); !errors.Is(err, ErrClosed) {
		t.Fatalf("got %v, want ErrClosed", err)
	}
	if err := c.Close(); err != nil {
		t.Fatalf("a second Close: %v", err)
	}
}

func TestCloseInterruptsACallInFlight(t *testing.T) {
	// The guest reads the Hello and never answers.
	c, reqs, closed := fakeGuest(t, false)
	errs := make(chan error, 1)
	go func() {
		_, err := c.Report(callCtx(t))
		errs <- err
	}()
	if f := <-reqs; f.Type != TypeHello {
		t.Fatalf("the guest got %s, want Hello", f.Type)
	}
	if err := c.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	select {
	case err := <-errs:
		if !errors.Is(err, ErrClosed) {
			t.Fatalf("the interrupted call returned %v, want ErrClosed", err)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("Close did not interrupt the call")
	}
	waitClosed(t, closed)
}
