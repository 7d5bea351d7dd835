package helper

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/boualleiguie/macrack-operator/internal/agent/driver"
	"github.com/boualleiguie/macrack-operator/internal/agent/driver/sim"
	"github.com/boualleiguie/macrack-operator/internal/agent/vmspec"
)

// shortDir is a temporary directory with a path short enough for sockets,
// which t.TempDir's, named after the test, may not be.
func shortDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "mrh")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

func testSpec(uid string) vmspec.VMSpec {
	return vmspec.VMSpec{
		Name: "tenant-a/" + uid, UID: uid, CPUCount: 4, MemoryBytes: 8 << 30,
		DiskPath: "/instances/" + uid + "/disk.img", DiskBytes: 200 << 30,
		BootLoader: vmspec.BootLoaderMacOS, HardwareModel: []byte("model"), MachineIdentifier: []byte("id-" + uid),
		AuxiliaryStoragePath: "/instances/" + uid + "/aux.img",
		Network:              vmspec.NetworkNAT, MACAddress: vmspec.MACAddress(uid).String(),
		Vsock: true, Display: vmspec.DefaultDisplay(),
	}
}

// serve runs a Server for spec on a socket in dir until the test ends.
func serve(t *testing.T, dir string, d driver.Driver, spec vmspec.VMSpec) (*Server, string) {
	t.Helper()
	srv, err := NewServer(d, spec)
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, spec.UID+".sock")
	ln, err := Listen(sock)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	return srv, sock
}

