package guest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
)

// tcpService serves each connection a TCP listener on the loopback
// accepts with serve, until the test ends; it waits for them then.
func tcpService(t testing.TB, serve func(c *net.TCPConn)) uint16 {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer c.Close()
				serve(c.(*net.TCPConn))
			})
		}
	})
	t.Cleanup(func() {
		l.Close()
		wg.Wait()
	})
	return uint16(l.Addr().(*net.TCPAddr).Port)
}

// echo sends back what it reads, then half-closes once its input ended.
func echo(c *net.TCPConn) {
	if _, err := io.Copy(c, c); err == nil {
		_ = c.CloseWrite()
	}
}

// closedPort is a loopback port nothing listens on.
func closedPort(t testing.TB) uint16 {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := uint16(l.Addr().(*net.TCPAddr).Port)
	l.Close()
	return port
}

// localPairs hands out connected TCP pairs on the loopback: the local
// side of a forward (what a kubectl port-forward's listener accepted) and
// its client's.
type localPairs struct {
	t testing.TB
	l net.Listener
}

func newLocalPairs(t testing.TB) *localPairs {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return &localPairs{t: t, l: l}
}

// pair is a client connection and the accepted one, Forward's conn.
func (p *localPairs) pair() (client, local *net.TCPConn) {
	p.t.Helper()
	c, err := net.Dial("tcp", p.l.Addr().String())
	if err != nil {
		p.t.Fatal(err)
	}
	a, err := p.l.Accept()
	if err != nil {
		p.t.Fatal(err)
	}
	return c.(*net.TCPConn), a.(*net.TCPConn)
}

// forwardAsync runs Forward in the background; its result comes on the
// channel.
func forwardAsync(ctx context.Context, s *Session, port uint16, conn io.ReadWriteCloser) <-chan error {
	done := make(chan error, 1)
	go func() { done <- s.Forward(ctx, port, conn) }()
	return done
}

func waitForward(t testing.TB, done <-chan error) error {
	t.Helper()
	select {
	case err := <-done:
		return err
	case <-time.After(waitLimit):
		t.Fatal("Forward did not return")
		return nil
	}
}

// A forward carries bytes both ways, and each way's end: the client's
// half-close reaches the guest's service, whose answer then comes back
// whole and ends; and the other way round, a service that says its piece
// and half-closes still hears the client's answer. The journal names the
// port only.
func TestForwardEchoesAndPassesOnHalfCloses(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			echoPort := tcpService(t, echo)
			heard := make(chan string, 1)
			bannerPort := tcpService(t, func(c *net.TCPConn) {
				if _, err := c.Write([]byte("banner\n")); err != nil {
					return
				}
				_ = c.CloseWrite()
				b, _ := io.ReadAll(c)
				heard <- string(b)
			})
			dial, j := sessionServer(t, tr, ServerOptions{})
			s := openSession(t, dial)
			pairs := newLocalPairs(t)

			client, local := pairs.pair()
			done := forwardAsync(callCtx(t), s, echoPort, local)
			payload := strings.Repeat("secret payload ", 10000)
			go func() {
				_, _ = io.WriteString(client, payload)
				_ = client.CloseWrite()
			}()
			got, err := io.ReadAll(client)
			if err != nil || string(got) != payload {
				t.Fatalf("the echo: %d bytes, %v; want the %d sent, then an end", len(got), err, len(payload))
			}
			if err := waitForward(t, done); err != nil {
				t.Fatalf("Forward: %v, want nil on a clean end", err)
			}
			client.Close()

			client, local = pairs.pair()
			done = forwardAsync(callCtx(t), s, bannerPort, local)
			banner, err := io.ReadAll(client)
			if err != nil || string(banner) != "banner\n" {
				t.Fatalf("the banner: %q, %v", banner, err)
			}
			if _, err := io.WriteString(client, "thanks"); err != nil {
				t.Fatalf("answering after the service's half-close: %v", err)
			}
			_ = client.CloseWrite()
			if got := <-heard; got != "thanks" {
				t.Fatalf("the service heard %q, want the client's answer", got)
			}
			if err := waitForward(t, done); err != nil {
				t.Fatalf("Forward: %v", err)
			}
			client.Close()

			wants := []string{
				fmt.Sprintf("forward to port %d opened", echoPort), fmt.Sprintf("forward to port %d closed", echoPort),
				fmt.Sprintf("forward to port %d opened", bannerPort), fmt.Sprintf("forward to port %d closed", bannerPort),
			}
			// The guest journals a close as its side of the forward ends,
			// which may be just after the client's side has.
			journal := streamAll(t, j)
			for deadline := time.Now().Add(5 * time.Second); !containsAll(journal, wants) && time.Now().Before(deadline); {
				time.Sleep(10 * time.Millisecond)
				journal = streamAll(t, j)
			}
			for _, want := range wants {
				if !strings.Contains(journal, want) {
					t.Errorf("the journal does not say %q:\n%s", want, journal)
				}
			}
			if strings.Contains(journal, "secret") || strings.Contains(journal, "banner") {
				t.Errorf("the journal quotes a forward's bytes:\n%s", journal)
			}
		})
	}
}

