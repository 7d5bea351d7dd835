package custom

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
)

// socketName is the socket's name in its directory. Paths of Unix
// sockets are short (104 bytes on macOS), so it is too.
const socketName = "s"

// maxSocketPath is sun_path's size on macOS, the smaller of the two.
const maxSocketPath = 103

// probeTimeout bounds the prepare stage's check of the VM.
const probeTimeout = 30 * time.Second

// stageRe is what a gitlab-runner stage name looks like.
var stageRe = regexp.MustCompile(`^[a-z0-9_]{1,64}$`)

// errPeerUnknown means the system cannot say who the peer is.
var errPeerUnknown = errors.New("peer credentials unsupported")

// ServerOptions configure a StageServer.
type ServerOptions struct {
	// Dir is where the server creates its own 0700 directory for the
	// socket; os.TempDir() if empty.
	Dir string
	// Log logs requests, never scripts or their output.
	Log logr.Logger

	// peerUID replaces the system's answer, for tests.
	peerUID func(*net.UnixConn) (int, error)
}

// StageServer serves one job's stages on a Unix socket, in a 0700
// directory it creates, to processes of this uid only. Close it after
// gitlab-runner exits.
type StageServer struct {
	runner ScriptRunner
	log    logr.Logger
	dir    string
	socket string
	srv    *http.Server
	lis    net.Listener

	// slot lets one request at a time reach the VM.
	slot   chan struct{}
	ctx    context.Context
	cancel context.CancelFunc
	served chan struct{}
	closed sync.Once
	err    error
}

// NewStageServer creates the socket and serves runner on it until Close.
func NewStageServer(runner ScriptRunner, opts ServerOptions) (*StageServer, error) {
	if runner == nil {
		return nil, fmt.Errorf("%w: no ScriptRunner", ErrInvalidOptions)
	}
	parent := opts.Dir
	if parent == "" {
		parent = os.TempDir()
	}
	// MkdirTemp creates the directory 0700: only this uid reaches the
	// socket, whatever the umask.
	dir, err := os.MkdirTemp(parent, "mrs")
	if err != nil {
		return nil, fmt.Errorf("creating the stage socket's directory: %w", err)
	}
	socket := filepath.Join(dir, socketName)
	if len(socket) > maxSocketPath {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("%w: stage socket path %q is longer than %d bytes", ErrInvalidOptions, socket, maxSocketPath)
	}
	lis, err := net.Listen("unix", socket)
	if err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("listening on the stage socket: %w", err)
	}
	peer := opts.peerUID
	if peer == nil {
		peer = peerUID
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &StageServer{
		runner: runner, log: opts.Log, dir: dir, socket: socket,
		lis:  &sameUIDListener{Listener: lis, log: opts.Log, peer: peer, uid: os.Getuid()},
		slot: make(chan struct{}, 1), ctx: ctx, cancel: cancel, served: make(chan struct{}),
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+pathProbe, s.probe)
	mux.HandleFunc("POST "+pathRun, s.run)
	mux.HandleFunc("POST "+pathCleanup, s.cleanup)
	s.srv = &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 10 * time.Second,
		MaxHeaderBytes:    16 << 10,
		BaseContext:       func(net.Listener) context.Context { return ctx },
	}
	go func() {
		defer close(s.served)
		_ = s.srv.Serve(s.lis)
	}()
	return s, nil
}

// Socket is the socket's path, for EnvSocket.
func (s *StageServer) Socket() string { return s.socket }

// Close stops serving, ends any script still running, and removes the
// socket's directory.
func (s *StageServer) Close() error {
	s.closed.Do(func() {
		s.cancel()
		err := s.srv.Close()
		<-s.served
		// Wait for a handler still in the runner: it returns once ctx ends.
		s.slot <- struct{}{}
		s.err = errors.Join(err, os.RemoveAll(s.dir))
	})
	return s.err
}

// acquire takes the one slot, or fails when the request ends first.
func (s *StageServer) acquire(w http.ResponseWriter, r *http.Request) bool {
	select {
	case s.slot <- struct{}{}:
		return true
	case <-r.Context().Done():
		http.Error(w, "request ended waiting for another", http.StatusServiceUnavailable)
		return false
	}
}

func (s *StageServer) release() { <-s.slot }

