package guest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/user"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"
)

// testExecutor runs commands as the test's own user, whatever user a
// session names, in a home of the test's.
func testExecutor(t *testing.T) *UnixExecutor {
	t.Helper()
	return &UnixExecutor{Home: t.TempDir(), LookupUser: func(string) (*user.User, error) { return user.Current() }}
}

// sessionServer serves sessions with a test executor and a journal.
func sessionServer(t *testing.T, tr transport, opts ServerOptions) (dial func() (net.Conn, error), j *Journal) {
	t.Helper()
	if opts.Exec == nil {
		opts.Exec = testExecutor(t)
	}
	if opts.Journal == nil {
		opts.Journal = NewJournal(JournalOptions{})
	}
	dial, _, _ = startServer(t, tr, &stubReporter{report: testReport}, opts)
	return dial, opts.Journal
}

// openSession dials and opens a session, closed at the end of the test.
func openSession(t *testing.T, dial func() (net.Conn, error)) *Session {
	t.Helper()
	s, err := dialClient(t, dial).Session(callCtx(t), "admin")
	if err != nil {
		t.Fatalf("Session: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// The command's argv is run as it is, without a shell; its stdin, stdout
// and stderr go their own ways.
func TestExecRunsArgvWithItsStreams(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			dial, _ := sessionServer(t, tr, ServerOptions{})
			s := openSession(t, dial)

			var out, errOut bytes.Buffer
			err := s.Exec(callCtx(t), ExecOptions{
				Command: []string{"sh", "-c", `tr a-z A-Z; printf '%s|' "$@" >&2`, "sh", "a b", "$HOME", "*"},
				Stdin:   strings.NewReader("hello\nguest\n"),
				Stdout:  &out,
				Stderr:  &errOut,
			})
			if err != nil {
				t.Fatalf("Exec: %v", err)
			}
			if out.String() != "HELLO\nGUEST\n" {
				t.Errorf("stdout %q, want the input in capitals", out.String())
			}
			if errOut.String() != "a b|$HOME|*|" {
				t.Errorf("stderr %q, want the arguments as they were sent", errOut.String())
			}

			// A command without stdin reads an end of input at once.
			out.Reset()
			if err := s.Exec(callCtx(t), ExecOptions{Command: []string{"cat"}, Stdout: &out}); err != nil || out.Len() != 0 {
				t.Fatalf("cat without stdin: %v, %q", err, out.String())
			}
		})
	}
}

func TestExecReturnsHowTheCommandEnded(t *testing.T) {
	dial, j := sessionServer(t, transports[1], ServerOptions{})
	s := openSession(t, dial)
	for _, tc := range []struct {
		name    string
		command string
		code    int
	}{
		{"an exit 0 is no error", "exit 0", 0},
		{"an exit 3 is an ExitError of 3", "exit 3", 3},
		{"a SIGKILL is an ExitError of 128+9", "kill -KILL $$", 128 + int(syscall.SIGKILL)},
		{"a SIGTERM is an ExitError of 128+15", "kill -TERM $$", 128 + int(syscall.SIGTERM)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := s.Exec(callCtx(t), ExecOptions{Command: []string{"sh", "-c", tc.command}})
			if tc.code == 0 {
				if err != nil {
					t.Fatalf("Exec: %v, want nil", err)
				}
				return
			}
			var exit *ExitError
			if !errors.As(err, &exit) || exit.Code != tc.code {
				t.Fatalf("Exec: %v, want an ExitError of code %d", err, tc.code)
			}
			if want := "exited with code " + strconv.Itoa(tc.code); !strings.Contains(err.Error(), want) {
				t.Fatalf("error %q does not say %q", err, want)
			}
		})
	}
	journal := streamAll(t, j)
	for _, want := range []string{"exec sh: exit code 0", "exec sh: exit code 3", "exec sh: killed by signal KILL, exit code 137"} {
		if !strings.Contains(journal, want) {
			t.Errorf("the journal does not say %q:\n%s", want, journal)
		}
	}
}

