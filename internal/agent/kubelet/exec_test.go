package kubelet

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strings"
	"testing"
	"time"

	clientremotecommand "k8s.io/client-go/tools/remotecommand"
	clientexec "k8s.io/client-go/util/exec"
	"k8s.io/cri-streaming/pkg/streaming/remotecommand"
	utilexec "k8s.io/utils/exec"

	computev1alpha1 "github.com/boualleiguie/macrack-operator/api/compute/v1alpha1"
)

// transports are client-go's two executors, as kubectl uses them: SPDY
// over a POST, WebSockets (v5.channel.k8s.io) over a GET.
var transports = []struct {
	name string
	new  func(ts *testServer, token, path string) (clientremotecommand.Executor, error)
}{{
	name: "SPDY",
	new: func(ts *testServer, token, path string) (clientremotecommand.Executor, error) {
		u, err := url.Parse(ts.URL + path)
		if err != nil {
			return nil, err
		}
		return clientremotecommand.NewSPDYExecutor(ts.restConfig(token), "POST", u)
	},
}, {
	name: "WebSocket",
	new: func(ts *testServer, token, path string) (clientremotecommand.Executor, error) {
		return clientremotecommand.NewWebSocketExecutor(ts.restConfig(token), "GET", ts.URL+path)
	},
}}

// stream runs an exec against ts over each transport.
func stream(t *testing.T, ts *testServer, transport int, token, path string, o clientremotecommand.StreamOptions) error {
	t.Helper()
	ex, err := transports[transport].new(ts, token, path)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	return ex.StreamWithContext(ctx, o)
}

// TestExecStdio: stdin reaches the VM, its stdout and stderr come back,
// and the Guests see the resolved instance and the command.
func TestExecStdio(t *testing.T) {
	g := &fakeGuests{exec: func(_ context.Context, inst *computev1alpha1.MacOSInstance, cmd []string, in io.Reader, out, errOut io.WriteCloser, tty bool, resize <-chan remotecommand.TerminalSize) error {
		if inst.UID != uidA || tty || resize != nil {
			return fmt.Errorf("instance %s tty %v resize %v", inst.UID, tty, resize)
		}
		b, err := io.ReadAll(in)
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "out:%s", b)
		if errOut != nil {
			fmt.Fprintf(errOut, "err:%s", strings.Join(cmd, " "))
		}
		return nil
	}}
	ts := newTestServer(t, g)
	for i, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			err := stream(t, ts, i, adminToken, "/exec/tenant-a/vm-a/macos?command=cat&command=-n&input=1&output=1&error=1",
				clientremotecommand.StreamOptions{Stdin: strings.NewReader("hello"), Stdout: &stdout, Stderr: &stderr})
			if err != nil {
				t.Fatal(err)
			}
			if stdout.String() != "out:hello" || stderr.String() != "err:cat -n" {
				t.Fatalf("stdout %q stderr %q", stdout.String(), stderr.String())
			}
		})
	}
	t.Run("UID form", func(t *testing.T) {
		var stdout bytes.Buffer
		if err := stream(t, ts, 0, adminToken, "/exec/tenant-a/vm-a/uid-a/macos?command=cat&input=1&output=1",
			clientremotecommand.StreamOptions{Stdin: strings.NewReader("x"), Stdout: &stdout}); err != nil {
			t.Fatal(err)
		}
		if stdout.String() != "out:x" {
			t.Fatalf("stdout %q", stdout.String())
		}
	})
	// The command is not logged, only its argv[0].
	if log := ts.log.String(); !strings.Contains(log, `"command"="cat"`) || strings.Contains(log, "-n") {
		t.Errorf("log:\n%s", log)
	}
}

// TestExecExitCode: a command's non-zero exit reaches the client as
// client-go's CodeExitError with the code, over both transports, even
// wrapped by the Guests.
func TestExecExitCode(t *testing.T) {
	g := &fakeGuests{exec: func(_ context.Context, _ *computev1alpha1.MacOSInstance, _ []string, _ io.Reader, out, _ io.WriteCloser, _ bool, _ <-chan remotecommand.TerminalSize) error {
		fmt.Fprint(out, "partial")
		return fmt.Errorf("guest agent: %w", utilexec.CodeExitError{Err: errors.New("exit status 3"), Code: 3})
	}}
	ts := newTestServer(t, g)
	for i, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			var stdout bytes.Buffer
			err := stream(t, ts, i, adminToken, "/exec/tenant-a/vm-a/macos?command=false&output=1",
				clientremotecommand.StreamOptions{Stdout: &stdout})
			var exit clientexec.CodeExitError
			if !errors.As(err, &exit) || exit.Code != 3 {
				t.Fatalf("got %T %v; want a CodeExitError with code 3", err, err)
			}
			if stdout.String() != "partial" {
				t.Fatalf("stdout %q", stdout.String())
			}
		})
	}
}