func dial(t *testing.T, sock string) *Client {
	t.Helper()
	c, err := Dial(context.Background(), sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func mustState(t *testing.T, c *Client, want driver.State) {
	t.Helper()
	got, err := c.State(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if got != want {
		t.Fatalf("state is %s, want %s", got, want)
	}
}

func fastSim(k sim.Kernel, opts ...sim.Option) *sim.Driver {
	return sim.New(k, append([]sim.Option{sim.WithBootTime(time.Millisecond), sim.WithShutdownTime(time.Millisecond)}, opts...)...)
}

func TestStartStateStopRoundTrip(t *testing.T) {
	spec := testSpec("u1")
	_, sock := serve(t, shortDir(t), fastSim(sim.NewMemKernel()), spec)
	c := dial(t, sock)
	if h := c.Hello(); h.InstanceUID != "u1" || h.VMName != "tenant-a/u1" || h.PID != os.Getpid() {
		t.Fatalf("hello is %+v", h)
	}
	ctx := context.Background()
	mustState(t, c, driver.StateStopped)
	if err := c.Start(ctx, spec); err != nil {
		t.Fatal(err)
	}
	mustState(t, c, driver.StateRunning)
	if err := c.Stop(ctx, time.Second); err != nil {
		t.Fatal(err)
	}
	mustState(t, c, driver.StateStopped)
}

func TestThirdStartGetsTheTypedLimitError(t *testing.T) {
	dir, k := shortDir(t), sim.NewMemKernel()
	d := fastSim(k)
	ctx := context.Background()
	for _, uid := range []string{"u1", "u2"} {
		_, sock := serve(t, dir, d, testSpec(uid))
		if err := dial(t, sock).Start(ctx, testSpec(uid)); err != nil {
			t.Fatal(err)
		}
	}
	_, sock := serve(t, dir, d, testSpec("u3"))
	c := dial(t, sock)
	err := c.Start(ctx, testSpec("u3"))
	var vz *driver.VZError
	if !errors.As(err, &vz) || vz.Domain != driver.DomainVZ || vz.Code != driver.CodeVirtualMachineLimitExceeded || !driver.IsLimitExceeded(err) {
		t.Fatalf("got %v, want a code-6 *driver.VZError", err)
	}
	mustState(t, c, driver.StateStopped)
}

func TestStartWithAnotherSpecIsRefused(t *testing.T) {
	_, sock := serve(t, shortDir(t), fastSim(sim.NewMemKernel()), testSpec("u1"))
	other := testSpec("u1")
	other.CPUCount = 8
	if err := dial(t, sock).Start(context.Background(), other); !errors.Is(err, ErrSpecMismatch) {
		t.Fatalf("got %v, want ErrSpecMismatch", err)
	}
}

func TestStop(t *testing.T) {
	cases := []struct {
		name     string
		opts     []sim.Option
		graceful time.Duration
		want     sim.StopKind
		atLeast  time.Duration
		below    time.Duration
	}{
		{"a guest that honours the request stops well within a long grace period",
			nil, time.Minute, sim.StopGraceful, 0, 10 * time.Second},
		{"a guest that ignores the request is forced off once the grace period ends",
			[]sim.Option{sim.WithGuestIgnoringShutdown()}, 200 * time.Millisecond, sim.StopForced, 200 * time.Millisecond, 10 * time.Second},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			spec := testSpec("u1")
			srv, sock := serve(t, shortDir(t), fastSim(sim.NewMemKernel(), c.opts...), spec)
			cl := dial(t, sock)
			if err := cl.Start(context.Background(), spec); err != nil {
				t.Fatal(err)
			}
			began := time.Now()
			if err := cl.Stop(context.Background(), c.graceful); err != nil {
				t.Fatal(err)
			}
			took := time.Since(began)
			if took < c.atLeast || took >= c.below {
				t.Fatalf("the stop took %v, want within [%v, %v)", took, c.atLeast, c.below)
			}
			if kind := srv.VM().(*sim.VM).LastStop(); kind != c.want {
				t.Fatalf("the stop was %s, want %s", kind, c.want)
			}
			mustState(t, cl, driver.StateStopped)
		})
	}
}

// greetAndEcho is a guest that greets with its port number, then echoes.
func greetAndEcho(_ context.Context, port uint32, conn net.Conn) {
	if _, err := conn.Write([]byte{byte(port)}); err != nil {
		return
	}
	_, _ = io.Copy(conn, conn)
}

func TestDialGuestProxiesBothWays(t *testing.T) {
	spec := testSpec("u1")
	_, sock := serve(t, shortDir(t), fastSim(sim.NewMemKernel(), sim.WithGuestHandler(greetAndEcho)), spec)
	c := dial(t, sock)
	ctx := context.Background()
	if _, err := c.DialGuest(ctx, 9); !errors.Is(err, driver.ErrNotRunning) {
		t.Fatalf("dialing a stopped VM's guest got %v, want driver.ErrNotRunning", err)
	}
	if err := c.Start(ctx, spec); err != nil {
		t.Fatal(err)
	}
	conn, err := c.DialGuest(ctx, 9)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	greeting := make([]byte, 1)
	if _, err := io.ReadFull(conn, greeting); err != nil || greeting[0] != 9 {
		t.Fatalf("the guest's greeting is %v, %v", greeting, err)
	}
	payload := make([]byte, 256<<10)
	for i := range payload {
		payload[i] = byte(i * 7)
	}
	go func() { _, _ = conn.Write(payload) }()
	echoed := make([]byte, len(payload))
	if _, err := io.ReadFull(conn, echoed); err != nil {
		t.Fatal(err)
	}
	if string(echoed) != string(payload) {
		t.Fatal("the echo differs from what was sent")
	}
	// The VM stopping ends the stream.
	if err := c.Stop(ctx, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Read(greeting); !errors.Is(err, io.EOF) {
		t.Fatalf("after the stop a read got %v, want EOF", err)
	}
}

// rawExchange sends lines on one raw connection and returns the responses,
// and whether the helper then closed the connection.
func rawExchange(t *testing.T, sock string, lines ...string) ([]response, bool) {
	t.Helper()
	conn, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	r := bufio.NewReader(conn)
	var out []response
	for _, l := range lines {
		if _, err := conn.Write([]byte(l + "\n")); err != nil {
			t.Fatal(err)
		}
		b, err := r.ReadBytes('\n')
		if err != nil {
			t.Fatalf("reading the response to %s: %v", l, err)
		}
		var resp response
		if err := json.Unmarshal(b, &resp); err != nil {
			t.Fatal(err)
		}
		out = append(out, resp)
	}
	// A helper that goes on answers a last request; one that cut the
	// connection off answers nothing.
	if _, err := conn.Write([]byte(`{"v":1,"op":"state"}` + "\n")); err != nil {
		return out, true
	}
	_, err = r.ReadBytes('\n')
	return out, errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET)
}

func TestRequestsTheHelperRefuses(t *testing.T) {
	_, sock := serve(t, shortDir(t), fastSim(sim.NewMemKernel()), testSpec("u1"))
	cases := []struct {
		name       string
		line       string
		wantCode   int
		wantClosed bool
	}{
		{"a client of a later version is refused and cut off", `{"v":2,"op":"hello"}`, CodeUnsupportedVersion, true},
		{"a client that names no version is refused and cut off", `{"op":"state"}`, CodeUnsupportedVersion, true},
		{"a line that is not JSON is refused and cut off", `start please`, CodeBadRequest, true},
		{"an unknown op is refused, and the connection goes on", `{"v":1,"op":"reboot"}`, CodeBadRequest, false},
		{"a start without a spec is refused, and the connection goes on", `{"v":1,"op":"start"}`, CodeSpecMismatch, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			lines := []string{c.line}
			if !c.wantClosed {
				lines = append(lines, `{"v":1,"op":"state"}`)
			}
			resps, closed := rawExchange(t, sock, lines...)
			first := resps[0]
			if first.OK || first.V != Version || first.Error == nil || first.Error.Domain != DomainHelper || first.Error.Code != c.wantCode {
				t.Fatalf("response %+v (error %+v), want a refusal with code %d", first, first.Error, c.wantCode)
			}
			if c.wantClosed != closed {
				t.Fatalf("connection closed: %v, want %v", closed, c.wantClosed)
			}
			if !c.wantClosed && (!resps[1].OK || resps[1].State != driver.StateStopped) {
				t.Fatalf("the request after the refusal got %+v", resps[1])
			}
		})
	}
}

