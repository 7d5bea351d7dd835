//go:build unix

package guest

import (
	"context"
	"errors"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// runDirect starts argv with e and waits for it.
func runDirect(t *testing.T, e *UnixExecutor, spec ProcessSpec) (string, ExitStatus) {
	t.Helper()
	// One writer for both streams must take concurrent writes.
	var out syncBuffer
	spec.Stdout, spec.Stderr = &out, &out
	p, err := e.Start(context.Background(), spec)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	p.Stdin().Close()
	st, err := p.Wait()
	if err != nil {
		t.Fatalf("Wait: %v", err)
	}
	return out.String(), st
}

func TestUnixExecutorRunsACommandAsALoginWould(t *testing.T) {
	me, err := user.Current()
	if err != nil {
		t.Skip(err)
	}
	home := t.TempDir()
	bin := filepath.Join(home, "bin")
	if err := os.Mkdir(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(bin, "hello"), []byte("#!/bin/sh\necho hello from bin\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	e := &UnixExecutor{Home: home, PathPrefix: []string{bin}}
	out, st := runDirect(t, e, ProcessSpec{
		Argv: []string{"sh", "-c", `pwd; echo "$HOME|$USER|$LOGNAME|$PATH|$FOO"; test -n "$SHELL" && hello`},
		User: me.Username, Env: []string{"FOO=bar"},
	})
	want := home + "\n" + home + "|" + me.Username + "|" + me.Username + "|" + bin + ":" + DefaultPath + "|bar\nhello from bin\n"
	if st != (ExitStatus{}) || out != want {
		t.Fatalf("got %q (%+v), want %q", out, st, want)
	}
	// Relative to the home, as a shell in it would.
	if out, st := runDirect(t, e, ProcessSpec{Argv: []string{"./bin/hello"}, User: me.Username}); st.Code != 0 || out != "hello from bin\n" {
		t.Fatalf("a relative path: %q, %+v", out, st)
	}
	if _, err := e.Start(context.Background(), ProcessSpec{Argv: []string{"sh"}, User: "no-such-user-42"}); err == nil || !strings.Contains(err.Error(), "no-such-user-42") {
		t.Fatalf("an unknown user: %v", err)
	}
	if _, err := e.Start(context.Background(), ProcessSpec{Argv: []string{"bin"}, User: me.Username}); !errors.Is(err, ErrCommandNotFound) {
		t.Fatalf("a directory in PATH's stead: %v, want ErrCommandNotFound", err)
	}
}

// Running as root, the agent switches to the login user; as anyone else
// it refuses to run another user's commands.
func TestUnixExecutorSwitchesUsersOnlyAsRoot(t *testing.T) {
	nobody, err := user.Lookup("nobody")
	if err != nil {
		t.Skip("no user nobody")
	}
	if os.Geteuid() != 0 {
		_, err := credential(nobody)
		if err == nil || !strings.Contains(err.Error(), "not root") {
			t.Fatalf("a switch without root: %v", err)
		}
		return
	}
	// nobody's home does not exist: one it may enter.
	home, err := os.MkdirTemp("", "nobody")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(home)
	if err := os.Chmod(home, 0o755); err != nil {
		t.Fatal(err)
	}
	e := &UnixExecutor{Home: home}
	out, st := runDirect(t, e, ProcessSpec{Argv: []string{"id", "-u"}, User: "nobody"})
	if st.Code != 0 || strings.TrimSpace(out) != nobody.Uid {
		t.Fatalf("id -u as nobody: %q, %+v", out, st)
	}
	// The control: as root itself, no switch.
	if c, err := credential(&user.User{Username: "root", Uid: "0", Gid: "0"}); c != nil || err != nil {
		t.Fatalf("root to root: %+v, %v", c, err)
	}
	if c, err := credential(nobody); err != nil || strconv.Itoa(int(c.Uid)) != nobody.Uid {
		t.Fatalf("root to nobody: %+v, %v", c, err)
	}
}
