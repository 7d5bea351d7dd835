//go:build darwin

package host

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"time"

	"github.com/go-logr/logr"
)

// NewDarwinFacts is the facts source of a Mac: it reads each fact from
// macOS with the system's own commands (csrutil status, sysctl -n, sw_vers,
// diskutil info, ifconfig, codesign -d, and the read nvram boot-args), each
// under cfg.Timeout. Each only reads.
func NewDarwinFacts(cfg DarwinFactsConfig) (FactsSource, error) {
	if cfg.Timeout <= 0 {
		cfg.Timeout = 10 * time.Second
	}
	if cfg.Log.GetSink() == nil {
		cfg.Log = logr.Discard()
	}
	if len(cfg.EntitledExecutables) == 0 {
		self, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("darwin facts: the agent's own executable: %w", err)
		}
		cfg.EntitledExecutables = []string{self}
	}
	return &darwinFacts{cfg: cfg, run: execRunner(cfg.Timeout)}, nil
}

// execRunner runs each command with its own timeout, in the C locale, and
// never waits on a child that outlives it for longer than a second.
func execRunner(timeout time.Duration) commandRunner {
	return func(ctx context.Context, name string, args ...string) ([]byte, []byte, error) {
		ctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		cmd := exec.CommandContext(ctx, name, args...)
		cmd.Env = append(os.Environ(), "LC_ALL=C")
		cmd.WaitDelay = time.Second
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		if ctx.Err() == context.DeadlineExceeded {
			err = fmt.Errorf("timed out after %s: %w", timeout, ctx.Err())
		}
		return stdout.Bytes(), stderr.Bytes(), err
	}
}