func (s *StageServer) probe(w http.ResponseWriter, r *http.Request) {
	if !s.acquire(w, r) {
		return
	}
	defer s.release()
	ctx, cancel := context.WithTimeout(r.Context(), probeTimeout)
	defer cancel()
	var err error
	if p, ok := s.runner.(Prober); ok {
		err = p.Probe(ctx)
	} else {
		var code int
		code, err = s.runner.RunScript(ctx, strings.NewReader("exit 0\n"), io.Discard)
		if err == nil && code != 0 {
			err = fmt.Errorf("exit 0 exited %d", code)
		}
	}
	if err != nil {
		s.log.Info("The job's VM did not answer the probe", "err", err.Error())
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *StageServer) run(w http.ResponseWriter, r *http.Request) {
	stage := r.Header.Get(HeaderStage)
	if !stageRe.MatchString(stage) {
		http.Error(w, "bad or missing "+HeaderStage, http.StatusBadRequest)
		return
	}
	// The whole script first: a VM must never run the first half of a
	// script whose end was cut off.
	script, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxScriptBytes))
	var tooLarge *http.MaxBytesError
	switch {
	case errors.As(err, &tooLarge):
		http.Error(w, fmt.Sprintf("script larger than %d bytes", MaxScriptBytes), http.StatusRequestEntityTooLarge)
		return
	case err != nil:
		http.Error(w, "reading the script: "+err.Error(), http.StatusBadRequest)
		return
	case len(script) == 0:
		http.Error(w, "empty script", http.StatusBadRequest)
		return
	}
	if !s.acquire(w, r) {
		return
	}
	defer s.release()

	w.Header().Set("Trailer", TrailerExitCode+", "+TrailerError)
	w.Header().Set("Content-Type", "application/octet-stream")
	w.WriteHeader(http.StatusOK)
	out := &flushWriter{w: w, rc: http.NewResponseController(w)}
	log := s.log.WithValues("stage", stage)
	log.V(1).Info("Running a stage's script in the VM", "bytes", len(script))
	began := time.Now()
	code, err := s.runner.RunScript(r.Context(), bytes.NewReader(script), out)
	out.close()
	if err != nil {
		log.Info("The VM could not run the stage's script", "err", err.Error())
		w.Header().Set(TrailerError, oneLine(err.Error()))
		return
	}
	log.V(1).Info("Stage's script ended", "exitCode", code, "duration", time.Since(began).Round(time.Millisecond))
	w.Header().Set(TrailerExitCode, strconv.Itoa(code))
}

func (s *StageServer) cleanup(w http.ResponseWriter, r *http.Request) {
	if !s.acquire(w, r) {
		return
	}
	defer s.release()
	if c, ok := s.runner.(Cleaner); ok {
		if err := c.Cleanup(r.Context()); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
	}
	w.WriteHeader(http.StatusNoContent)
}

// oneLine makes s fit a header value: one line, bounded.
func oneLine(s string) string {
	s = strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return ' '
		}
		return r
	}, s)
	if len(s) > maxErrorBytes {
		s = s[:maxErrorBytes]
	}
	return s
}

// flushWriter sends each write to the stage at once, and drops writes
// after close, so a ScriptRunner that writes late cannot touch a finished
// response.
type flushWriter struct {
	mu     sync.Mutex
	w      io.Writer
	rc     *http.ResponseController
	closed bool
}

func (f *flushWriter) Write(p []byte) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return 0, io.ErrClosedPipe
	}
	n, err := f.w.Write(p)
	if err == nil {
		err = f.rc.Flush()
	}
	return n, err
}

func (f *flushWriter) close() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closed = true
}

// sameUIDListener drops connections from other users' processes.
type sameUIDListener struct {
	net.Listener
	log  logr.Logger
	peer func(*net.UnixConn) (int, error)
	uid  int
}

func (l *sameUIDListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		uc, ok := c.(*net.UnixConn)
		if !ok {
			return c, nil
		}
		uid, err := l.peer(uc)
		if errors.Is(err, errPeerUnknown) || (err == nil && uid == l.uid) {
			return c, nil
		}
		l.log.Info("Refused a stage connection from another user", "uid", uid, "err", fmt.Sprint(err))
		c.Close()
	}
}
