package helper

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"time"

	"github.com/go-logr/logr"

	"github.com/boualleiguie/macrack-operator/internal/agent/driver"
	"github.com/boualleiguie/macrack-operator/internal/agent/vmspec"
)

// maxSocketPath is what sockaddr_un holds with its terminating NUL on
// darwin (104), the smaller of the two platforms.
const maxSocketPath = 103

// Server serves one VM over the helper protocol. The VM is built from the
// spec given at construction: a helper is the process of one instance, and
// a start request must carry the same spec.
type Server struct {
	vm   driver.VM
	spec vmspec.VMSpec
	log  logr.Logger
	pid  int

	mu    sync.Mutex
	conns map[net.Conn]struct{}
}

// ServerOption configures a Server.
type ServerOption func(*Server)

// WithServerLogger sets the server's logger.
func WithServerLogger(l logr.Logger) ServerOption { return func(s *Server) { s.log = l } }

// NewServer builds the VM of spec with d.
func NewServer(d driver.Driver, spec vmspec.VMSpec, opts ...ServerOption) (*Server, error) {
	vm, err := d.NewVM(spec)
	if err != nil {
		return nil, fmt.Errorf("building VM %s: %w", spec.Name, err)
	}
	s := &Server{vm: vm, spec: spec, log: logr.Discard(), pid: os.Getpid(), conns: map[net.Conn]struct{}{}}
	for _, opt := range opts {
		opt(s)
	}
	s.log = s.log.WithValues("vm", spec.Name)
	return s, nil
}

// VM is the served VM.
func (s *Server) VM() driver.VM { return s.vm }

// Listen listens on the Unix socket at path, replacing a stale socket file
// that nobody serves, and refusing one a live helper still serves.
func Listen(path string) (net.Listener, error) {
	if len(path) > maxSocketPath {
		return nil, fmt.Errorf("%w: %q is %d bytes, the limit is %d", ErrSocketPathTooLong, path, len(path), maxSocketPath)
	}
	if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
		c.Close()
		return nil, fmt.Errorf("%w: %s", ErrSocketInUse, path)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("removing stale socket %s: %w", path, err)
	}
	l, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("listening on %s: %w", path, err)
	}
	// Only the agent (same user) may drive the VM.
	if err := os.Chmod(path, 0o600); err != nil {
		l.Close()
		return nil, fmt.Errorf("restricting %s: %w", path, err)
	}
	return l, nil
}

// ListenAndServe listens on socketPath and serves until ctx ends.
func (s *Server) ListenAndServe(ctx context.Context, socketPath string) error {
	l, err := Listen(socketPath)
	if err != nil {
		return err
	}
	return s.Serve(ctx, l)
}

// Serve serves connections on l until ctx ends, then closes l and every
// connection, guest streams included; a Server serves once. It leaves the
// VM as it is: whoever runs the server decides whether the VM stops with
// it. ctx is also the context of the VM's starts and stops, so that they
// outlive the agent's connection.
func (s *Server) Serve(ctx context.Context, l net.Listener) error {
	var wg sync.WaitGroup
	stop := context.AfterFunc(ctx, func() {
		l.Close()
		s.mu.Lock()
		for c := range s.conns {
			c.Close()
		}
		s.conns = nil
		s.mu.Unlock()
	})
	defer stop()
	s.log.Info("Serving", "socket", l.Addr().String())
	backoff := 5 * time.Millisecond
	for {
		conn, err := l.Accept()
		if err != nil {
			if ctx.Err() == nil && !errors.Is(err, net.ErrClosed) {
				// Out of descriptors, say: the VM must not die of it.
				s.log.Error(err, "Accept failed; retrying", "backoff", backoff.String())
				select {
				case <-time.After(backoff):
				case <-ctx.Done():
				}
				backoff = min(2*backoff, time.Second)
				continue
			}
			wg.Wait()
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("accepting: %w", err)
		}
		backoff = 5 * time.Millisecond
		if !s.track(conn) {
			conn.Close()
			continue
		}
		wg.Go(func() {
			defer s.untrack(conn)
			s.handle(ctx, conn)
		})
	}
}

// track registers conn for closing at shutdown; false once shut down.
func (s *Server) track(c net.Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.conns == nil {
		return false
	}
	s.conns[c] = struct{}{}
	return true
}

func (s *Server) untrack(c net.Conn) {
	c.Close()
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
}

