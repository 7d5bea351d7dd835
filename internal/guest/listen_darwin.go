package guest

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// listenBacklog is the kernel's queue of connections not yet accepted.
const listenBacklog = 16

// Listen listens for vsock connections on port, from any context ID.
//
// net.FileListener and net.FileConn refuse AF_VSOCK sockets (the standard
// library knows only inet and unix addresses), so this wraps the fds in
// *os.File itself: a non-blocking fd in an *os.File goes through the
// runtime poller, which gives Accept, Read, Write, Close and deadlines.
func Listen(port uint32) (net.Listener, error) {
	fd, err := unix.Socket(unix.AF_VSOCK, unix.SOCK_STREAM, 0)
	if err != nil {
		return nil, fmt.Errorf("listening on vsock port %d: socket: %w", port, err)
	}
	unix.CloseOnExec(fd)
	if err := unix.Bind(fd, &unix.SockaddrVM{CID: unix.VMADDR_CID_ANY, Port: port}); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("listening on vsock port %d: bind: %w", port, err)
	}
	if err := unix.Listen(fd, listenBacklog); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("listening on vsock port %d: listen: %w", port, err)
	}
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("listening on vsock port %d: %w", port, err)
	}
	return &vsockListener{f: os.NewFile(uintptr(fd), "vsock-listener"), addr: vsockAddr{cid: unix.VMADDR_CID_ANY, port: port}}, nil
}

// vsockAddr is a vsock address as a net.Addr.
type vsockAddr struct{ cid, port uint32 }

func (a vsockAddr) Network() string { return "vsock" }
func (a vsockAddr) String() string {
	return strconv.FormatUint(uint64(a.cid), 10) + ":" + strconv.FormatUint(uint64(a.port), 10)
}

type vsockListener struct {
	f      *os.File
	addr   vsockAddr
	closed atomic.Bool
}

func (l *vsockListener) Accept() (net.Conn, error) {
	rc, err := l.f.SyscallConn()
	if err != nil {
		return nil, l.acceptError(err)
	}
	var (
		nfd  int
		sa   unix.Sockaddr
		aerr error
	)
	// Returning false waits in the poller until the socket is readable.
	if err := rc.Read(func(fd uintptr) bool {
		nfd, sa, aerr = unix.Accept(int(fd))
		return aerr != unix.EAGAIN
	}); err != nil {
		return nil, l.acceptError(err)
	}
	if aerr != nil {
		return nil, l.acceptError(aerr)
	}
	unix.CloseOnExec(nfd)
	if err := unix.SetNonblock(nfd, true); err != nil {
		unix.Close(nfd)
		return nil, l.acceptError(err)
	}
	remote := vsockAddr{}
	if vm, ok := sa.(*unix.SockaddrVM); ok {
		remote = vsockAddr{cid: vm.CID, port: vm.Port}
	}
	return &vsockConn{File: os.NewFile(uintptr(nfd), "vsock-conn"), local: l.addr, remote: remote}, nil
}

func (l *vsockListener) acceptError(err error) error {
	if l.closed.Load() || errors.Is(err, os.ErrClosed) {
		err = net.ErrClosed
	}
	return &net.OpError{Op: "accept", Net: "vsock", Addr: l.addr, Err: err}
}

func (l *vsockListener) Close() error {
	l.closed.Store(true)
	return l.f.Close()
}

func (l *vsockListener) Addr() net.Addr { return l.addr }

// vsockConn is an accepted vsock stream; *os.File gives it Read, Write,
// Close and the deadlines.
type vsockConn struct {
	*os.File
	local, remote vsockAddr
}

func (c *vsockConn) LocalAddr() net.Addr  { return c.local }
func (c *vsockConn) RemoteAddr() net.Addr { return c.remote }
