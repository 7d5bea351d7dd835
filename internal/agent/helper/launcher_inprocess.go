package helper

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/go-logr/logr"

	"github.com/boualleiguie/macrack-operator/internal/agent/driver"
	"github.com/boualleiguie/macrack-operator/internal/agent/vmspec"
)

// InProcessLauncher runs each helper as goroutines of the agent's own
// process, behind the same socket protocol: for the simulated fleet at
// scale and for fast tests. Its helpers, and their VMs, end with the
// process, so there is nothing to reattach to after a restart.
type InProcessLauncher struct {
	drv       driver.Driver
	files     files
	stopGrace time.Duration
	log       logr.Logger

	mu      sync.Mutex
	helpers map[string]*inProcessHelper
}

type inProcessHelper struct {
	srv    *Server
	spec   vmspec.VMSpec
	cancel context.CancelFunc
	done   chan struct{}
}

var _ Launcher = (*InProcessLauncher)(nil)

// InProcessOption configures an InProcessLauncher.
type InProcessOption func(*InProcessLauncher)

// WithStopGrace sets the grace period Remove gives a VM's guest.
func WithStopGrace(d time.Duration) InProcessOption {
	return func(l *InProcessLauncher) { l.stopGrace = d }
}

// WithLauncherLogger sets the logger of the launcher and its helpers.
func WithLauncherLogger(log logr.Logger) InProcessOption {
	return func(l *InProcessLauncher) { l.log = log }
}

// NewInProcessLauncher serves helpers' sockets in dir, with VMs from d.
func NewInProcessLauncher(dir string, d driver.Driver, opts ...InProcessOption) (*InProcessLauncher, error) {
	l := &InProcessLauncher{drv: d, stopGrace: 30 * time.Second, log: logr.Discard(), helpers: map[string]*inProcessHelper{}}
	for _, opt := range opts {
		opt(l)
	}
	l.files = files{dir: dir, log: l.log}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("creating helper directory: %w", err)
	}
	return l, nil
}

// Launch implements Launcher.
func (l *InProcessLauncher) Launch(_ context.Context, uid string, spec vmspec.VMSpec) (string, error) {
	if err := l.files.check(uid, spec); err != nil {
		return "", err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	sock := l.files.path(uid, socketSuffix)
	if h, ok := l.helpers[uid]; ok {
		if !sameSpec(h.spec, spec) {
			return "", fmt.Errorf("%w: the helper of %s runs an earlier spec", ErrSpecMismatch, uid)
		}
		return sock, nil
	}
	srv, err := NewServer(l.drv, spec, WithServerLogger(l.log.WithValues("instanceUID", uid)))
	if err != nil {
		return "", err
	}
	ln, err := Listen(sock)
	if err != nil {
		return "", err
	}
	ctx, cancel := context.WithCancel(context.Background())
	h := &inProcessHelper{srv: srv, spec: spec, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(h.done)
		if err := srv.Serve(ctx, ln); err != nil {
			l.log.Error(err, "Helper stopped serving", "instanceUID", uid)
		}
	}()
	l.helpers[uid] = h
	return sock, nil
}

// Running implements Launcher.
func (l *InProcessLauncher) Running() (map[string]string, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make(map[string]string, len(l.helpers))
	for uid := range l.helpers {
		out[uid] = l.files.path(uid, socketSuffix)
	}
	return out, nil
}

// Remove implements Launcher: it stops the VM with the launcher's grace
// period, then stops serving.
func (l *InProcessLauncher) Remove(ctx context.Context, uid string) error {
	return l.remove(ctx, uid, l.stopGrace)
}

func (l *InProcessLauncher) remove(ctx context.Context, uid string, grace time.Duration) error {
	l.mu.Lock()
	h, ok := l.helpers[uid]
	delete(l.helpers, uid)
	l.mu.Unlock()
	if !ok {
		return nil
	}
	err := h.srv.VM().Stop(ctx, grace)
	h.cancel()
	<-h.done
	if rmErr := os.Remove(l.files.path(uid, socketSuffix)); rmErr != nil && !errors.Is(rmErr, os.ErrNotExist) {
		err = errors.Join(err, rmErr)
	}
	if err != nil {
		return fmt.Errorf("removing helper of %s: %w", uid, err)
	}
	return nil
}

// Close removes every helper.
func (l *InProcessLauncher) Close(ctx context.Context) error { return l.removeAll(ctx, l.stopGrace) }

// Kill ends every helper with its VM forced off at once, as a host's
// reboot does.
func (l *InProcessLauncher) Kill(ctx context.Context) error { return l.removeAll(ctx, 0) }

func (l *InProcessLauncher) removeAll(ctx context.Context, grace time.Duration) error {
	l.mu.Lock()
	uids := slices.Collect(maps.Keys(l.helpers))
	l.mu.Unlock()
	var errs []error
	for _, uid := range uids {
		errs = append(errs, l.remove(ctx, uid, grace))
	}
	return errors.Join(errs...)
}
