//go:build unix

package guest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"github.com/creack/pty"
)

// UnixExecutor runs exec sessions' commands on this machine, as their
// login user, the way a login would: the user's groups, HOME, USER,
// LOGNAME, SHELL and a PATH, in the home directory. It is what the macOS
// guest agent runs, and the sim guest, on Linux, with a home of its own.
//
// A command runs in a process group of its own (a session, with a TTY),
// so that Kill reaches its children too. To run commands as another user
// than its own, the agent must run as root; as anyone else, it runs only
// its own user's commands.
type UnixExecutor struct {
	// Home, if set, is the commands' HOME and working directory, in place
	// of the user's home directory.
	Home string
	// PathPrefix are directories searched before Path.
	PathPrefix []string
	// Path is the commands' PATH after PathPrefix: DefaultPath if empty.
	Path string
	// LookupUser finds a login user by name: os/user.Lookup if nil.
	LookupUser func(name string) (*user.User, error)
}

var _ Executor = (*UnixExecutor)(nil)

// Start implements Executor.
func (e *UnixExecutor) Start(ctx context.Context, spec ProcessSpec) (Process, error) {
	if len(spec.Argv) == 0 || spec.Argv[0] == "" {
		return nil, errors.New("no command to run")
	}
	name := spec.Argv[0]
	lookup := e.LookupUser
	if lookup == nil {
		lookup = user.Lookup
	}
	u, err := lookup(spec.User)
	if err != nil {
		return nil, fmt.Errorf("running %s as %q: %w", name, spec.User, err)
	}
	cred, err := credential(u)
	if err != nil {
		return nil, fmt.Errorf("running %s as %q: %w", name, spec.User, err)
	}
	home := e.Home
	if home == "" {
		home = u.HomeDir
	}
	path := e.Path
	if path == "" {
		path = DefaultPath
	}
	if len(e.PathPrefix) > 0 {
		path = strings.Join(e.PathPrefix, string(filepath.ListSeparator)) + string(filepath.ListSeparator) + path
	}
	prog, err := lookPath(name, path, home)
	if err != nil {
		return nil, err
	}
	env := append([]string{
		"HOME=" + home,
		"USER=" + u.Username,
		"LOGNAME=" + u.Username,
		"SHELL=" + loginShell(ctx, u),
		"PATH=" + path,
	}, spec.Env...)
	cmd := &exec.Cmd{Path: prog, Args: spec.Argv, Env: env, Dir: home}
	attrs := &syscall.SysProcAttr{Credential: cred}
	cmd.SysProcAttr = attrs
	if spec.TTY {
		return startTTY(cmd, attrs, cred, spec)
	}
	return startPiped(cmd, attrs, spec)
}

// credential is what switches a command to u: nil when the agent is u
// already. Only root may switch.
func credential(u *user.User) (*syscall.Credential, error) {
	uid, err := strconv.ParseUint(u.Uid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("uid %q: %w", u.Uid, err)
	}
	gid, err := strconv.ParseUint(u.Gid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("gid %q: %w", u.Gid, err)
	}
	euid := os.Geteuid()
	if uint64(euid) == uid {
		return nil, nil
	}
	if euid != 0 {
		return nil, fmt.Errorf("the guest agent runs as uid %d, not root, and runs commands as its own user only (user %s is uid %d)", euid, u.Username, uid)
	}
	c := &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	// Best effort: without its list, the user has its primary group only.
	if ids, err := u.GroupIds(); err == nil {
		for _, id := range ids {
			if g, err := strconv.ParseUint(id, 10, 32); err == nil {
				c.Groups = append(c.Groups, uint32(g))
			}
		}
	}
	return c, nil
}

// lookPath finds name as the command's shell would: a name with a slash
// as it is (relative to dir), any other in path.
func lookPath(name, path, dir string) (string, error) {
	if strings.Contains(name, "/") {
		p := name
		if !filepath.IsAbs(p) {
			p = filepath.Join(dir, p)
		}
		if err := executable(p); err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return "", fmt.Errorf("%w: %s: no such file", ErrCommandNotFound, name)
			}
			return "", fmt.Errorf("%s: %w", name, err)
		}
		return p, nil
	}
	for _, d := range filepath.SplitList(path) {
		if d == "" || !filepath.IsAbs(d) {
			continue
		}
		p := filepath.Join(d, name)
		if executable(p) == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("%w: %s is not in PATH %s", ErrCommandNotFound, name, path)
}

// executable checks that p is a file someone may execute.
func executable(p string) error {
	fi, err := os.Stat(p)
	if err != nil {
		return err
	}
	if fi.IsDir() || fi.Mode()&0o111 == 0 {
		return fmt.Errorf("%s is not executable", p)
	}
	return nil
}