// A conn without CloseWrite (net.Pipe's) still works: the guest's end of
// output ends the forward.
func TestForwardOfAConnWithoutHalfClose(t *testing.T) {
	echoPort := tcpService(t, echo)
	dial, _ := sessionServer(t, transports[0], ServerOptions{})
	s := openSession(t, dial)
	client, local := net.Pipe()
	defer client.Close()
	done := forwardAsync(callCtx(t), s, echoPort, local)
	client.SetDeadline(time.Now().Add(waitLimit))
	if _, err := client.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4)
	if _, err := io.ReadFull(client, buf); err != nil || string(buf) != "ping" {
		t.Fatalf("echo: %q, %v", buf, err)
	}
	client.Close()
	if err := waitForward(t, done); err != nil {
		t.Fatalf("Forward after the client closed: %v, want nil", err)
	}
}

func TestForwardToAClosedPortIsErrPortClosed(t *testing.T) {
	port := closedPort(t)
	echoPort := tcpService(t, echo)
	dial, j := sessionServer(t, transports[1], ServerOptions{})
	s := openSession(t, dial)
	client, local := net.Pipe()
	err := s.Forward(callCtx(t), port, local)
	if !errors.Is(err, ErrPortClosed) || !strings.Contains(err.Error(), "port "+strconv.Itoa(int(port))) {
		t.Fatalf("Forward to closed port %d: %v, want ErrPortClosed naming the port", port, err)
	}
	client.SetDeadline(time.Now().Add(waitLimit))
	if _, err := client.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
		t.Fatalf("the conn after a refused forward: %v, want it closed", err)
	}
	if !strings.Contains(streamAll(t, j), fmt.Sprintf("forward to port %d refused", port)) {
		t.Errorf("the journal does not note the refusal:\n%s", streamAll(t, j))
	}

	// The control: a port something listens on, on the same session.
	c2, local2 := net.Pipe()
	defer c2.Close()
	done := forwardAsync(callCtx(t), s, echoPort, local2)
	c2.SetDeadline(time.Now().Add(waitLimit))
	if _, err := c2.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(c2, make([]byte, 1)); err != nil {
		t.Fatalf("a forward after a refused one: %v", err)
	}
	c2.Close()
	if err := waitForward(t, done); err != nil {
		t.Fatalf("Forward: %v", err)
	}
}