// On a terminal, the command sees its size, and a resize.
func TestExecOnATerminalFollowsItsSize(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			dial, _ := sessionServer(t, tr, ServerOptions{})
			s := openSession(t, dial)

			resize := make(chan TerminalSize, 1)
			resize <- TerminalSize{Width: 100, Height: 30}
			stdinR, stdinW := io.Pipe()
			defer stdinW.Close()
			var out syncBuffer
			done := make(chan error, 1)
			go func() {
				done <- s.Exec(callCtx(t), ExecOptions{
					Command: []string{"sh", "-c", `stty size; while read x; do s=$(stty size); echo "now $s"; [ "$s" = "40 120" ] && exit 0; done; exit 1`},
					Stdin:   stdinR, Stdout: &out, TTY: true, Resize: resize,
				})
			}()
			eventually(t, "the first size", func() bool { return strings.Contains(out.String(), "30 100") })
			resize <- TerminalSize{Width: 120, Height: 40}
			// Each line makes the command look again, until it sees the resize.
			var err error
		wait:
			for {
				select {
				case err = <-done:
					break wait
				case <-time.After(20 * time.Millisecond):
				}
				if _, err := stdinW.Write([]byte("\n")); err != nil {
					t.Fatalf("writing to the terminal: %v", err)
				}
			}
			if err != nil || !strings.Contains(out.String(), "now 40 120") {
				t.Fatalf("Exec: %v; output %q, want the command to see the resize", err, out.String())
			}
			if !strings.Contains(out.String(), "\r\n") {
				t.Errorf("output %q is not a terminal's (CRLF)", out.String())
			}
		})
	}
}

func TestExecOfAnUnknownCommandSaysItWasNotFound(t *testing.T) {
	dial, j := sessionServer(t, transports[0], ServerOptions{})
	s := openSession(t, dial)
	var stderr bytes.Buffer
	err := s.Exec(callCtx(t), ExecOptions{Command: []string{"no-such-command-42", "--secret-flag"}, Stderr: &stderr})
	if !errors.Is(err, ErrCommandNotFound) || !strings.Contains(err.Error(), "no-such-command-42") {
		t.Fatalf("Exec: %v, want ErrCommandNotFound naming the command", err)
	}
	var exit *ExitError
	if errors.As(err, &exit) {
		t.Fatalf("Exec: %v is an ExitError, but nothing ran", err)
	}
	if err := s.Exec(callCtx(t), ExecOptions{Command: []string{"./nowhere/tool"}}); !errors.Is(err, ErrCommandNotFound) {
		t.Fatalf("Exec of a missing path: %v, want ErrCommandNotFound", err)
	}
	// The control: the session goes on.
	if err := s.Exec(callCtx(t), ExecOptions{Command: []string{"true"}}); err != nil {
		t.Fatalf("Exec after a command not found: %v", err)
	}
	journal := streamAll(t, j)
	if !strings.Contains(journal, "exec no-such-command-42: not started") || strings.Contains(journal, "--secret-flag") {
		t.Fatalf("the journal should name argv[0] and only it:\n%s", journal)
	}
}

// Cancelling an Exec kills the command's whole process group in the guest.
func TestCancellingAnExecKillsItsProcessGroup(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			for _, tty := range []bool{false, true} {
				t.Run(fmt.Sprintf("tty=%v", tty), func(t *testing.T) {
					dial, _ := sessionServer(t, tr, ServerOptions{})
					s := openSession(t, dial)
					ctx, cancel := context.WithCancel(callCtx(t))
					defer cancel()
					var out syncBuffer
					done := make(chan error, 1)
					go func() {
						done <- s.Exec(ctx, ExecOptions{Command: []string{"sh", "-c", "sleep 60 & echo child $!; wait"}, Stdout: &out, TTY: tty})
					}()
					var pid int
					eventually(t, "the child's pid", func() bool {
						_, rest, ok := strings.Cut(out.String(), "child ")
						if !ok {
							return false
						}
						n, err := strconv.Atoi(strings.TrimSpace(strings.Fields(rest + " ")[0]))
						pid = n
						return err == nil && strings.ContainsAny(rest, "\r\n")
					})
					if !alive(pid) {
						t.Fatalf("the child %d is not running", pid)
					}
					cancel()
					select {
					case err := <-done:
						if !errors.Is(err, context.Canceled) {
							t.Fatalf("Exec: %v, want context.Canceled", err)
						}
					case <-time.After(waitLimit):
						t.Fatal("Exec did not return on cancel")
					}
					eventually(t, "the background child to be killed", func() bool { return !alive(pid) })
					// The control: the session still runs commands.
					if err := s.Exec(callCtx(t), ExecOptions{Command: []string{"true"}}); err != nil {
						t.Fatalf("Exec after a cancel: %v", err)
					}
				})
			}
		})
	}
}

