// Package kubelet is the host agent's kubelet API: what the API server
// calls on a Node's kubelet for kubectl exec, kubectl logs and kubectl
// port-forward, served for the chassis' MacOSInstances, whose Pods name
// this Node.
//
// It is a kubelet's API, as a kubelet serves it: TLS, x509 client
// certificates and bearer tokens (TokenReview), every request authorized
// by SubjectAccessReview on nodes/<subresource>, the kubelet's paths and
// query parameters, exec and port-forward over SPDY and WebSockets (the
// streaming protocols of k8s.io/cri-streaming, and v5.channel.k8s.io for
// exec). It differs
// from a kubelet where a kubelet is unsafe or has nothing to serve:
//
//   - /exec, /attach, /portForward and /run need create, whatever the
//     method: a WebSocket exec arrives as a GET, and must not pass as get.
//   - A request names a Pod, and no Pod is trusted: a Resolver finds the
//     MacOSInstance from MacRack's objects, and only one placed on this
//     node, holding one of its slots, reaches a VM.
//   - attach is refused with the reason (a VM has no attachable console
//     process); previous logs too (a VM keeps one log).
package kubelet

import (
	"cmp"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	stdlog "log"
	"math/big"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/server/dynamiccertificates"
	"k8s.io/client-go/kubernetes"
)

const (
	// shutdownGrace bounds Run's graceful shutdown. Exec sessions and
	// followed logs end with Run's context.
	shutdownGrace = 5 * time.Second
	// selfSignedValidity is the in-memory serving certificate's lifetime.
	selfSignedValidity = 365 * 24 * time.Hour
)

// Server is the host agent's kubelet API for one node.
type Server struct {
	// NodeName is this chassis' Node: the name in every authorization.
	NodeName string
	// Addr is host:port to listen on.
	Addr string
	// ClientCAFile is the CA bundle that client certificates must chain
	// to, as the kubelet's --client-ca-file. Reloaded while Run runs.
	ClientCAFile string
	// TLSCertFile and TLSKeyFile are the serving certificate and key.
	// Empty: a self-signed certificate for Addr's host (NodeName when Addr
	// has none) is generated in memory when Run starts.
	TLSCertFile, TLSKeyFile string
	// Certificates, if set, gives each handshake its serving certificate
	// (the one the cluster signed, servingcert.Requester); when it gives
	// none, TLSCertFile's or the self-signed one serves.
	Certificates func(*tls.ClientHelloInfo) (*tls.Certificate, error)
	// Reviews creates the TokenReviews and SubjectAccessReviews.
	Reviews kubernetes.Interface
	// Authenticator and Authorizer, when set, replace the delegating ones
	// built from ClientCAFile and Reviews (tests set them).
	Authenticator authenticator.Request
	Authorizer    authorizer.UnconditionalAuthorizer
	// Resolver finds a request's instance; Guests reaches its VM.
	Resolver Resolver
	Guests   Guests
	Log      logr.Logger
	// StreamIdleTimeout ends an exec or port-forward session idle that
	// long (4h if zero); StreamCreationTimeout bounds a client's opening of
	// its streams (30s if zero).
	StreamIdleTimeout, StreamCreationTimeout time.Duration
}

// Handler is the kubelet API, authentication and authorization included,
// without TLS: the client CA bundle is read once.
func (s *Server) Handler() (http.Handler, error) {
	h, _, err := s.handler()
	return h, err
}

func (s *Server) handler() (http.Handler, *dynamiccertificates.DynamicFileCAContent, error) {
	switch {
	case s.NodeName == "":
		return nil, nil, errors.New("kubelet API: no NodeName")
	case s.Resolver == nil:
		return nil, nil, errors.New("kubelet API: no Resolver")
	case s.Guests == nil:
		return nil, nil, errors.New("kubelet API: no Guests")
	}
	authn, authz, ca, err := s.delegatingAuth()
	if err != nil {
		return nil, nil, err
	}
	return s.withAuth(authn, authz, s.routes()), ca, nil
}

// Run listens on Addr and serves the kubelet API over TLS until ctx ends,
// then shuts down: requests in flight, exec sessions and followed logs
// included, end with ctx.
func (s *Server) Run(ctx context.Context) error {
	ln, err := net.Listen("tcp", s.Addr)
	if err != nil {
		return fmt.Errorf("kubelet API: %w", err)
	}
	return s.serve(ctx, ln)
}