// sizeQueue hands out its sizes, then ends.
type sizeQueue chan clientremotecommand.TerminalSize

func (q sizeQueue) Next() *clientremotecommand.TerminalSize {
	s, ok := <-q
	if !ok {
		return nil
	}
	return &s
}

// TestExecTTYResize: a terminal's sizes reach the Guests.
func TestExecTTYResize(t *testing.T) {
	g := &fakeGuests{exec: func(ctx context.Context, _ *computev1alpha1.MacOSInstance, _ []string, in io.Reader, out, errOut io.WriteCloser, tty bool, resize <-chan remotecommand.TerminalSize) error {
		if !tty || resize == nil || errOut != nil {
			return fmt.Errorf("tty %v resize %v stderr %v", tty, resize, errOut)
		}
		var sizes []string
		for len(sizes) < 2 {
			select {
			case s := <-resize:
				sizes = append(sizes, fmt.Sprintf("%dx%d", s.Width, s.Height))
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		fmt.Fprintf(out, "sizes %s", strings.Join(sizes, " "))
		return nil
	}}
	ts := newTestServer(t, g)
	for i, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			q := make(sizeQueue, 2)
			q <- clientremotecommand.TerminalSize{Width: 80, Height: 24}
			q <- clientremotecommand.TerminalSize{Width: 120, Height: 40}
			defer close(q)
			var stdout bytes.Buffer
			err := stream(t, ts, i, adminToken, "/exec/tenant-a/vm-a/macos?command=zsh&input=1&output=1&tty=1",
				clientremotecommand.StreamOptions{Stdin: strings.NewReader(""), Stdout: &stdout, Tty: true, TerminalSizeQueue: q})
			if err != nil {
				t.Fatal(err)
			}
			if stdout.String() != "sizes 80x24 120x40" {
				t.Fatalf("stdout %q", stdout.String())
			}
		})
	}
}

// TestExecRefused: the server's refusals reach client-go's executors
// with their message, and no request reaches the Guests: a get-only
// identity's exec (a SPDY POST, and a WebSocket GET), no credentials, a
// VM that is not this node's, a stopped VM, and attach.
func TestExecRefused(t *testing.T) {
	g := &fakeGuests{exec: func(context.Context, *computev1alpha1.MacOSInstance, []string, io.Reader, io.WriteCloser, io.WriteCloser, bool, <-chan remotecommand.TerminalSize) error {
		return nil
	}}
	ts := newTestServer(t, g)
	const run = "?command=id&output=1"
	cases := []struct {
		name, token, path, msg string
	}{
		{"get-only identity", getterToken, "/exec/tenant-a/vm-a/macos" + run, "Forbidden (user=getter, verb=create, resource=nodes, subresource=proxy)"},
		{"no credentials", "", "/exec/tenant-a/vm-a/macos" + run, "Unauthorized"},
		{"forged pod", adminToken, "/exec/tenant-a/vm-forged/macos" + run, "no MacRack VM tenant-a/vm-forged on node mini1"},
		{"wrong uid", adminToken, "/exec/tenant-a/vm-a/uid-x/macos" + run, "no MacRack VM tenant-a/vm-a with uid uid-x on node mini1"},
		{"stopped VM", adminToken, "/exec/tenant-a/vm-s/macos" + run, "instance tenant-a/vm-s is Stopped: exec needs a running VM"},
		{"no command", adminToken, "/exec/tenant-a/vm-a/macos?output=1", "exec needs a command: no command= in the query"},
		{"attach", adminToken, "/attach/tenant-a/vm-a/macos?output=1", attachRefused},
		{"attach by a get-only identity", getterToken, "/attach/tenant-a/vm-a/macos?output=1", "Forbidden (user=getter, verb=create, resource=nodes, subresource=proxy)"},
	}
	for _, c := range cases {
		for i, tr := range transports {
			t.Run(c.name+"/"+tr.name, func(t *testing.T) {
				var stdout bytes.Buffer
				err := stream(t, ts, i, c.token, c.path, clientremotecommand.StreamOptions{Stdout: &stdout})
				if err == nil || !strings.Contains(err.Error(), c.msg) {
					t.Fatalf("got %v; want %q", err, c.msg)
				}
				t.Logf("%s", err)
			})
		}
	}
	if n := g.called(); n != 0 {
		t.Fatalf("the Guests were called %d times", n)
	}
	// The control: the admin's exec over both transports runs.
	for i, tr := range transports {
		if err := stream(t, ts, i, adminToken, "/exec/tenant-a/vm-a/macos"+run, clientremotecommand.StreamOptions{Stdout: io.Discard}); err != nil {
			t.Fatalf("%s: %v", tr.name, err)
		}
	}
	if n := g.called(); n != 2 {
		t.Fatalf("the Guests were called %d times, want 2", n)
	}
}