// A guest whose connect fails otherwise than refused says why, and it is
// not ErrPortClosed; a forward to anywhere but the guest's loopback is
// refused before any connect.
func TestForwardFailuresOtherThanAClosedPort(t *testing.T) {
	var dialed sync.Map
	dial, _ := sessionServer(t, transports[0], ServerOptions{Dial: func(ctx context.Context, port uint16) (net.Conn, error) {
		dialed.Store(port, true)
		return nil, fmt.Errorf("dial tcp 127.0.0.1:%d: %w", port, syscall.ETIMEDOUT)
	}})
	s := openSession(t, dial)
	_, local := net.Pipe()
	err := s.Forward(callCtx(t), 8080, local)
	if errors.Is(err, ErrPortClosed) || !errors.Is(err, ErrRemote) || !strings.Contains(err.Error(), syscall.ETIMEDOUT.Error()) {
		t.Fatalf("Forward through a dial that timed out: %v, want ErrRemote saying why", err)
	}

	payload := ssh.Marshal(directTCPIPMsg{Host: "example.com", Port: 80, OriginHost: forwardHost})
	_, _, err = s.ssh.OpenChannel(forwardChannelType, payload)
	var oe *ssh.OpenChannelError
	if !errors.As(err, &oe) || oe.Reason != ssh.Prohibited || !strings.Contains(oe.Message, "loopback only") {
		t.Fatalf("a forward to another host: %v, want it prohibited", err)
	}
	if _, ok := dialed.Load(uint16(80)); ok {
		t.Fatal("the guest dialed for a forward to another host")
	}
}

// ctx ending ends the forward, with ctx's error, and closes conn.
func TestForwardEndsWithItsContext(t *testing.T) {
	echoPort := tcpService(t, echo)
	dial, _ := sessionServer(t, transports[1], ServerOptions{})
	s := openSession(t, dial)
	client, local := newLocalPairs(t).pair()
	defer client.Close()
	ctx, cancel := context.WithCancel(callCtx(t))
	done := forwardAsync(ctx, s, echoPort, local)
	if _, err := client.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	client.SetDeadline(time.Now().Add(waitLimit))
	if _, err := io.ReadFull(client, make([]byte, 1)); err != nil {
		t.Fatal(err)
	}
	cancel()
	if err := waitForward(t, done); !errors.Is(err, context.Canceled) {
		t.Fatalf("Forward: %v, want context.Canceled", err)
	}
	if _, err := client.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
		t.Fatalf("the client after a cancel: %v, want the end of the conn", err)
	}
}

