package kubelet

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	gwebsocket "github.com/gorilla/websocket"
	"k8s.io/apimachinery/pkg/util/proxy"
	apiproxy "k8s.io/apiserver/pkg/util/proxy"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/transport/spdy"
	"k8s.io/client-go/transport/websocket"
	"k8s.io/klog/v2"
	"k8s.io/streaming/pkg/httpstream"
	"k8s.io/streaming/pkg/httpstream/wsstream"

	computev1alpha1 "github.com/boualleiguie/macrack-operator/api/compute/v1alpha1"
)

// Ports of the test VM: echo ports answer each line with "<port>:<line>";
// nothing listens on closedPort.
const (
	echoPortA, echoPortB = 8080, 5432
	closedPort           = 81
)

// echoGuests forward to the test VM's ports, and count the forwarded
// connections still open.
type echoGuests struct {
	*fakeGuests
	active atomic.Int32
	mu     sync.Mutex
	seen   []string
}

func newEchoGuests() *echoGuests {
	g := &echoGuests{fakeGuests: &fakeGuests{}}
	g.fwd = func(ctx context.Context, inst *computev1alpha1.MacOSInstance, port int32, stream io.ReadWriteCloser) error {
		g.mu.Lock()
		g.seen = append(g.seen, fmt.Sprintf("%s:%d", inst.UID, port))
		g.mu.Unlock()
		if port != echoPortA && port != echoPortB {
			return fmt.Errorf("nothing listens on port %d in VM %s/%s", port, inst.Namespace, inst.Name)
		}
		g.active.Add(1)
		defer g.active.Add(-1)
		// The connection ends when the client's side does, or with ctx.
		stop := context.AfterFunc(ctx, func() { _ = stream.Close() })
		defer stop()
		lines := bufio.NewScanner(stream)
		for lines.Scan() {
			if _, err := fmt.Fprintf(stream, "%d:%s\n", port, lines.Text()); err != nil {
				return err
			}
		}
		return nil
	}
	return g
}

func (g *echoGuests) forwarded() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]string(nil), g.seen...)
}

// spdyForward runs client-go's port forwarder, as kubectl port-forward
// does over SPDY (a POST), against path on ts: see forward.
func spdyForward(t *testing.T, ts *testServer, token, path string, clientLog *logLines, remote ...int) (local map[int]int, done <-chan error, stop func(), err error) {
	t.Helper()
	rt, upgrader, err := spdy.RoundTripperFor(ts.restConfig(token))
	if err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(ts.URL + path)
	if err != nil {
		t.Fatal(err)
	}
	return forward(t, spdy.NewDialerForStreaming(upgrader, &http.Client{Transport: rt}, http.MethodPost, u), clientLog, remote...)
}

// forward runs client-go's port forwarder with dialer, listening on local
// ports for the remote ports. It returns once the listeners are ready,
// with their ports, or with the forwarder's error; stop ends it, and done
// yields ForwardPorts' error. The forwarder's own log (where client-go
// reports an error of the server for a connection) goes to clientLog.
func forward(t *testing.T, dialer httpstream.Dialer, clientLog *logLines, remote ...int) (local map[int]int, done <-chan error, stop func(), err error) {
	t.Helper()
	ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), clientLog.logger()))
	t.Cleanup(cancel)
	var ports []string
	for _, p := range remote {
		ports = append(ports, fmt.Sprintf("0:%d", p))
	}
	ready := make(chan struct{})
	pf, err := portforward.NewOnAddressesForStreamingWithContext(ctx, dialer, []string{"127.0.0.1"}, ports, ready, io.Discard, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, 1)
	go func() { errs <- pf.ForwardPorts() }()
	select {
	case <-ready:
	case err := <-errs:
		return nil, nil, cancel, err
	case <-time.After(20 * time.Second):
		t.Fatal("the port forwarder never became ready")
	}
	fp, err := pf.GetPorts()
	if err != nil {
		t.Fatal(err)
	}
	local = map[int]int{}
	for _, p := range fp {
		local[int(p.Remote)] = int(p.Local)
	}
	return local, errs, cancel, nil
}

// dialLocal connects to a forwarder's local port.
func dialLocal(t *testing.T, port int) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	return c
}

