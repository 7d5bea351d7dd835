package guest

import (
	"context"
	"io"
	"syscall"
)

// Executor starts the commands of the host's exec sessions in the guest:
// UnixExecutor in a real guest and in the sim guest, a fake in tests. The
// guest agent's Server drives it, one Start per exec, from the session's
// channel handlers, concurrently.
type Executor interface {
	// Start starts spec's command and returns once it runs; ctx bounds the
	// start only. An argv[0] that is neither a path to an executable nor
	// one in the user's PATH is an error wrapping ErrCommandNotFound.
	// Other errors (an unknown user, one the agent cannot switch to) are
	// told to the host as they are: they must not quote argv beyond [0].
	Start(ctx context.Context, spec ProcessSpec) (Process, error)
}

// ProcessSpec is a command to run.
type ProcessSpec struct {
	// Argv is the command and its arguments, run directly (no shell):
	// argv[0] is looked up in the user's PATH unless it has a slash.
	Argv []string
	// User is the login user the command runs as.
	User string
	// Env is added to the login environment, as "KEY=value": TERM, with a
	// TTY.
	Env []string
	// TTY runs the command on a new pseudo-terminal of Size, as its
	// controlling terminal, in a session of its own. Its output, both
	// streams, goes to Stdout.
	TTY  bool
	Size TerminalSize
	// Stdout and Stderr take the command's output, written concurrently
	// (one writer for both must take that); Stderr is unused with a TTY.
	// Either may be nil, to discard it.
	Stdout io.Writer
	Stderr io.Writer
}

// Process is a command an Executor started.
type Process interface {
	// Stdin is the command's input. Closing it ends the input (a no-op
	// with a TTY, which has no end of input but a ^D).
	Stdin() io.WriteCloser
	// Resize sets the TTY's size; a no-op without one.
	Resize(TerminalSize) error
	// Wait waits for the command to end and for all of its output to be
	// written out, and says how it ended. It is called once.
	Wait() (ExitStatus, error)
	// Kill kills the command's whole process group (its session, with a
	// TTY) at once, unless Wait returned already. Wait then returns soon,
	// whatever output was still unread is dropped.
	Kill() error
}

// TerminalSize is a terminal's size, in character cells.
type TerminalSize struct{ Width, Height uint16 }

// defaultTerminalSize is a TTY's size until the host says otherwise.
var defaultTerminalSize = TerminalSize{Width: 80, Height: 24}

// ExitStatus is how a command ended: with an exit code, or killed by a
// signal.
type ExitStatus struct {
	// Code is the exit code, when Signal is 0.
	Code int
	// Signal is the signal that killed the command, or 0.
	Signal syscall.Signal
}
