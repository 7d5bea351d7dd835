package guest

import (
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/crypto/ssh"
)

// newKey is a fresh ed25519 public key as an authorized_keys line.
func newKey(t *testing.T, comment string) string {
	t.Helper()
	pub, _, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	k, err := ssh.NewPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(strings.TrimSpace(string(ssh.MarshalAuthorizedKey(k))) + " " + comment)
}

// homeOf makes every user the test's own, with home as its home.
func homeOf(home string) func(string) (*user.User, error) {
	return func(name string) (*user.User, error) {
		me, err := user.Current()
		if err != nil {
			return nil, err
		}
		return &user.User{Username: name, Uid: me.Uid, Gid: me.Gid, HomeDir: home}, nil
	}
}

func authorizedKeysFile(t *testing.T, home string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(home, ".ssh", "authorized_keys"))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func managed(keys ...string) string {
	return ManagedKeysBegin + "\n" + strings.Join(keys, "\n") + "\n" + ManagedKeysEnd + "\n"
}

func TestAuthorizedKeysDigest(t *testing.T) {
	a, b := "ssh-ed25519 AAAAa one", "ssh-ed25519 AAAAb two"
	if got := AuthorizedKeysDigest(nil); got != "" {
		t.Errorf("digest of none: %q, want empty", got)
	}
	if got := AuthorizedKeysDigest([]string{}); got != "" {
		t.Errorf("digest of an empty set: %q, want empty", got)
	}
	// sha256 of "ssh-ed25519 AAAAa one\nssh-ed25519 AAAAb two".
	const want = "c15c1e4ad80993002698328799558cec40fc03174555ce43fba5a33ee3232019"
	if got := AuthorizedKeysDigest([]string{" " + b + "\n", a}); got != want {
		t.Fatalf("digest %q, want %q: sorted, trimmed, joined by newlines", got, want)
	}
	if AuthorizedKeysDigest([]string{a}) == want {
		t.Fatal("two sets have one digest")
	}
}

func TestValidateAuthorizedKeys(t *testing.T) {
	good := newKey(t, "alice@laptop")
	keys, err := ValidateAuthorizedKeys([]string{"  " + good + "\n", newKey(t, "")})
	if err != nil || len(keys) != 2 || keys[0] != good {
		t.Fatalf("the positive control: %q, %v", keys, err)
	}
	if keys, err := ValidateAuthorizedKeys(nil); err != nil || len(keys) != 0 {
		t.Fatalf("none: %q, %v", keys, err)
	}
	for _, tc := range []struct {
		name string
		bad  string
		says string
	}{
		{"garbage", "not a key at all", "not an OpenSSH public key"},
		{"a broken key", "ssh-ed25519 AAAAnotbase64!!", "not an OpenSSH public key"},
		{"options", `command="/bin/true" ` + good, "options"},
		{"restrict", "restrict " + good, "options"},
		{"a line break", good + "\n" + good, "line break"},
		{"an empty line", "  ", "empty"},
		{"a comment", "# " + good, "comment"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ValidateAuthorizedKeys([]string{good, good, tc.bad})
			if !errors.Is(err, ErrInvalidAuthorizedKeys) || !strings.Contains(err.Error(), "key 2 ") || !strings.Contains(err.Error(), tc.says) {
				t.Fatalf("got %v, want ErrInvalidAuthorizedKeys naming key 2 and saying %q", err, tc.says)
			}
			if strings.Contains(err.Error(), "AAAA") {
				t.Fatalf("the error quotes a key: %v", err)
			}
		})
	}
}

