package docs

import "syscall"

// procAttr has the kernel send deathSig to a child when this test dies,
// even of SIGKILL (Pdeathsig, a Linux feature), and, with group, puts the
// child in a process group of its own.
func procAttr(group bool, deathSig syscall.Signal) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: group, Pdeathsig: deathSig}
}