func TestClientRefusesAHelperOfAnotherVersion(t *testing.T) {
	sock := filepath.Join(shortDir(t), "v2.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		conn, err := ln.Accept()
		if err != nil {
			return
		}
		defer conn.Close()
		_, _ = bufio.NewReader(conn).ReadBytes('\n')
		_, _ = conn.Write([]byte(`{"v":2,"ok":true,"hello":{"instanceUID":"u1"}}` + "\n"))
	}()
	if _, err := Dial(context.Background(), sock); !errors.Is(err, ErrUnsupportedVersion) {
		t.Fatalf("got %v, want ErrUnsupportedVersion", err)
	}
}

func TestAnAbandonedStartGoesOn(t *testing.T) {
	spec := testSpec("u1")
	k := sim.NewMemKernel()
	_, sock := serve(t, shortDir(t), sim.New(k, sim.WithBootTime(300*time.Millisecond)), spec)
	c := dial(t, sock)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := c.Start(ctx, spec); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("got %v, want the caller's deadline", err)
	}
	// The agent gave up, not the helper: the VM boots regardless.
	deadline := time.Now().Add(10 * time.Second)
	for {
		s, err := c.State(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if s == driver.StateRunning {
			break
		}
		if s != driver.StateStarting || time.Now().After(deadline) {
			t.Fatalf("the VM is %s", s)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestAClosedClientFailsAndTheHelperServesOn(t *testing.T) {
	spec := testSpec("u1")
	_, sock := serve(t, shortDir(t), fastSim(sim.NewMemKernel()), spec)
	c := dial(t, sock)
	if err := c.Start(context.Background(), spec); err != nil {
		t.Fatal(err)
	}
	c.Close()
	if _, err := c.State(context.Background()); !errors.Is(err, ErrClientClosed) {
		t.Fatalf("a closed client got %v, want ErrClientClosed", err)
	}
	mustState(t, dial(t, sock), driver.StateRunning)
}

func TestListen(t *testing.T) {
	dir := shortDir(t)
	t.Run("a stale socket file is replaced", func(t *testing.T) {
		sock := filepath.Join(dir, "stale.sock")
		ln, err := net.Listen("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		ln.(*net.UnixListener).SetUnlinkOnClose(false)
		ln.Close()
		ln, err = Listen(sock)
		if err != nil {
			t.Fatal(err)
		}
		ln.Close()
	})
	t.Run("a socket a live helper serves is not taken over", func(t *testing.T) {
		_, sock := serve(t, dir, fastSim(sim.NewMemKernel()), testSpec("live"))
		if _, err := Listen(sock); !errors.Is(err, ErrSocketInUse) {
			t.Fatalf("got %v, want ErrSocketInUse", err)
		}
	})
	t.Run("a path sockaddr_un cannot hold is refused", func(t *testing.T) {
		long := filepath.Join(dir, strings.Repeat("x", 120)+".sock")
		if _, err := Listen(long); !errors.Is(err, ErrSocketPathTooLong) {
			t.Fatalf("got %v, want ErrSocketPathTooLong", err)
		}
	})
}