// alive reports whether pid runs: a zombie no longer does.
func alive(pid int) bool {
	if syscall.Kill(pid, 0) != nil {
		return false
	}
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	// pid (comm) state ...
	_, rest, _ := strings.Cut(string(stat), ") ")
	return !strings.HasPrefix(rest, "Z") && !strings.HasPrefix(rest, "X")
}

func TestAGuestOlderThan13HasNoSessions(t *testing.T) {
	l, dial := listenUnix(t)
	srv := NewServer(&stubReporter{report: testReport}, (&logBuffer{}).logger(), ServerOptions{AgentVersion: "v0.9.0", Exec: testExecutor(t)})
	srv.version = "1.2"
	serve(t, srv, l)
	c := dialClient(t, dial)
	_, err := c.Session(callCtx(t), "admin")
	if !errors.Is(err, ErrSessionUnsupported) {
		t.Fatalf("Session: %v, want ErrSessionUnsupported", err)
	}
	for _, want := range []string{`"v0.9.0"`, "protocol 1.2", "exec and logs need protocol 1.3", "update the golden image's guest agent"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	// Nothing was sent: the connection goes on.
	mustReport(t, c)

	// A 1.2 guest asked all the same closes the connection, as an old
	// agent does on a frame it does not know.
	conn, err := dial()
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(waitLimit))
	if err := WriteMessage(conn, Hello{ProtocolVersion: ProtocolVersion}); err != nil {
		t.Fatal(err)
	}
	if m, err := ReadMessage(conn); err != nil || m.(HelloAck).ProtocolVersion != "1.2" {
		t.Fatalf("handshake: %v, %v", m, err)
	}
	if err := WriteMessage(conn, SessionRequest{User: "admin"}); err != nil {
		t.Fatal(err)
	}
	if m, err := ReadMessage(conn); err != nil || m.(Error).Code != CodeUnexpectedMessage {
		t.Fatalf("a 1.2 guest answered a Session with %v, %v", m, err)
	}
}

// A guest without an Executor or a Journal refuses exec and logs clearly,
// and the session goes on.
func TestAGuestWithoutExecOrJournalSaysSo(t *testing.T) {
	dial, _, _ := startServer(t, transports[0], &stubReporter{report: testReport}, ServerOptions{})
	s := openSession(t, dial)
	err := s.Exec(callCtx(t), ExecOptions{Command: []string{"true"}})
	if !errors.Is(err, ErrRemote) || !strings.Contains(err.Error(), "exec is not supported by this guest") {
		t.Fatalf("Exec: %v, want the guest's refusal", err)
	}
	err = s.Logs(callCtx(t), LogOptions{}, io.Discard)
	if !errors.Is(err, ErrRemote) || !strings.Contains(err.Error(), "keeps no log") {
		t.Fatalf("Logs: %v, want the guest's refusal", err)
	}
}

