//go:build !linux

package docs

import "syscall"

// procAttr puts the child in a process group of its own, with group. Only
// Linux has a parent-death signal: elsewhere a child outlives a test that
// is killed rather than stopped.
func procAttr(group bool, _ syscall.Signal) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: group}
}