func (s *Server) serve(ctx context.Context, ln net.Listener) error {
	defer func() { _ = ln.Close() }()
	h, ca, err := s.handler()
	if err != nil {
		return err
	}
	cert, err := s.servingCertificate()
	if err != nil {
		return err
	}
	if ca != nil {
		// A rotated client CA bundle is taken up without a restart.
		go ca.Run(ctx, 1)
	}
	base := &tls.Config{
		MinVersion:   tls.VersionTLS12,
		Certificates: []tls.Certificate{cert},
		// Requested, not required: a bearer token is a credential too.
		// The x509 authenticator verifies the chain, not the handshake.
		ClientAuth: tls.RequestClientCert,
		// SPDY and WebSocket upgrades are HTTP/1.1's.
		NextProtos: []string{"http/1.1"},
	}
	if hook := s.Certificates; hook != nil {
		// tls consults GetCertificate beside Certificates only for a
		// client that sends SNI, and none does for an IP: the hook
		// takes the fallback over.
		base.Certificates = nil
		base.GetCertificate = func(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
			if c, err := hook(hello); c != nil || err != nil {
				return c, err
			}
			return &cert, nil
		}
	}
	cfg := base
	if ca != nil {
		cfg = base.Clone()
		// Name the client CAs, so that a client holding several
		// certificates offers the right one.
		cfg.GetConfigForClient = func(*tls.ClientHelloInfo) (*tls.Config, error) {
			c := base.Clone()
			if o, ok := ca.VerifyOptions(); ok {
				c.ClientCAs = o.Roots
			}
			return c, nil
		}
	}
	srv := &http.Server{
		Handler:           h,
		TLSConfig:         cfg,
		TLSNextProto:      map[string]func(*http.Server, *tls.Conn, http.Handler){},
		ReadHeaderTimeout: 30 * time.Second,
		BaseContext:       func(net.Listener) context.Context { return ctx },
		ErrorLog:          stdlog.New(logWriter{s.Log.V(1)}, "", 0),
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(tls.NewListener(ln, cfg)) }()
	s.Log.Info("Serving the kubelet API", "address", ln.Addr().String(), "node", s.NodeName)
	select {
	case err := <-done:
		return fmt.Errorf("kubelet API: %w", err)
	case <-ctx.Done():
	}
	shutdown, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownGrace)
	defer cancel()
	if err := srv.Shutdown(shutdown); err != nil {
		_ = srv.Close()
	}
	<-done
	return nil
}

// servingCertificate is TLSCertFile's, or a self-signed one for the
// listen host.
func (s *Server) servingCertificate() (tls.Certificate, error) {
	if s.TLSCertFile != "" || s.TLSKeyFile != "" {
		cert, err := tls.LoadX509KeyPair(s.TLSCertFile, s.TLSKeyFile)
		if err != nil {
			return tls.Certificate{}, fmt.Errorf("kubelet API: loading the serving certificate: %w", err)
		}
		return cert, nil
	}
	host, _, err := net.SplitHostPort(s.Addr)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("kubelet API: address %q: %w", s.Addr, err)
	}
	return selfSigned(host, s.NodeName, time.Now())
}

// selfSigned makes a serving certificate for host (an IP or a name), and
// for node, valid from now.
func selfSigned(host, node string, now time.Time) (tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return tls.Certificate{}, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: cmp.Or(node, host) + "@" + fmt.Sprint(now.Unix())},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(selfSignedValidity),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	if ip := net.ParseIP(host); ip != nil && !ip.IsUnspecified() {
		tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
	} else if host != "" && ip == nil {
		tmpl.DNSNames = append(tmpl.DNSNames, host)
	}
	if node != "" && node != host {
		tmpl.DNSNames = append(tmpl.DNSNames, node)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, err
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return tls.Certificate{}, err
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, nil
}

// logWriter takes the HTTP server's own messages (TLS handshake errors)
// into the agent's log.
type logWriter struct{ log logr.Logger }

func (w logWriter) Write(p []byte) (int, error) {
	w.log.Info("Kubelet API server", "message", strings.TrimSpace(string(p)))
	return len(p), nil
}
