package main

import "syscall"

// childProcAttr puts a child in its own process group, and has the kernel
// send it deathSig when this process dies, even of SIGKILL (Pdeathsig, a
// Linux feature).
func childProcAttr(deathSig syscall.Signal) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: deathSig}
}