// TestPortForwardSPDYRoundTripsTwoPortsAtOnce: kubectl's SPDY forwarder
// carries bytes both ways to two ports of the VM at once, each connection
// reaching the Guests for the resolved instance, and every forwarded
// connection ends when the client goes.
func TestPortForwardSPDYRoundTripsTwoPortsAtOnce(t *testing.T) {
	g := newEchoGuests()
	ts := newTestServer(t, g)
	for _, path := range []string{"/portForward/tenant-a/vm-a", "/portForward/tenant-a/vm-a/uid-a"} {
		t.Run(path, func(t *testing.T) {
			local, done, stop, err := spdyForward(t, ts, adminToken, path, &logLines{}, echoPortA, echoPortB)
			if err != nil {
				t.Fatal(err)
			}
			roundTripTwoPorts(t, local)
			stop()
			if err := <-done; err != nil {
				t.Fatalf("ForwardPorts: %v", err)
			}
		})
	}
	waitFor(t, "every forwarded connection to end", func() bool { return g.active.Load() == 0 })
	for _, f := range g.forwarded() {
		if !strings.HasPrefix(f, string(uidA)+":") {
			t.Fatalf("the Guests forwarded %s, want only vm-a's ports", f)
		}
	}
	if n := len(g.forwarded()); n != 8 {
		t.Fatalf("the Guests forwarded %d connections, want 8", n)
	}
}

// roundTripTwoPorts talks to the echo ports through a forwarder's local
// ports: two connections to each, all at once, three lines each.
func roundTripTwoPorts(t *testing.T, local map[int]int) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for i, port := range []int{echoPortA, echoPortB, echoPortA, echoPortB} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := dialLocal(t, local[port])
			r := bufio.NewReader(c)
			for n := range 3 {
				msg := fmt.Sprintf("conn%d-msg%d", i, n)
				if _, err := fmt.Fprintf(c, "%s\n", msg); err != nil {
					errs <- err
					return
				}
				got, err := r.ReadString('\n')
				if want := fmt.Sprintf("%d:%s\n", port, msg); err != nil || got != want {
					errs <- fmt.Errorf("port %d: read %q, %v; want %q", port, got, err, want)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// TestPortForwardThroughTheAPIServersWebSocketTunnel: kubectl's default
// transport, SPDY tunnelled in a WebSocket (client-go's
// NewSPDYOverWebsocketDialer; its ForStreaming form here), ends at the
// API server, which forwards SPDY to the kubelet; a kubelet never sees
// the tunnel. The API server's own tunnel and proxy (k8s.io/apiserver's
// TunnelingHandler over k8s.io/apimachinery's UpgradeAwareHandler) stand
// in front of the handler here, and the bytes round-trip on two ports at
// once.
func TestPortForwardThroughTheAPIServersWebSocketTunnel(t *testing.T) {
	g := newEchoGuests()
	ts := newTestServer(t, g)
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		loc, err := url.Parse(ts.URL + r.URL.Path)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		loc.RawQuery = r.URL.RawQuery
		upstream := proxy.NewUpgradeAwareHandler(loc, ts.Client().Transport, false, true, proxyResponder{})
		if !wsstream.IsWebSocketRequestWithTunnelingProtocol(r) {
			http.Error(w, "the test's API server takes WebSocket tunnels only", http.StatusBadRequest)
			return
		}
		apiproxy.NewTunnelingHandler(upstream).ServeHTTP(w, r)
	}))
	t.Cleanup(front.Close)
	u, err := url.Parse(front.URL + "/portForward/tenant-a/vm-a")
	if err != nil {
		t.Fatal(err)
	}
	dialer, err := portforward.NewSPDYOverWebsocketDialerForStreaming(u, &rest.Config{Host: front.URL, BearerToken: adminToken})
	if err != nil {
		t.Fatal(err)
	}
	local, done, stop, err := forward(t, dialer, &logLines{}, echoPortA, echoPortB)
	if err != nil {
		t.Fatal(err)
	}
	roundTripTwoPorts(t, local)
	stop()
	if err := <-done; err != nil {
		t.Fatalf("ForwardPorts: %v", err)
	}
	waitFor(t, "every forwarded connection to end", func() bool { return g.active.Load() == 0 })
	if n := len(g.forwarded()); n != 4 {
		t.Fatalf("the Guests forwarded %d connections, want 4", n)
	}
}