// startPiped runs cmd in a process group of its own, its output through
// pipes this process copies out.
func startPiped(cmd *exec.Cmd, attrs *syscall.SysProcAttr, spec ProcessSpec) (Process, error) {
	attrs.Setpgid = true
	inR, inW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		closeAll(inR, inW)
		return nil, err
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		closeAll(inR, inW, outR, outW)
		return nil, err
	}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = inR, outW, errW
	err = cmd.Start()
	// The child has its ends; this process keeps only its own.
	closeAll(inR, outW, errW)
	if err != nil {
		closeAll(inW, outR, errR)
		return nil, fmt.Errorf("starting %s: %w", spec.Argv[0], err)
	}
	p := &unixProcess{cmd: cmd, stdin: inW, outputs: []*os.File{outR, errR}}
	p.copyOut(outR, spec.Stdout)
	p.copyOut(errR, spec.Stderr)
	return p, nil
}

// startTTY runs cmd on a new pseudo-terminal, as the controlling terminal
// of a new session.
func startTTY(cmd *exec.Cmd, attrs *syscall.SysProcAttr, cred *syscall.Credential, spec ProcessSpec) (Process, error) {
	attrs.Setsid, attrs.Setctty, attrs.Ctty = true, true, 0
	ptmx, tty, err := pty.Open()
	if err != nil {
		return nil, fmt.Errorf("opening a pseudo-terminal: %w", err)
	}
	if err := pty.Setsize(ptmx, winsize(spec.Size)); err != nil {
		closeAll(ptmx, tty)
		return nil, fmt.Errorf("sizing the pseudo-terminal: %w", err)
	}
	if cred != nil {
		// The user's terminal is the user's, as login(1) makes it; best
		// effort, since the command has it open either way.
		_ = tty.Chown(int(cred.Uid), int(cred.Gid))
	}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = tty, tty, tty
	err = cmd.Start()
	closeAll(tty)
	if err != nil {
		closeAll(ptmx)
		return nil, fmt.Errorf("starting %s: %w", spec.Argv[0], err)
	}
	p := &unixProcess{cmd: cmd, stdin: nopCloser{ptmx}, pty: ptmx, outputs: []*os.File{ptmx}}
	p.copyOut(ptmx, spec.Stdout)
	return p, nil
}

func winsize(s TerminalSize) *pty.Winsize {
	if s.Width == 0 || s.Height == 0 {
		s = defaultTerminalSize
	}
	return &pty.Winsize{Cols: s.Width, Rows: s.Height}
}

func closeAll(fs ...*os.File) {
	for _, f := range fs {
		_ = f.Close()
	}
}

// nopCloser is a terminal's input: closing it must not close the terminal.
type nopCloser struct{ io.Writer }

func (nopCloser) Close() error { return nil }

// unixProcess is a command UnixExecutor started.
type unixProcess struct {
	cmd     *exec.Cmd
	stdin   io.WriteCloser
	pty     *os.File
	outputs []*os.File
	copying sync.WaitGroup

	// mu orders Resize (the terminal's fd) and Kill after Wait's closes.
	mu     sync.Mutex
	waited bool
	closed bool
}

// copyOut copies r to w until r ends (a terminal's end is EIO on Linux).
// A write that fails does not stop it, so that the command never blocks
// on a full pipe: the rest is dropped.
func (p *unixProcess) copyOut(r *os.File, w io.Writer) {
	if w == nil {
		w = io.Discard
	}
	p.copying.Go(func() {
		if _, err := io.Copy(w, r); err != nil && !isEndOfOutput(err) {
			_, _ = io.Copy(io.Discard, r)
		}
	})
}

// closeOutputs closes this process's ends of the output. It runs under p.mu.
func (p *unixProcess) closeOutputs() {
	if !p.closed {
		p.closed = true
		closeAll(p.outputs...)
	}
}

// isEndOfOutput reports whether a read error just means that the output
// ended: a terminal whose last user closed it, or a file Kill closed.
func isEndOfOutput(err error) bool {
	return errors.Is(err, syscall.EIO) || errors.Is(err, os.ErrClosed) || errors.Is(err, io.EOF)
}

func (p *unixProcess) Stdin() io.WriteCloser { return p.stdin }

func (p *unixProcess) Resize(s TerminalSize) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.pty == nil || p.closed {
		return nil
	}
	return pty.Setsize(p.pty, winsize(s))
}

func (p *unixProcess) Wait() (ExitStatus, error) {
	err := p.cmd.Wait()
	p.copying.Wait()
	p.mu.Lock()
	p.waited = true
	p.closeOutputs()
	p.mu.Unlock()
	_ = p.stdin.Close()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		return ExitStatus{}, fmt.Errorf("waiting for %s: %w", p.cmd.Args[0], err)
	}
	if ws, ok := p.cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return ExitStatus{Signal: ws.Signal()}, nil
	}
	return ExitStatus{Code: p.cmd.ProcessState.ExitCode()}, nil
}

func (p *unixProcess) Kill() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.waited {
		return nil
	}
	// The group's id is its leader's pid (Setpgid, Setsid).
	err := syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	if errors.Is(err, syscall.ESRCH) {
		err = nil
	}
	// Whatever escaped the group and holds a pipe open must not hold up
	// Wait. (A terminal's blocking reads end once the group is gone.)
	p.closeOutputs()
	if err != nil {
		return fmt.Errorf("killing the process group of %s: %w", p.cmd.Args[0], err)
	}
	return nil
}