func TestUnixKeyInstallerKeepsForeignLinesAndIsIdempotent(t *testing.T) {
	home := t.TempDir()
	k := &UnixKeyInstaller{LookupUser: homeOf(home)}
	k1, k2, k3 := newKey(t, "k1"), newKey(t, "k2"), newKey(t, "k3")
	mine := newKey(t, "the user's own")
	path := filepath.Join(home, ".ssh", "authorized_keys")
	if err := os.Mkdir(filepath.Join(home, ".ssh"), 0o755); err != nil {
		t.Fatal(err)
	}
	foreign := "# my keys\n" + mine + "\n\n" + `from="10.0.0.0/8" ` + mine
	if err := os.WriteFile(path, []byte(foreign), 0o644); err != nil {
		t.Fatal(err)
	}

	if err := k.Install("admin", []string{k1, k2}); err != nil {
		t.Fatalf("Install: %v", err)
	}
	want := foreign + "\n" + managed(k1, k2)
	if got := authorizedKeysFile(t, home); got != want {
		t.Fatalf("after an install:\n%s\nwant\n%s", got, want)
	}
	if got := k.Installed("admin"); got != AuthorizedKeysDigest([]string{k2, k1}) {
		t.Fatalf("Installed: %q", got)
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("the file's mode: %v, %v, want 0600", fi.Mode(), err)
	}
	before := fi.Sys().(*syscall.Stat_t).Ino

	// The same again changes nothing: not even the file.
	if err := k.Install("admin", []string{k1, k2}); err != nil {
		t.Fatal(err)
	}
	fi, _ = os.Stat(path)
	if authorizedKeysFile(t, home) != want || fi.Sys().(*syscall.Stat_t).Ino != before {
		t.Fatal("installing the same keys again rewrote the file")
	}

	// Lines the user adds after the block stay after it; the block keeps
	// its place.
	f, _ := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	f.WriteString("# added later\n")
	f.Close()
	if err := k.Install("admin", []string{k3}); err != nil {
		t.Fatal(err)
	}
	if got, want := authorizedKeysFile(t, home), foreign+"\n"+managed(k3)+"# added later\n"; got != want {
		t.Fatalf("after a replace:\n%s\nwant\n%s", got, want)
	}

	// None removes the block, and only it.
	if err := k.Install("admin", nil); err != nil {
		t.Fatal(err)
	}
	if got, want := authorizedKeysFile(t, home), foreign+"\n# added later\n"; got != want {
		t.Fatalf("after a removal:\n%s\nwant\n%s", got, want)
	}
	if got := k.Installed("admin"); got != "" {
		t.Fatalf("Installed after a removal: %q", got)
	}
}

func TestUnixKeyInstallerMakesSSHDirAndFile(t *testing.T) {
	home := t.TempDir()
	k := &UnixKeyInstaller{LookupUser: homeOf(home)}
	// Removing keys from a user with none makes nothing.
	if err := k.Install("admin", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(home, ".ssh")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a removal made ~/.ssh: %v", err)
	}
	// A umask that would leave neither writable: the modes are set, not asked.
	old := syscall.Umask(0o277)
	defer syscall.Umask(old)
	key := newKey(t, "")
	if err := k.Install("admin", []string{key}); err != nil {
		t.Fatal(err)
	}
	dir, err := os.Stat(filepath.Join(home, ".ssh"))
	if err != nil || !dir.IsDir() || dir.Mode().Perm() != 0o700 {
		t.Fatalf("~/.ssh: %v, %v, want a 0700 directory", dir.Mode(), err)
	}
	file, err := os.Stat(filepath.Join(home, ".ssh", "authorized_keys"))
	if err != nil || file.Mode().Perm() != 0o600 {
		t.Fatalf("authorized_keys: %v, %v, want 0600", file.Mode(), err)
	}
	me, _ := user.Current()
	if st := file.Sys().(*syscall.Stat_t); me.Uid != strconv.FormatUint(uint64(st.Uid), 10) {
		t.Fatalf("authorized_keys is uid %d's, want the user's %s", st.Uid, me.Uid)
	}
	if got := authorizedKeysFile(t, home); got != managed(key) {
		t.Fatalf("a new file:\n%s", got)
	}
	entries, _ := os.ReadDir(filepath.Join(home, ".ssh"))
	if len(entries) != 1 {
		t.Fatalf("~/.ssh holds %d files, want authorized_keys alone (no temporary file left)", len(entries))
	}
}

