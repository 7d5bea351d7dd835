package kubelet

import (
	"context"
	"crypto/tls"
	"net"
	"sync/atomic"
	"testing"
	"time"
)

// TestCertificatesHookServesItsCertificateAndFallsBack: with the hook
// set, a handshake without SNI (the API server dials an IP) gets the
// hook's certificate; while the hook has none, the self-signed one.
func TestCertificatesHookServesItsCertificateAndFallsBack(t *testing.T) {
	signed, err := selfSigned("127.0.0.1", "signed-by-the-cluster", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	var current atomic.Pointer[tls.Certificate]
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &Server{
		NodeName: node, Addr: ln.Addr().String(), Authenticator: fakeAuthn{}, Authorizer: &fakeAuthz{},
		Resolver: CacheResolver{Reader: serverWorld().reader(t), NodeName: node}, Guests: &fakeGuests{},
		Log:          (&logLines{}).logger(),
		Certificates: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return current.Load(), nil },
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	served := func() string {
		t.Helper()
		var conn *tls.Conn
		var err error
		for range 50 {
			if conn, err = tls.Dial("tcp", ln.Addr().String(), &tls.Config{InsecureSkipVerify: true}); err == nil {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = conn.Close() }()
		if sni := conn.ConnectionState().ServerName; sni != "" {
			t.Fatalf("the client sent SNI %q to an IP", sni)
		}
		return conn.ConnectionState().PeerCertificates[0].Subject.CommonName
	}
	if cn := served(); cn == "" || cn[:len(node)] != node {
		t.Fatalf("without the hook's certificate, want the self-signed one for %s, got %q", node, cn)
	}
	current.Store(&signed)
	if cn := served(); cn[:len("signed-by-the-cluster")] != "signed-by-the-cluster" {
		t.Fatalf("want the hook's certificate, got %q", cn)
	}
}
