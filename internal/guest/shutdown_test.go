package guest

import (
	"context"
	"errors"
	"strings"
	"testing"
)

// A host asks the guest to shut down: the guest's Shutdown runs with the
// connection's context, the host gets the acknowledgement, and the guest
// ends the connection.
func TestAGuestAskedToShutDownRunsItsShutdownAndAcknowledges(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			asked := make(chan struct{}, 1)
			dial, _, _ := startServer(t, tr, &stubReporter{report: testReport}, ServerOptions{
				Shutdown: func(ctx context.Context) error {
					if ctx == nil {
						return errors.New("no context")
					}
					asked <- struct{}{}
					return nil
				},
			})
			c := dialClient(t, dial)
			mustReport(t, c) // a shutdown may follow reports on one connection
			if err := c.Shutdown(callCtx(t)); err != nil {
				t.Fatalf("Shutdown: %v", err)
			}
			select {
			case <-asked:
			default:
				t.Fatal("the guest acknowledged a shutdown it did not begin")
			}
			if _, err := c.Report(callCtx(t)); err == nil {
				t.Fatal("the connection outlived the guest's shutdown")
			}
		})
	}
}

// A guest that cannot shut down says so, and the connection goes on; so
// does one whose shutdown fails.
func TestAGuestThatCannotShutDownSaysSoAndServesOn(t *testing.T) {
	for _, tc := range []struct {
		name     string
		shutdown func(context.Context) error
		want     string
	}{
		{"no way to shut down", nil, "cannot shut the guest down"},
		{"the command failed", func(context.Context) error { return errors.New("shutdown: permission denied") }, "permission denied"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dial, _, _ := startServer(t, transports[0], &stubReporter{report: testReport}, ServerOptions{Shutdown: tc.shutdown})
			c := dialClient(t, dial)
			err := c.Shutdown(callCtx(t))
			if !errors.Is(err, ErrRemote) || !strings.Contains(err.Error(), CodeShutdownFailed) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Shutdown: %v, want the guest's %s saying %q", err, CodeShutdownFailed, tc.want)
			}
			mustReport(t, c)
		})
	}
}

// A guest agent older than 1.1 knows no ShutdownRequest: the host does not
// send it one (it would close the connection on the unknown frame).
func TestAGuestOlderThanShutdownIsNotAsked(t *testing.T) {
	c, reqs, _ := fakeGuest(t, false, frameBytes(t, HelloAck{ProtocolVersion: "1.0", AgentVersion: "old"}))
	err := c.Shutdown(callCtx(t))
	if !errors.Is(err, ErrShutdownUnsupported) || !strings.Contains(err.Error(), "1.0") {
		t.Fatalf("Shutdown of a 1.0 guest: %v, want ErrShutdownUnsupported", err)
	}
	if hello := <-reqs; hello.Type != TypeHello {
		t.Fatalf("first frame %s, want Hello", hello.Type)
	}
	select {
	case f := <-reqs:
		t.Fatalf("the host sent a 1.0 guest a %s", f.Type)
	default:
	}
	// The positive control: a 1.1 guest is asked.
	c2, reqs2, _ := fakeGuest(t, true, frameBytes(t, HelloAck{ProtocolVersion: "1.1", AgentVersion: "new"}), frameBytes(t, ShutdownAck{}))
	if err := c2.Shutdown(callCtx(t)); err != nil {
		t.Fatalf("Shutdown of a 1.1 guest: %v", err)
	}
	<-reqs2
	if f := <-reqs2; f.Type != TypeShutdownRequest {
		t.Fatalf("second frame %s, want ShutdownRequest", f.Type)
	}
}
