//go:build !linux

package natsserver

import (
	"syscall"
	"time"
)

// serverProcAttr: a server has its own process group. Outside Linux there
// is no parent-death signal: a test binary killed rather than stopped
// leaves its servers running.
func serverProcAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }

// stopped cannot be observed outside Linux; SIGSTOP is taken as delivered.
func stopped(int, time.Duration) error { return nil }