// proxyResponder answers a proxy's own failure.
type proxyResponder struct{}

func (proxyResponder) Error(w http.ResponseWriter, _ *http.Request, err error) {
	http.Error(w, err.Error(), http.StatusBadGateway)
}

// TestPortForwardSPDYClosedPortFailsCleanly: a port nothing listens on in
// the VM reaches kubectl as that port's error, saying so, and its
// connection ends rather than hangs; kubectl then gives up the forward,
// as it does with a kubelet.
func TestPortForwardSPDYClosedPortFailsCleanly(t *testing.T) {
	g := newEchoGuests()
	ts := newTestServer(t, g)
	clientLog := &logLines{}
	local, done, _, err := spdyForward(t, ts, adminToken, "/portForward/tenant-a/vm-a", clientLog, closedPort, echoPortA)
	if err != nil {
		t.Fatal(err)
	}
	c := dialLocal(t, local[closedPort])
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Write([]byte("anyone?\n")); err != nil {
		t.Logf("write: %v", err)
	}
	b, err := io.ReadAll(c)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatal("the connection to the closed port hangs")
	}
	if len(b) != 0 {
		t.Fatalf("read %q from a closed port", b)
	}
	select {
	case err := <-done:
		if !errors.Is(err, portforward.ErrLostConnectionToPod) {
			t.Fatalf("ForwardPorts: %v, want %v", err, portforward.ErrLostConnectionToPod)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("the forwarder did not end after the port's error; client log:\n%s", clientLog)
	}
	want := fmt.Sprintf("error forwarding port %d to pod vm-a, uid %s: nothing listens on port %d in VM tenant-a/vm-a", closedPort, uidA, closedPort)
	waitFor(t, "kubectl to report the port's error", func() bool { return strings.Contains(clientLog.String(), want) })
	if !strings.Contains(ts.log.String(), `"msg"="Forwarding a connection failed"`) {
		t.Errorf("the server did not log the failure:\n%s", ts.log)
	}
}

// wsForward opens a port-forward over WebSockets (v4.channel.k8s.io, a
// GET with the ports in the query) with client-go's WebSocket transport.
func wsForward(t *testing.T, ts *testServer, token, path string) (*gwebsocket.Conn, error) {
	t.Helper()
	rt, holder, err := websocket.RoundTripperFor(ts.restConfig(token))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, ts.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := websocket.Negotiate(rt, holder, req, "v4.channel.k8s.io")
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() { _ = conn.Close() })
	_ = conn.SetReadDeadline(time.Now().Add(20 * time.Second))
	return conn, nil
}

// wsChannels reads a v4 port-forward connection: each port's data and
// error channels open with the port, little-endian, then carry bytes.
type wsChannels struct {
	t      *testing.T
	conn   *gwebsocket.Conn
	opened map[byte]bool
	data   map[byte]string
}

func newWSChannels(t *testing.T, conn *gwebsocket.Conn) *wsChannels {
	return &wsChannels{t: t, conn: conn, opened: map[byte]bool{}, data: map[byte]string{}}
}

// next reads one message; false when the connection ended.
func (w *wsChannels) next() bool {
	w.t.Helper()
	_, msg, err := w.conn.ReadMessage()
	if err != nil {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			w.t.Fatal("the WebSocket port-forward hangs")
		}
		return false
	}
	if len(msg) == 0 {
		w.t.Fatal("a message without a channel")
	}
	ch, payload := msg[0], msg[1:]
	if !w.opened[ch] {
		w.opened[ch] = true
		if len(payload) != 2 {
			w.t.Fatalf("channel %d opened with %q, want its port", ch, payload)
		}
		w.data[ch+100] = fmt.Sprint(binary.LittleEndian.Uint16(payload))
		return true
	}
	w.data[ch] += string(payload)
	return true
}

// port is the port channel ch opened with.
func (w *wsChannels) port(ch byte) string { return w.data[ch+100] }