// handle serves one connection's requests in order.
func (s *Server) handle(ctx context.Context, conn net.Conn) {
	r := bufio.NewReader(conn)
	for {
		line, err := readLine(r)
		if err != nil {
			if errors.Is(err, ErrBadRequest) {
				s.refuse(conn, err)
			}
			return
		}
		var req request
		if err := json.Unmarshal(line, &req); err != nil {
			s.refuse(conn, fmt.Errorf("%w: %w", ErrBadRequest, err))
			return
		}
		if req.V != Version {
			s.refuse(conn, fmt.Errorf("%w: the client speaks %d, this helper %d", ErrUnsupportedVersion, req.V, Version))
			return
		}
		if req.Op == opDialGuest {
			guest, err := s.vm.DialGuest(ctx, req.Port)
			if err != nil {
				if s.respond(conn, answer{}, err) != nil {
					return
				}
				continue
			}
			if s.respond(conn, answer{}, nil) != nil {
				guest.Close()
				return
			}
			s.log.V(1).Info("Guest stream opened", "port", req.Port)
			proxy(&bufferedConn{Conn: conn, r: r}, guest)
			return
		}
		out, err := s.do(ctx, req)
		if s.respond(conn, out, err) != nil {
			return
		}
	}
}

// answer is what a request's response carries besides the VM's state.
type answer struct {
	hello *Hello
	stop  driver.StopMethod
}

func (s *Server) do(ctx context.Context, req request) (answer, error) {
	switch req.Op {
	case opHello:
		return answer{hello: &Hello{InstanceUID: s.spec.UID, VMName: s.spec.Name, PID: s.pid}}, nil
	case opState:
		return answer{}, nil
	case opStart:
		if req.Spec == nil || !sameSpec(*req.Spec, s.spec) {
			return answer{}, fmt.Errorf("%w: this helper runs %s (%s)", ErrSpecMismatch, s.spec.Name, s.spec.UID)
		}
		s.log.Info("Starting VM")
		if err := s.vm.Start(ctx); err != nil {
			s.log.Error(err, "VM start failed", "limitExceeded", driver.IsLimitExceeded(err))
			return answer{}, err
		}
		s.log.Info("VM running")
		return answer{}, nil
	case opStop:
		graceful := time.Duration(req.GracefulMillis) * time.Millisecond
		s.log.Info("Stopping VM", "graceful", graceful.String())
		before, began := s.vm.State(), time.Now()
		if err := s.vm.Stop(ctx, graceful); err != nil {
			return answer{}, err
		}
		method := stopMethod(s.vm, before, graceful, time.Since(began))
		s.log.Info("VM stopped", "stop", method)
		return answer{stop: method}, nil
	default:
		return answer{}, fmt.Errorf("%w: unknown op %q", ErrBadRequest, req.Op)
	}
}

// stopMethod is how vm went down in a Stop that began in state before,
// with graceful, and took took. A VM that keeps its own record
// (driver.StopReporter) is believed. Any other is judged by the clock: its
// Stop forces the VM off only once graceful has passed, so one that came
// back sooner was honoured, unless there was no grace to honour.
func stopMethod(vm driver.VM, before driver.State, graceful, took time.Duration) driver.StopMethod {
	if st := vm.State(); st != driver.StateStopped && st != driver.StateError {
		return ""
	}
	if r, ok := vm.(driver.StopReporter); ok {
		return r.LastStopMethod()
	}
	switch {
	case before == driver.StateStopped || before == driver.StateError:
		return ""
	case graceful > 0 && took < graceful && before == driver.StateRunning:
		return driver.StopRequestStop
	}
	return driver.StopForced
}

// respond answers a request with the VM's state, what it carries, and
// err, if any.
func (s *Server) respond(conn net.Conn, out answer, err error) error {
	resp := response{V: Version, OK: err == nil, State: s.vm.State(), Hello: out.hello, Stop: out.stop}
	if err != nil {
		resp.Error = toWire(err)
	}
	return writeLine(conn, resp)
}

// refuse answers a request the connection cannot go on after.
func (s *Server) refuse(conn net.Conn, err error) {
	s.log.Info("Request refused", "reason", err.Error())
	_ = writeLine(conn, response{V: Version, OK: false, State: s.vm.State(), Error: toWire(err)})
}

// sameSpec compares specs by their wire form, which is what crossed the socket.
func sameSpec(a, b vmspec.VMSpec) bool {
	ja, errA := json.Marshal(a)
	jb, errB := json.Marshal(b)
	return errA == nil && errB == nil && bytes.Equal(ja, jb)
}

// proxyBufferSize is each way's copy buffer in proxy: a read takes all
// that the socket holds, up to this, so that a fast stream crosses in few
// large writes rather than 32 KiB ones (io.Copy's).
const proxyBufferSize = 256 << 10

// proxy copies bytes both ways until either side ends, then closes both:
// a vsock stream has no half-close to pass on.
func proxy(a, b net.Conn) {
	done := make(chan struct{}, 2)
	cp := func(dst, src net.Conn) {
		buf := make([]byte, proxyBufferSize)
		// Neither side's ReadFrom or WriteTo: a Unix socket's copies
		// through 32 KiB.
		_, _ = io.CopyBuffer(struct{ io.Writer }{dst}, struct{ io.Reader }{src}, buf)
		done <- struct{}{}
	}
	go cp(a, b)
	go cp(b, a)
	<-done
	a.Close()
	b.Close()
	<-done
}
