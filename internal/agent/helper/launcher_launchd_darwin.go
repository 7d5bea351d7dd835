//go:build darwin

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
	"time"

	"github.com/go-logr/logr"

	"github.com/boualleiguie/macrack-operator/internal/agent/vmspec"
)

// LaunchdConfig configures a LaunchdLauncher.
type LaunchdConfig struct {
	// ExecConfig's fields mean the same here.
	ExecConfig
	// Domain is the launchd domain target: "system" for an agent running
	// as root, "gui/<uid>" for one in a user's session.
	Domain string
	// LabelPrefix names each job <LabelPrefix><instance UID>.
	LabelPrefix string
	// ExitTimeout is how long launchd waits after SIGTERM before SIGKILL;
	// longer than the helper's --stop-grace.
	ExitTimeout time.Duration
}

// LaunchdLauncher runs each helper as a launchd job on a Mac, as tart runs
// one process per VM: launchd, not the agent, is the helper's parent.
type LaunchdLauncher struct {
	cfg   LaunchdConfig
	files files
	mu    sync.Mutex
}

var _ Launcher = (*LaunchdLauncher)(nil)

// plistSuffix is the job definition's file, beside the helper's others.
const plistSuffix = ".plist"

// NewLaunchdLauncher creates cfg.Dir if needed.
func NewLaunchdLauncher(cfg LaunchdConfig) (*LaunchdLauncher, error) {
	if cfg.HelperPath == "" || cfg.Driver == "" || cfg.Domain == "" {
		return nil, errors.New("launchd launcher: the helper path, driver and domain are required")
	}
	if cfg.LabelPrefix == "" {
		cfg.LabelPrefix = "io.macrack.vm-helper."
	}
	if cfg.ExitTimeout <= 0 {
		cfg.ExitTimeout = time.Minute
	}
	if cfg.Log.GetSink() == nil {
		cfg.Log = logr.Discard()
	}
	if err := os.MkdirAll(cfg.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("creating helper directory: %w", err)
	}
	return &LaunchdLauncher{cfg: cfg, files: files{dir: cfg.Dir, log: cfg.Log}}, nil
}

func (l *LaunchdLauncher) target(uid string) string {
	return l.cfg.Domain + "/" + l.cfg.LabelPrefix + uid
}

// Launch implements Launcher with launchctl bootstrap.
func (l *LaunchdLauncher) Launch(ctx context.Context, uid string, spec vmspec.VMSpec) (string, error) {
	if err := l.files.check(uid, spec); err != nil {
		return "", err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if sock, ok, err := l.files.existing(uid, spec); err != nil || ok {
		return sock, err
	}
	l.files.cleanup(uid)
	// A job left loaded by a helper that died would refuse the bootstrap.
	_ = launchctl(ctx, "bootout", l.target(uid))
	if err := l.files.writeSpec(uid, spec); err != nil {
		return "", err
	}
	args := append([]string{l.cfg.HelperPath},
		helperArgs(l.files, uid, l.cfg.Driver, l.cfg.KernelStateDir, l.cfg.ExtraArgs)...)
	plist := l.files.path(uid, plistSuffix)
	body := launchdPlist(l.cfg.LabelPrefix+uid, args, l.files.path(uid, logSuffix), l.cfg.ExitTimeout)
	if err := os.WriteFile(plist, body, 0o600); err != nil {
		return "", fmt.Errorf("writing launchd job of %s: %w", uid, err)
	}
	if err := launchctl(ctx, "bootstrap", l.cfg.Domain, plist); err != nil {
		return "", fmt.Errorf("bootstrapping helper of %s: %w", uid, err)
	}
	if err := l.files.waitReady(ctx, uid, nil); err != nil {
		_ = launchctl(context.Background(), "bootout", l.target(uid))
		return "", fmt.Errorf("%w; log: %s", err, l.files.logTail(uid))
	}
	l.cfg.Log.Info("Helper launched", "instanceUID", uid, "job", l.target(uid))
	return l.files.path(uid, socketSuffix), nil
}

// Running implements Launcher.
func (l *LaunchdLauncher) Running() (map[string]string, error) { return l.files.running() }

// Remove implements Launcher with launchctl bootout, which sends SIGTERM
// and waits up to ExitTimeout; a signal to the pid backs it up.
func (l *LaunchdLauncher) Remove(ctx context.Context, uid string) error {
	if !uidPattern.MatchString(uid) {
		return fmt.Errorf("%w: %q", ErrInvalidUID, uid)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := launchctl(ctx, "bootout", l.target(uid)); err != nil {
		l.cfg.Log.Info("launchctl bootout failed; signalling the helper", "instanceUID", uid, "reason", err.Error())
	}
	if err := terminate(ctx, l.files, uid, l.cfg.KillAfter); err != nil {
		return err
	}
	l.files.cleanup(uid)
	for _, s := range []string{plistSuffix, logSuffix} {
		if err := os.Remove(l.files.path(uid, s)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("removing helper file: %w", err)
		}
	}
	return nil
}

func launchctl(ctx context.Context, args ...string) error {
	out, err := exec.CommandContext(ctx, "launchctl", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("launchctl %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}
