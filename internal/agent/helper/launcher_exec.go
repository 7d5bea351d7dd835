package helper

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/go-logr/logr"

	"github.com/boualleiguie/macrack-operator/internal/agent/vmspec"
)

// ExecConfig configures an ExecLauncher.
type ExecConfig struct {
	// Dir holds the helpers' sockets, pid files, specs and logs. Keep it
	// short: a socket path must fit in 103 bytes.
	Dir string
	// HelperPath is the vm-helper binary.
	HelperPath string
	// Driver is the helper's --driver: "sim" or "vz".
	Driver string
	// KernelStateDir is the helper's --state-dir, the sim kernel's state,
	// shared by all helpers of one host. Unused by the vz driver.
	KernelStateDir string
	// ExtraArgs are appended to each helper's command line.
	ExtraArgs []string
	// KillAfter bounds Remove's wait for a helper to stop its VM and exit
	// after SIGTERM, before SIGKILL; zero means until Remove's ctx ends.
	KillAfter time.Duration
	Log       logr.Logger
}

// ExecLauncher runs each helper as a child process in its own session, so
// that it survives the agent's exit; a later ExecLauncher on the same Dir
// finds it. It works on Linux and on a Mac.
type ExecLauncher struct {
	cfg   ExecConfig
	files files
	mu    sync.Mutex // serialises launches and removals
}

var _ Launcher = (*ExecLauncher)(nil)

// NewExecLauncher creates cfg.Dir if needed.
func NewExecLauncher(cfg ExecConfig) (*ExecLauncher, error) {
	if cfg.HelperPath == "" || cfg.Driver == "" {
		return nil, errors.New("exec launcher: the helper path and driver are required")
	}
	if cfg.Log.GetSink() == nil {
		cfg.Log = logr.Discard()
	}
	if err := os.MkdirAll(cfg.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("creating helper directory: %w", err)
	}
	return &ExecLauncher{cfg: cfg, files: files{dir: cfg.Dir, log: cfg.Log}}, nil
}

// Launch implements Launcher. The helper gets the spec as a file.
func (l *ExecLauncher) Launch(ctx context.Context, uid string, spec vmspec.VMSpec) (string, error) {
	if err := l.files.check(uid, spec); err != nil {
		return "", err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if sock, ok, err := l.files.existing(uid, spec); err != nil || ok {
		return sock, err
	}
	l.files.cleanup(uid)
	if err := l.files.writeSpec(uid, spec); err != nil {
		return "", err
	}
	logf, err := os.OpenFile(l.files.path(uid, logSuffix), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return "", fmt.Errorf("opening helper log: %w", err)
	}
	defer logf.Close()
	cmd := exec.Command(l.cfg.HelperPath, helperArgs(l.files, uid, l.cfg.Driver, l.cfg.KernelStateDir, l.cfg.ExtraArgs)...)
	// Its own session: no signal aimed at the agent's process group or
	// terminal reaches the helper. Output goes to a file, not a pipe that
	// would break when the agent exits.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		return "", fmt.Errorf("starting helper of %s: %w", uid, err)
	}
	// Reap it, so that an exited helper is not a zombie that looks alive.
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	if err := l.files.waitReady(ctx, uid, exited); err != nil {
		_ = cmd.Process.Kill()
		return "", err
	}
	l.cfg.Log.Info("Helper launched", "instanceUID", uid, "pid", cmd.Process.Pid)
	return l.files.path(uid, socketSuffix), nil
}

// Running implements Launcher.
func (l *ExecLauncher) Running() (map[string]string, error) { return l.files.running() }

// Remove implements Launcher: SIGTERM, on which the helper stops its VM
// gracefully and exits; SIGKILL if it has not after KillAfter or when ctx
// ends.
func (l *ExecLauncher) Remove(ctx context.Context, uid string) error {
	if !uidPattern.MatchString(uid) {
		return fmt.Errorf("%w: %q", ErrInvalidUID, uid)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := terminate(ctx, l.files, uid, l.cfg.KillAfter); err != nil {
		return err
	}
	l.files.cleanup(uid)
	if err := os.Remove(l.files.path(uid, logSuffix)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("removing helper log: %w", err)
	}
	return nil
}

// terminate signals uid's helper to stop, then kills it if it outlasts
// killAfter or ctx.
func terminate(ctx context.Context, f files, uid string, killAfter time.Duration) error {
	pid, err := f.pid(uid)
	if err != nil || !processAlive(pid) {
		return err
	}
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("signalling helper of %s: %w", uid, err)
	}
	wait := ctx
	if killAfter > 0 {
		var cancel context.CancelFunc
		wait, cancel = context.WithTimeout(ctx, killAfter)
		defer cancel()
	}
	if waitGone(wait, pid) == nil {
		return nil
	}
	f.log.Info("Helper outlasted its stop; killing it", "instanceUID", uid, "pid", pid)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("killing helper of %s: %w", uid, err)
	}
	// A killed process is gone at once, give or take its reaping.
	reap, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := waitGone(reap, pid); err != nil {
		return fmt.Errorf("helper of %s (pid %d) survived SIGKILL: %w", uid, pid, err)
	}
	return nil
}

// helperArgs is the vm-helper command line for uid.
func helperArgs(f files, uid, driverName, kernelDir string, extra []string) []string {
	args := []string{
		"--socket", f.path(uid, socketSuffix),
		"--pid-file", f.path(uid, pidSuffix),
		"--spec", f.path(uid, specSuffix),
		"--instance-uid", uid,
		"--driver", driverName,
	}
	if kernelDir != "" {
		args = append(args, "--state-dir", kernelDir)
	}
	return append(args, extra...)
}

// KillAll kills every helper whose pid file is in dir at once, with
// SIGKILL, as a host that loses power or restarts ends every process: no
// helper stops its VM first. It waits until they are gone, then removes
// their socket, pid and spec files. The sim's host restart uses it; it is
// never how the agent stops a VM.
func KillAll(ctx context.Context, dir string) error {
	f := files{dir: dir, log: logr.Discard()}
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("listing helpers in %s: %w", dir, err)
	}
	var errs []error
	for _, e := range entries {
		uid, ok := strings.CutSuffix(e.Name(), pidSuffix)
		if !ok || !uidPattern.MatchString(uid) {
			continue
		}
		pid, err := f.pid(uid)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if processAlive(pid) {
			if err := syscall.Kill(pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
				errs = append(errs, fmt.Errorf("killing helper of %s (pid %d): %w", uid, pid, err))
				continue
			}
			if err := waitReaped(ctx, pid); err != nil {
				errs = append(errs, fmt.Errorf("helper of %s (pid %d) survived SIGKILL: %w", uid, pid, err))
				continue
			}
		}
		f.cleanup(uid)
	}
	return errors.Join(errs...)
}

// waitReaped waits until pid is gone. A helper this process launched is
// its child, which stays a zombie (alive to kill(0)) until reaped: when
// the goroutine that launched it is no longer there to wait on it (the
// agent re-executed itself), it is reaped here.
func waitReaped(ctx context.Context, pid int) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for processAlive(pid) {
		var ws syscall.WaitStatus
		_, _ = syscall.Wait4(pid, &ws, syscall.WNOHANG, nil) // ECHILD for another's child: harmless
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
	return nil
}
