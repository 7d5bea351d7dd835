package sim

import (
	"net"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// StreamPair is a connected pair of Unix stream sockets, the sim's vsock
// stream: buffered both ways, as a real vsock is, so that a write returns
// once the kernel took the bytes instead of waiting for the reader, as a
// net.Pipe's does (a goroutine handoff per write, and no buffering to
// overlap the two ends' work).
func StreamPair() (net.Conn, net.Conn, error) {
	// Under ForkLock, so that no process started meanwhile inherits them
	// before they are close-on-exec (darwin has no SOCK_CLOEXEC).
	syscall.ForkLock.RLock()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM, 0)
	if err == nil {
		unix.CloseOnExec(fds[0])
		unix.CloseOnExec(fds[1])
	}
	syscall.ForkLock.RUnlock()
	if err != nil {
		return nil, nil, os.NewSyscallError("socketpair", err)
	}
	a, err := fileConn(fds[0])
	if err != nil {
		unix.Close(fds[1])
		return nil, nil, err
	}
	b, err := fileConn(fds[1])
	if err != nil {
		a.Close()
		return nil, nil, err
	}
	return a, b, nil
}

// fileConn makes fd a net.Conn, and closes fd: the conn has its own.
func fileConn(fd int) (net.Conn, error) {
	f := os.NewFile(uintptr(fd), "sim-vsock")
	defer f.Close()
	return net.FileConn(f)
}