func TestASessionTakesOverItsConnection(t *testing.T) {
	dial, _ := sessionServer(t, transports[1], ServerOptions{})
	c := dialClient(t, dial)
	if _, err := c.Session(callCtx(t), ""); err == nil || !strings.Contains(err.Error(), "no user") {
		t.Fatalf("Session without a user: %v", err)
	}
	mustReport(t, c)
	s, err := c.Session(callCtx(t), "admin")
	if err != nil {
		t.Fatalf("Session: %v", err)
	}
	defer s.Close()
	if _, err := c.Report(callCtx(t)); !errors.Is(err, ErrClosed) || !strings.Contains(err.Error(), "session") {
		t.Fatalf("Report on a session's connection: %v, want ErrClosed", err)
	}
	if _, err := c.Session(callCtx(t), "admin"); !errors.Is(err, ErrClosed) {
		t.Fatalf("a second Session on one connection: %v, want ErrClosed", err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := s.Exec(callCtx(t), ExecOptions{Command: []string{"true"}}); !errors.Is(err, ErrClosed) {
		t.Fatalf("Exec on a closed session: %v, want ErrClosed", err)
	}
}

// A session is not subject to the frames' idle timeout.
func TestASessionOutlivesTheIdleTimeout(t *testing.T) {
	const idle = 50 * time.Millisecond
	dial, _ := sessionServer(t, transports[1], ServerOptions{IdleTimeout: idle, HandshakeTimeout: idle})
	s := openSession(t, dial)
	// The command outlasts the timeouts, in the guest.
	if err := s.Exec(callCtx(t), ExecOptions{Command: []string{"sleep", "0.3"}}); err != nil {
		t.Fatalf("Exec: %v", err)
	}
	if err := s.Exec(callCtx(t), ExecOptions{Command: []string{"true"}}); err != nil {
		t.Fatalf("Exec after the idle timeout: %v", err)
	}
}

func TestExecsAndLogsRunConcurrentlyOnOneSession(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			dial, _ := sessionServer(t, tr, ServerOptions{})
			s := openSession(t, dial)
			const n = 8
			// Each command waits for all the others to have started: they
			// run at once, or time out.
			dir := t.TempDir()
			script := fmt.Sprintf(`touch %s/$1; while [ $(ls %s | wc -l) -lt %d ]; do sleep 0.01; done; echo "$1"`, dir, dir, n)
			errs := make(chan error, n+1)
			var wg sync.WaitGroup
			for i := range n {
				wg.Go(func() {
					var out bytes.Buffer
					err := s.Exec(callCtx(t), ExecOptions{Command: []string{"sh", "-c", script, "sh", strconv.Itoa(i)}, Stdout: &out})
					if err == nil && out.String() != strconv.Itoa(i)+"\n" {
						err = fmt.Errorf("command %d wrote %q", i, out.String())
					}
					errs <- err
				})
			}
			ctx, cancel := context.WithCancel(callCtx(t))
			var logs syncBuffer
			wg.Go(func() {
				err := s.Logs(ctx, LogOptions{Follow: true}, &logs)
				if !errors.Is(err, context.Canceled) {
					errs <- fmt.Errorf("following the log: %v", err)
				}
			})
			eventually(t, "the log to show every command", func() bool {
				return strings.Count(logs.String(), "exec sh: exit code 0") == n
			})
			cancel()
			wg.Wait()
			close(errs)
			for err := range errs {
				if err != nil {
					t.Error(err)
				}
			}
		})
	}
}

func TestLogsSelectsLinesAsKubeletDoes(t *testing.T) {
	start := time.Date(2026, 6, 2, 13, 0, 0, 123456789, time.UTC)
	clk := clocktesting.NewFakeClock(start)
	j := NewJournal(JournalOptions{Clock: clk})
	dial, _ := sessionServer(t, transports[0], ServerOptions{Journal: j, AgentVersion: "v1"})
	for i := 1; i <= 4; i++ {
		clk.Step(time.Second)
		j.Addf("line %d", i)
	}
	s := openSession(t, dial)
	logs := func(o LogOptions) string {
		t.Helper()
		var b bytes.Buffer
		if err := s.Logs(callCtx(t), o, &b); err != nil {
			t.Fatalf("Logs(%+v): %v", o, err)
		}
		return b.String()
	}
	i64 := func(n int64) *int64 { return &n }
	since := start.Add(3 * time.Second)
	for _, tc := range []struct {
		name string
		o    LogOptions
		want string
	}{
		{"all of it", LogOptions{}, "guest agent v1 started, protocol 1.3\nline 1\nline 2\nline 3\nline 4\nsession opened for user admin\n"},
		{"the last 2 lines", LogOptions{TailLines: i64(2)}, "line 4\nsession opened for user admin\n"},
		{"no lines", LogOptions{TailLines: i64(0)}, ""},
		{"lines since a time, inclusive", LogOptions{SinceTime: &since}, "line 3\nline 4\nsession opened for user admin\n"},
		{"the last line since a time", LogOptions{SinceTime: &since, TailLines: i64(1)}, "session opened for user admin\n"},
		{"10 bytes", LogOptions{LimitBytes: i64(10)}, "guest agen"},
		{"with timestamps", LogOptions{Timestamps: true, SinceTime: &since, TailLines: i64(3), LimitBytes: i64(80)},
			"2026-06-02T13:00:03.123456789Z line 3\n2026-06-02T13:00:04.123456789Z line 4\n2026"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := logs(tc.o); got != tc.want {
				t.Fatalf("got\n%q\nwant\n%q", got, tc.want)
			}
		})
	}
}

