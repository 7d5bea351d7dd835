//go:build !linux

package main

import "syscall"

// childProcAttr puts a child in its own process group. Only Linux has a
// parent-death signal: elsewhere a child outlives a parent that is killed
// rather than stopped.
func childProcAttr(syscall.Signal) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