// 1000 forwards, ended each way (a clean half-close, a client that hangs
// up, a cancel), leave no goroutine and no file descriptor behind, on
// either side.
func TestForwardsLeakNoGoroutineAndNoFD(t *testing.T) {
	const forwards = 1000
	echoPort := tcpService(t, echo)
	dial, _ := sessionServer(t, transports[1], ServerOptions{})
	s := openSession(t, dial)
	pairs := newLocalPairs(t)
	run := func(n int) {
		for i := range n {
			client, local := pairs.pair()
			client.SetDeadline(time.Now().Add(waitLimit))
			ctx, cancel := context.WithCancel(callCtx(t))
			done := forwardAsync(ctx, s, echoPort, local)
			switch i % 3 {
			case 0:
				if _, err := client.Write([]byte("ping")); err != nil {
					t.Fatal(err)
				}
				_ = client.CloseWrite()
				if b, err := io.ReadAll(client); err != nil || string(b) != "ping" {
					t.Fatalf("forward %d: %q, %v", i, b, err)
				}
				if err := waitForward(t, done); err != nil {
					t.Fatalf("forward %d: %v", i, err)
				}
			case 1:
				client.Close()
				// Either way: it ends.
				_ = waitForward(t, done)
			case 2:
				if _, err := client.Write([]byte("x")); err != nil {
					t.Fatal(err)
				}
				if _, err := io.ReadFull(client, make([]byte, 1)); err != nil {
					t.Fatalf("forward %d: %v", i, err)
				}
				cancel()
				if err := waitForward(t, done); !errors.Is(err, context.Canceled) {
					t.Fatalf("forward %d: %v, want context.Canceled", i, err)
				}
			}
			cancel()
			client.Close()
		}
	}
	run(6)
	settle := func() (int, int) { return goroutinesAndFDs(t) }
	var baseG, baseFD int
	eventually(t, "the warm-up to settle", func() bool {
		g, fd := settle()
		ok := g == baseG && fd == baseFD
		baseG, baseFD = g, fd
		return ok
	})
	run(forwards)
	const tolerance = 2
	var g, fd int
	deadline := time.Now().Add(waitLimit)
	for {
		g, fd = settle()
		if g <= baseG+tolerance && fd <= baseFD+tolerance {
			break
		}
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Fatalf("after %d forwards: %d goroutines (from %d), %d fds (from %d)\n%s", forwards, g, baseG, fd, baseFD, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(10 * time.Millisecond)
	}
	// The control: the session still forwards.
	client, local := pairs.pair()
	defer client.Close()
	done := forwardAsync(callCtx(t), s, echoPort, local)
	client.Write([]byte("ok"))
	client.CloseWrite()
	if b, err := io.ReadAll(client); err != nil || string(b) != "ok" {
		t.Fatalf("a forward after %d: %q, %v", forwards, b, err)
	}
	if err := waitForward(t, done); err != nil {
		t.Fatal(err)
	}
}

// sink counts what it reads until the end of its input, then hangs up.
func sink(counts chan<- int64) func(*net.TCPConn) {
	return func(c *net.TCPConn) {
		n, _ := io.Copy(io.Discard, c)
		counts <- n
	}
}

// 64 MiB go through a forward to a sink, whole, at a sane rate.
func TestForwardCopies64MiBToASink(t *testing.T) {
	const size = 64 << 20
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			counts := make(chan int64, 1)
			port := tcpService(t, sink(counts))
			dial, _ := sessionServer(t, tr, ServerOptions{})
			s := openSession(t, dial)
			client, local := newLocalPairs(t).pair()
			defer client.Close()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			start := time.Now()
			done := forwardAsync(ctx, s, port, local)
			chunk := bytes.Repeat([]byte("0123456789abcdef"), 1<<16)
			for sent := 0; sent < size; sent += len(chunk) {
				if _, err := client.Write(chunk); err != nil {
					t.Fatalf("after %d bytes: %v", sent, err)
				}
			}
			_ = client.CloseWrite()
			// The sink hangs up at the end of its input: so does the forward.
			if _, err := io.Copy(io.Discard, client); err != nil {
				t.Fatal(err)
			}
			if err := <-done; err != nil {
				t.Fatalf("Forward: %v", err)
			}
			elapsed := time.Since(start)
			if n := <-counts; n != size {
				t.Fatalf("the sink read %d bytes, want %d", n, size)
			}
			t.Logf("64 MiB in %v: %.0f MiB/s", elapsed.Round(time.Millisecond), float64(size>>20)/elapsed.Seconds())
		})
	}
}

func BenchmarkForwardToASink(b *testing.B) {
	counts := make(chan int64, 1)
	port := tcpService(b, sink(counts))
	l := newPipeListener()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	srv := NewServer(&stubReporter{report: testReport}, (&logBuffer{}).logger(), ServerOptions{})
	go srv.Serve(ctx, l)
	conn, err := l.Dial()
	if err != nil {
		b.Fatal(err)
	}
	s, err := NewClient(conn).Session(ctx, "admin")
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	pairs := newLocalPairs(b)
	client, local := pairs.pair()
	done := forwardAsync(ctx, s, port, local)
	chunk := make([]byte, 1<<20)
	b.SetBytes(int64(len(chunk)))
	b.ResetTimer()
	for range b.N {
		if _, err := client.Write(chunk); err != nil {
			b.Fatal(err)
		}
	}
	client.CloseWrite()
	io.Copy(io.Discard, client)
	if err := <-done; err != nil {
		b.Fatal(err)
	}
	<-counts
}

func containsAll(s string, subs []string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}