func TestFollowingLogsSeesNewLinesUntilCancelled(t *testing.T) {
	dial, j := sessionServer(t, transports[1], ServerOptions{})
	s := openSession(t, dial)
	ctx, cancel := context.WithCancel(callCtx(t))
	defer cancel()
	var out syncBuffer
	tail := int64(1)
	done := make(chan error, 1)
	go func() { done <- s.Logs(ctx, LogOptions{Follow: true, TailLines: &tail}, &out) }()
	eventually(t, "the tail", func() bool { return strings.Contains(out.String(), "session opened") })
	j.Add("a line added later")
	eventually(t, "the later line", func() bool { return strings.Contains(out.String(), "a line added later\n") })
	select {
	case err := <-done:
		t.Fatalf("Logs returned while following: %v", err)
	default:
	}
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Logs: %v, want context.Canceled", err)
		}
	case <-time.After(waitLimit):
		t.Fatal("Logs did not return on cancel")
	}
	if strings.Contains(out.String(), "started") {
		t.Fatalf("a tail of 1 wrote more: %q", out.String())
	}
	// The control: the session goes on after a cancelled follow.
	var b bytes.Buffer
	if err := s.Logs(callCtx(t), LogOptions{TailLines: &tail}, &b); err != nil || b.String() != "a line added later\n" {
		t.Fatalf("Logs after a cancelled follow: %q, %v", b.String(), err)
	}
}

// Opening and closing sessions leaves no goroutine and no file descriptor
// behind, on either side.
func TestSessionsLeakNoGoroutineAndNoFD(t *testing.T) {
	const sessions = 1000
	dial, _ := sessionServer(t, transports[1], ServerOptions{})
	run := func(n int, exec bool) {
		for i := range n {
			conn, err := dial()
			if err != nil {
				t.Fatal(err)
			}
			s, err := NewClient(conn).Session(callCtx(t), "admin")
			if err != nil {
				t.Fatalf("session %d: %v", i, err)
			}
			if exec {
				if err := s.Exec(callCtx(t), ExecOptions{Command: []string{"true"}}); err != nil {
					t.Fatalf("session %d: Exec: %v", i, err)
				}
			}
			if err := s.Close(); err != nil {
				t.Fatalf("session %d: Close: %v", i, err)
			}
		}
	}
	// Warm up: the host key, the runtime's own.
	run(3, true)
	settle := func() (int, int) { return goroutinesAndFDs(t) }
	var baseG, baseFD int
	eventually(t, "the warm-up to settle", func() bool {
		g, fd := settle()
		ok := g == baseG && fd == baseFD
		baseG, baseFD = g, fd
		return ok
	})
	run(sessions, false)
	run(20, true)
	const tolerance = 2
	var g, fd int
	deadline := time.Now().Add(waitLimit)
	for {
		g, fd = settle()
		if g <= baseG+tolerance && fd <= baseFD+tolerance {
			break
		}
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Fatalf("after %d sessions: %d goroutines (from %d), %d fds (from %d)\n%s", sessions, g, baseG, fd, baseFD, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// goroutinesAndFDs counts after a GC: the net package keeps splice pipes
// (two fds each) in a sync.Pool and closes them from a finalizer, so a
// count without one sees pipes nothing holds.
func goroutinesAndFDs(t *testing.T) (int, int) {
	t.Helper()
	runtime.GC()
	return runtime.NumGoroutine(), openFDs(t)
}

func openFDs(t *testing.T) int {
	t.Helper()
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("cannot count file descriptors: %v", err)
	}
	return len(entries)
}