// What the installer must not touch, it refuses, and says why; the file
// stays as it was.
func TestUnixKeyInstallerRefusesWhatItMustNotTouch(t *testing.T) {
	key := newKey(t, "")
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T, home string)
		says  string
	}{
		{"a BEGIN without its END", func(t *testing.T, home string) {
			write(t, filepath.Join(home, ".ssh", "authorized_keys"), ManagedKeysBegin+"\n"+key+"\n# mine\n")
		}, "without its"},
		{"an END without its BEGIN", func(t *testing.T, home string) {
			write(t, filepath.Join(home, ".ssh", "authorized_keys"), ManagedKeysEnd+"\n")
		}, "without its"},
		{"two blocks", func(t *testing.T, home string) {
			write(t, filepath.Join(home, ".ssh", "authorized_keys"), managed(key)+managed(key))
		}, "two"},
		{"a symlinked file", func(t *testing.T, home string) {
			write(t, filepath.Join(home, "secret"), "root's secret\n")
			if err := os.Symlink(filepath.Join(home, "secret"), filepath.Join(home, ".ssh", "authorized_keys")); err != nil {
				t.Fatal(err)
			}
		}, "symbolic link"},
		{"a symlinked ~/.ssh", func(t *testing.T, home string) {
			os.Remove(filepath.Join(home, ".ssh"))
			if err := os.Mkdir(filepath.Join(home, "elsewhere"), 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(filepath.Join(home, "elsewhere"), filepath.Join(home, ".ssh")); err != nil {
				t.Fatal(err)
			}
		}, "symbolic link"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			home := t.TempDir()
			if err := os.Mkdir(filepath.Join(home, ".ssh"), 0o700); err != nil {
				t.Fatal(err)
			}
			tc.setup(t, home)
			before := snapshot(t, home)
			k := &UnixKeyInstaller{LookupUser: homeOf(home)}
			err := k.Install("admin", []string{key})
			if err == nil || !strings.Contains(err.Error(), tc.says) {
				t.Fatalf("Install: %v, want a refusal saying %q", err, tc.says)
			}
			if after := snapshot(t, home); after != before {
				t.Fatalf("a refused install changed the home:\n%s\nwas\n%s", after, before)
			}
			if got := k.Installed("admin"); got != "" {
				t.Fatalf("Installed: %q, want none", got)
			}
		})
	}
}

func write(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

// snapshot lists the files under dir with their contents.
func snapshot(t *testing.T, dir string) string {
	t.Helper()
	var b strings.Builder
	filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		b.WriteString(p + " " + fi.Mode().String())
		if fi.Mode().IsRegular() {
			c, _ := os.ReadFile(p)
			b.WriteString(" " + string(c))
		}
		b.WriteString("\n")
		return nil
	})
	return b.String()
}

// A session sets the user's keys through the real protocol: each set
// replaces the last, none removes them, and every Report then tells the
// digest of those installed, a restarted guest agent too.
func TestSetAuthorizedKeysReplacesTheSet(t *testing.T) {
	home := t.TempDir()
	keys := &UnixKeyInstaller{LookupUser: homeOf(home)}
	dial, j := sessionServer(t, transports[1], ServerOptions{Keys: keys})
	s := openSession(t, dial)
	c := dialClient(t, dial)
	report := func() string {
		t.Helper()
		r, err := c.Report(callCtx(t))
		if err != nil {
			t.Fatalf("Report: %v", err)
		}
		return r.AuthorizedKeysDigest
	}
	if got := report(); got != "" {
		t.Fatalf("a guest with no keys reports %q", got)
	}
	k1, k2, k3 := newKey(t, "k1"), newKey(t, "k2"), newKey(t, "k3")

	if err := s.SetAuthorizedKeys(callCtx(t), []string{k1, k2}); err != nil {
		t.Fatalf("SetAuthorizedKeys: %v", err)
	}
	if got := authorizedKeysFile(t, home); got != managed(k1, k2) {
		t.Fatalf("installed:\n%s", got)
	}
	if got, want := report(), AuthorizedKeysDigest([]string{k2, k1}); got != want {
		t.Fatalf("Report's digest: %q, want %q", got, want)
	}

	if err := s.SetAuthorizedKeys(callCtx(t), []string{k3}); err != nil {
		t.Fatal(err)
	}
	if got := authorizedKeysFile(t, home); got != managed(k3) {
		t.Fatalf("after a replace:\n%s", got)
	}
	if got, want := report(), AuthorizedKeysDigest([]string{k3}); got != want {
		t.Fatalf("Report's digest after a replace: %q, want %q", got, want)
	}

	// A restarted guest agent reports the keys it still has.
	restarted, _ := sessionServer(t, transports[0], ServerOptions{Keys: &UnixKeyInstaller{LookupUser: homeOf(home)}})
	if r, err := dialClient(t, restarted).Report(callCtx(t)); err != nil || r.AuthorizedKeysDigest != AuthorizedKeysDigest([]string{k3}) {
		t.Fatalf("a restarted guest reports %+v, %v; want the digest of the keys installed", r, err)
	}

	if err := s.SetAuthorizedKeys(callCtx(t), nil); err != nil {
		t.Fatal(err)
	}
	if got := authorizedKeysFile(t, home); got != "" {
		t.Fatalf("after a removal:\n%s", got)
	}
	if got := report(); got != "" {
		t.Fatalf("Report's digest after a removal: %q", got)
	}
	// A set too large for one SSH packet is refused before it is sent,
	// and the session goes on.
	huge := make([]string, 2000)
	for i := range huge {
		huge[i] = k1
	}
	if err := s.SetAuthorizedKeys(callCtx(t), huge); !errors.Is(err, ErrInvalidAuthorizedKeys) || !strings.Contains(err.Error(), "2000 keys") {
		t.Fatalf("SetAuthorizedKeys of 2000 keys: %v, want ErrInvalidAuthorizedKeys", err)
	}
	if err := s.SetAuthorizedKeys(callCtx(t), []string{k3}); err != nil {
		t.Fatalf("SetAuthorizedKeys after a huge set: %v", err)
	}

	journal := streamAll(t, j)
	for _, want := range []string{"authorized keys of user admin: 2 installed", "authorized keys of user admin: 1 installed", "authorized keys of user admin: removed"} {
		if !strings.Contains(journal, want) {
			t.Errorf("the journal does not say %q:\n%s", want, journal)
		}
	}
	if strings.Contains(journal, "AAAA") {
		t.Errorf("the journal quotes a key:\n%s", journal)
	}
}