// until reads until channel ch holds want.
func (w *wsChannels) until(ch byte, want string) {
	w.t.Helper()
	for !strings.Contains(w.data[ch], want) {
		if !w.next() {
			w.t.Fatalf("channel %d ended with %q, want %q", ch, w.data[ch], want)
		}
	}
}

func (w *wsChannels) send(ch byte, s string) {
	w.t.Helper()
	if err := w.conn.WriteMessage(gwebsocket.BinaryMessage, append([]byte{ch}, s...)); err != nil {
		w.t.Fatal(err)
	}
}

// TestPortForwardWebSocketRoundTripsTwoPortsAtOnce: the kubelet's WebSocket
// port-forward carries bytes both ways to two ports at once, the data and
// error channels of each opening with its port.
func TestPortForwardWebSocketRoundTripsTwoPortsAtOnce(t *testing.T) {
	g := newEchoGuests()
	ts := newTestServer(t, g)
	conn, err := wsForward(t, ts, adminToken, fmt.Sprintf("/portForward/tenant-a/vm-a?port=%d&port=%d", echoPortA, echoPortB))
	if err != nil {
		t.Fatal(err)
	}
	w := newWSChannels(t, conn)
	// Channels 0 and 1 are the first port's data and error, 2 and 3 the second's.
	for n := range 3 {
		w.send(0, fmt.Sprintf("a%d\n", n))
		w.send(2, fmt.Sprintf("b%d\n", n))
	}
	w.until(0, "8080:a0\n8080:a1\n8080:a2\n")
	w.until(2, "5432:b0\n5432:b1\n5432:b2\n")
	for ch, want := range map[byte]string{0: "8080", 1: "8080", 2: "5432", 3: "5432"} {
		if got := w.port(ch); got != want {
			t.Errorf("channel %d opened with port %s, want %s", ch, got, want)
		}
	}
	if w.data[1] != "" || w.data[3] != "" {
		t.Fatalf("errors: %q %q", w.data[1], w.data[3])
	}
	_ = conn.Close()
	waitFor(t, "every forwarded connection to end", func() bool { return g.active.Load() == 0 })
}