// A set with one bad key is refused whole, naming the key's index, and
// the keys installed before stay.
func TestSetAuthorizedKeysRefusesABadSetWhole(t *testing.T) {
	home := t.TempDir()
	dial, j := sessionServer(t, transports[0], ServerOptions{Keys: &UnixKeyInstaller{LookupUser: homeOf(home)}})
	s := openSession(t, dial)
	k1, k2 := newKey(t, "k1"), newKey(t, "k2")
	// The positive control.
	if err := s.SetAuthorizedKeys(callCtx(t), []string{k1}); err != nil {
		t.Fatalf("SetAuthorizedKeys: %v", err)
	}
	for _, tc := range []struct {
		name string
		keys []string
		says string
	}{
		{"garbage", []string{k2, "not a key"}, "key 1 "},
		{"options", []string{`command="id" ` + k2}, "key 0 "},
		{"a line break", []string{k2, k2, k1 + "\n" + k2}, "key 2 "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := s.SetAuthorizedKeys(callCtx(t), tc.keys)
			if !errors.Is(err, ErrInvalidAuthorizedKeys) || !errors.Is(err, ErrRemote) || !strings.Contains(err.Error(), tc.says) {
				t.Fatalf("SetAuthorizedKeys: %v, want ErrInvalidAuthorizedKeys saying %q", err, tc.says)
			}
			if got := authorizedKeysFile(t, home); got != managed(k1) {
				t.Fatalf("a refused set changed the file:\n%s", got)
			}
		})
	}
	if !strings.Contains(streamAll(t, j), "authorized keys of user admin: refused") {
		t.Errorf("the journal does not note the refusal:\n%s", streamAll(t, j))
	}
	// The session goes on.
	if err := s.SetAuthorizedKeys(callCtx(t), []string{k2}); err != nil {
		t.Fatalf("SetAuthorizedKeys after refusals: %v", err)
	}
}

type failingInstaller struct{}

func (failingInstaller) Install(string, []string) error { return errors.New("the disk is full") }
func (failingInstaller) Installed(string) string        { return "" }

func TestSetAuthorizedKeysOnAGuestThatCannot(t *testing.T) {
	key := newKey(t, "")
	dial, _, _ := startServer(t, transports[0], &stubReporter{report: testReport}, ServerOptions{})
	s := openSession(t, dial)
	err := s.SetAuthorizedKeys(callCtx(t), []string{key})
	if !errors.Is(err, ErrRemote) || errors.Is(err, ErrInvalidAuthorizedKeys) || !strings.Contains(err.Error(), "does not manage SSH keys") {
		t.Fatalf("SetAuthorizedKeys on a guest without a KeyInstaller: %v", err)
	}
	if r, err := dialClient(t, dial).Report(callCtx(t)); err != nil || r.AuthorizedKeysDigest != "" {
		t.Fatalf("its Report: %+v, %v", r, err)
	}

	dial, _, _ = startServer(t, transports[0], &stubReporter{report: testReport}, ServerOptions{Keys: failingInstaller{}})
	s = openSession(t, dial)
	err = s.SetAuthorizedKeys(callCtx(t), []string{key})
	if !errors.Is(err, ErrRemote) || errors.Is(err, ErrInvalidAuthorizedKeys) || !strings.Contains(err.Error(), "the disk is full") {
		t.Fatalf("SetAuthorizedKeys on a guest whose install fails: %v", err)
	}
}