// TestPortForwardWebSocketClosedPortFailsCleanly: over WebSockets, a closed
// port's error arrives on its error channel, saying so, and the
// connection ends once no port is left open.
func TestPortForwardWebSocketClosedPortFailsCleanly(t *testing.T) {
	ts := newTestServer(t, newEchoGuests())
	conn, err := wsForward(t, ts, adminToken, fmt.Sprintf("/portForward/tenant-a/vm-a?port=%d", closedPort))
	if err != nil {
		t.Fatal(err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	w := newWSChannels(t, conn)
	for w.next() {
	}
	want := fmt.Sprintf("error forwarding port %d to pod vm-a, uid %s: nothing listens on port %d in VM tenant-a/vm-a", closedPort, uidA, closedPort)
	if w.data[1] != want {
		t.Fatalf("error channel %q, want %q", w.data[1], want)
	}
}

// TestPortForwardRefused: the server's refusals reach client-go's SPDY
// forwarder and its WebSocket transport with their message, and no request
// reaches the Guests: a get-only identity (a SPDY POST, and a WebSocket
// GET: both need create), no credentials, a forged pod, a wrong UID, a
// stopped VM, and a WebSocket forward without a valid port.
func TestPortForwardRefused(t *testing.T) {
	g := newEchoGuests()
	ts := newTestServer(t, g)
	const port = "?port=8080"
	cases := []struct {
		name, token, path, msg string
		spdy                   bool
	}{
		{"get-only identity", getterToken, "/portForward/tenant-a/vm-a", "Forbidden (user=getter, verb=create, resource=nodes, subresource=proxy)", true},
		{"no credentials", "", "/portForward/tenant-a/vm-a", "Unauthorized", true},
		{"forged pod", adminToken, "/portForward/tenant-a/vm-forged", "no MacRack VM tenant-a/vm-forged on node mini1", true},
		{"wrong uid", adminToken, "/portForward/tenant-a/vm-a/uid-x", "no MacRack VM tenant-a/vm-a with uid uid-x on node mini1", true},
		{"stopped VM", adminToken, "/portForward/tenant-a/vm-s", "instance tenant-a/vm-s is Stopped: port-forward needs a running VM", true},
		{"no port", adminToken, "/portForward/tenant-a/vm-a", `port-forward: query parameter "port" is required`, false},
		{"port 0", adminToken, "/portForward/tenant-a/vm-a?port=0", `port-forward: port "0" must be > 0`, false},
		{"port 65536", adminToken, "/portForward/tenant-a/vm-a?port=65536", `port-forward: unable to parse "65536" as a port`, false},
	}
	for _, c := range cases {
		if c.spdy {
			t.Run(c.name+"/SPDY", func(t *testing.T) {
				_, _, _, err := spdyForward(t, ts, c.token, c.path, &logLines{}, echoPortA)
				if err == nil || !strings.Contains(err.Error(), c.msg) {
					t.Fatalf("got %v; want %q", err, c.msg)
				}
				t.Logf("%s", err)
			})
		}
		t.Run(c.name+"/WebSocket", func(t *testing.T) {
			path := c.path
			if c.spdy {
				path += port
			}
			_, err := wsForward(t, ts, c.token, path)
			if err == nil || !strings.Contains(err.Error(), c.msg) {
				t.Fatalf("got %v; want %q", err, c.msg)
			}
			t.Logf("%s", err)
		})
	}
	if n := g.called(); n != 0 {
		t.Fatalf("the Guests were called %d times", n)
	}
	// The control: the admin's forward over both transports reaches the VM.
	local, done, stop, err := spdyForward(t, ts, adminToken, "/portForward/tenant-a/vm-a", &logLines{}, echoPortA)
	if err != nil {
		t.Fatal(err)
	}
	c := dialLocal(t, local[echoPortA])
	if _, err := fmt.Fprintln(c, "ping"); err != nil {
		t.Fatal(err)
	}
	if got, err := bufio.NewReader(c).ReadString('\n'); err != nil || got != "8080:ping\n" {
		t.Fatalf("SPDY control: %q, %v", got, err)
	}
	stop()
	<-done
	conn, err := wsForward(t, ts, adminToken, "/portForward/tenant-a/vm-a"+port)
	if err != nil {
		t.Fatal(err)
	}
	w := newWSChannels(t, conn)
	w.send(0, "ping\n")
	w.until(0, "8080:ping\n")
	if n := g.called(); n != 2 {
		t.Fatalf("the Guests were called %d times, want 2", n)
	}
}

// TestForwarderRefusesAPortOutsideTCP: whatever the streaming server
// hands on, a port outside 1..65535 never reaches the Guests.
func TestForwarderRefusesAPortOutsideTCP(t *testing.T) {
	g := newEchoGuests()
	f := forwarder{ctx: context.Background(), guests: g, inst: instance(vmA, uidA, node, computev1alpha1.VMRunning)}
	for _, port := range []int32{0, -1, 65536} {
		err := f.PortForward(context.Background(), vmA, string(uidA), port, nil)
		if want := fmt.Sprintf("port %d is not a TCP port: it must be within 1..65535", port); err == nil || err.Error() != want {
			t.Errorf("port %d: %v, want %q", port, err, want)
		}
	}
	if n := g.called(); n != 0 {
		t.Fatalf("the Guests were called %d times", n)
	}
}

// TestAForwardedConnectionEndsWithItsRequest: the streaming server calls
// PortForward with a background context; the forwarder's ends with the
// request's.
func TestAForwardedConnectionEndsWithItsRequest(t *testing.T) {
	ended := make(chan error, 1)
	g := &fakeGuests{fwd: func(ctx context.Context, _ *computev1alpha1.MacOSInstance, _ int32, _ io.ReadWriteCloser) error {
		<-ctx.Done()
		ended <- ctx.Err()
		return nil
	}}
	reqCtx, cancel := context.WithCancel(context.Background())
	f := forwarder{ctx: reqCtx, guests: g, inst: instance(vmA, uidA, node, computev1alpha1.VMRunning)}
	go func() { _ = f.PortForward(context.Background(), vmA, string(uidA), echoPortA, nil) }()
	cancel()
	select {
	case err := <-ended:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("ended with %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the forwarded connection outlived its request")
	}
}

// waitFor polls cond for up to 10s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("timed out waiting for %s", what)
}
