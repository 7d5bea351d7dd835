package macos

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/boualleiguie/macrack-operator/internal/agent/host"
)

// Stand-ins for the macOS commands the scripts run, as bash scripts on
// PATH: each logs its call to $CALLS; dscl keeps a directory of records
// under $DSCL, as the local directory node would.
var fakes = map[string]string{
	"dscl": `
[ "$1" = . ] || { echo "dscl: node $1" >&2; exit 2; }
op=$2 rec="$DSCL$3"
case $op in
-list)
	for r in "$rec"/*; do [ -f "$r/$4" ] && echo "$(basename "$r") $(cat "$r/$4")"; done; exit 0 ;;
-read)
	[ -d "$rec" ] || exit 56
	if [ -n "${4:-}" ]; then [ -f "$rec/$4" ] || exit 181; echo "$4: $(cat "$rec/$4")"; fi; exit 0 ;;
-create)
	echo "dscl $*" >>"$CALLS"; mkdir -p "$rec"; [ -n "${4:-}" ] && printf '%s' "$5" >"$rec/$4"; exit 0 ;;
esac
echo "dscl: $op" >&2; exit 2`,
	"chown":     `echo "chown $*" >>"$CALLS"`,
	"plutil":    `echo "plutil $*" >>"$CALLS"; [ -f "$2" ]`,
	"launchctl": `echo "launchctl $*" >>"$CALLS"; [ "$1" != bootstrap ] || [ -z "${FAIL_BOOTSTRAP:-}" ]`,
	"pkgbuild": `echo "pkgbuild $*" >>"$CALLS"
while [ $# -gt 1 ]; do [ "$1" = --root ] && (cd "$2" && find . -printf '%M %p\n' | sort) >"$STAGED"; shift; done
touch "$1"`,
	"productbuild": `echo "productbuild $*" >>"$CALLS"; for last; do :; done; touch "$last"`,
}

type sandbox struct {
	dir, calls, dscl, staged string
	env                      []string
}

func newSandbox(t *testing.T) *sandbox {
	t.Helper()
	dir := t.TempDir()
	s := &sandbox{dir: dir, calls: filepath.Join(dir, "calls"), dscl: filepath.Join(dir, "dscl"), staged: filepath.Join(dir, "staged")}
	bin := filepath.Join(dir, "bin")
	for _, d := range []string{bin, s.dscl + "/Users/root", s.dscl + "/Users/_www", s.dscl + "/Groups/wheel", s.dscl + "/Users/someone"} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// Taken ids: 400 by a user, so the agent's group and user skip it.
	for rec, id := range map[string]string{"/Users/root/UniqueID": "0", "/Users/_www/UniqueID": "70", "/Groups/wheel/PrimaryGroupID": "0", "/Users/someone/UniqueID": "400"} {
		if err := os.WriteFile(s.dscl+rec, []byte(id), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for name, body := range fakes {
		if err := os.WriteFile(filepath.Join(bin, name), []byte("#!/bin/bash\n"+body+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	s.env = append(os.Environ(), "PATH="+bin+":"+os.Getenv("PATH"), "CALLS="+s.calls, "DSCL="+s.dscl, "STAGED="+s.staged)
	return s
}

func (s *sandbox) run(t *testing.T, extraEnv []string, script string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command("bash", append([]string{script}, args...)...)
	cmd.Env = append(append([]string(nil), s.env...), extraEnv...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func (s *sandbox) callLines(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(s.calls)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimSpace(string(b)), "\n")
}

func (s *sandbox) record(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(s.dscl + path)
	if err != nil {
		t.Fatalf("no %s in the directory: %v", path, err)
	}
	return string(b)
}

// installRoot is the target volume as Installer leaves it before the
// postinstall: the payload in place.
func installRoot(t *testing.T, s *sandbox) string {
	t.Helper()
	root := filepath.Join(s.dir, "volume")
	for _, label := range []string{"io.macrack.agent", host.RebootDaemonLabel} {
		dst := filepath.Join(root, "Library/LaunchDaemons", label+".plist")
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(label + ".plist")
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(dst, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func TestThePostinstallCreatesTheAgentsUserAndDirectoriesThenLoadsTheDaemons(t *testing.T) {
	s := newSandbox(t)
	root := installRoot(t, s)
	d := readAgentDaemon(t)
	// Installer's arguments: the package, the install location, the target volume.
	out, err := s.run(t, nil, "scripts/postinstall", "/tmp/macrack.pkg", "/", root)
	if err != nil {
		t.Fatalf("postinstall: %v\n%s", err, out)
	}

	// The group and the user the daemon names, hidden, without a shell or a password.
	if gid := s.record(t, "/Groups/"+d.group+"/PrimaryGroupID"); gid != "401" {
		t.Errorf("group id %s, want 401, the first free one in 400-499", gid)
	}
	for key, want := range map[string]string{"UniqueID": "402", "PrimaryGroupID": "401", "UserShell": "/usr/bin/false",
		"NFSHomeDirectory": "/var/empty", "Password": "*", "IsHidden": "1"} {
		if got := s.record(t, "/Users/"+d.user+"/"+key); got != want {
			t.Errorf("user %s: %s %q, want %q", d.user, key, got, want)
		}
	}

	// The directories, with the modes the agent and the reboot helper need.
	calls := s.callLines(t)
	for _, want := range []struct {
		path, owner string
		mode        os.FileMode
	}{
		{"/Library/MacRack", "root:wheel", 0o755},
		{"/Library/MacRack/bin", "root:wheel", 0o755},
		{host.RebootSocketDir, "root:" + d.group, 0o750},
		{d.stateDir, d.user + ":" + d.group, 0o700},
		{d.logDir, d.user + ":" + d.group, 0o750},
	} {
		info, err := os.Stat(root + want.path)
		if err != nil {
			t.Errorf("%s: %v", want.path, err)
			continue
		}
		if got := info.Mode() & os.ModePerm; !info.IsDir() || got != want.mode {
			t.Errorf("%s: mode %v, want a directory %v", want.path, got, want.mode)
		}
		if chown := fmt.Sprintf("chown %s %s%s", want.owner, root, want.path); !slices.Contains(calls, chown) {
			t.Errorf("no %q among %q", chown, calls)
		}
	}

	// Then each daemon: root's, linted, unloaded if it was loaded, loaded;
	// the reboot helper first, so the agent finds it.
	var launchd []string
	for _, c := range calls {
		if strings.HasPrefix(c, "launchctl ") {
			launchd = append(launchd, c)
		}
	}
	reboot := root + host.RebootDaemonPlistPath
	agent := root + "/Library/LaunchDaemons/io.macrack.agent.plist"
	want := []string{
		"launchctl bootout system/" + host.RebootDaemonLabel, "launchctl bootstrap system " + reboot,
		"launchctl bootout system/io.macrack.agent", "launchctl bootstrap system " + agent,
	}
	if !reflect.DeepEqual(launchd, want) {
		t.Errorf("launchctl calls %q, want %q", launchd, want)
	}
	for _, p := range []string{reboot, agent} {
		if info, err := os.Stat(p); err != nil || info.Mode().Perm() != 0o644 {
			t.Errorf("%s: %v, %v: launchd refuses a daemon others may write", p, info.Mode(), err)
		}
		if !slices.Contains(calls, "chown root:wheel "+p) || !slices.Contains(calls, "plutil -lint "+p) {
			t.Errorf("%s is not made root's and linted: %q", p, calls)
		}
	}

	// Again, as an upgrade runs it: the user and group stay as they are.
	if err := os.Remove(s.calls); err != nil {
		t.Fatal(err)
	}
	if out, err := s.run(t, nil, "scripts/postinstall", "/tmp/macrack.pkg", "/", root); err != nil {
		t.Fatalf("postinstall again: %v\n%s", err, out)
	}
	for _, c := range s.callLines(t) {
		if strings.HasPrefix(c, "dscl ") {
			t.Errorf("an upgrade changed the directory: %s", c)
		}
	}
}

func TestThePostinstallFailsWhenADaemonDoesNotLoad(t *testing.T) {
	s := newSandbox(t)
	root := installRoot(t, s)
	out, err := s.run(t, []string{"FAIL_BOOTSTRAP=1"}, "scripts/postinstall", "/tmp/macrack.pkg", "/", root)
	if err == nil {
		t.Fatalf("postinstall succeeded with launchctl bootstrap failing:\n%s", out)
	}
	if strings.Contains(out, "loaded;") {
		t.Errorf("postinstall reports success: %s", out)
	}
}

func TestBuildPkgStagesTheSignedBinariesAndTheDaemons(t *testing.T) {
	s := newSandbox(t)
	bin := filepath.Join(s.dir, "signed")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(s.dir, "macrack.pkg")

	// The control: without vm-helper there is no package.
	if err := os.WriteFile(filepath.Join(bin, "agent"), []byte("agent"), 0o755); err != nil {
		t.Fatal(err)
	}
	if msg, err := s.run(t, nil, "build-pkg.sh", bin, "1.2.3", out); err == nil || !strings.Contains(msg, "vm-helper is missing") {
		t.Fatalf("build-pkg.sh without vm-helper: %v: %s", err, msg)
	}
	if err := os.WriteFile(filepath.Join(bin, "vm-helper"), []byte("helper"), 0o700); err != nil {
		t.Fatal(err)
	}
	// Nor without the custom executor's stage binary.
	if msg, err := s.run(t, nil, "build-pkg.sh", bin, "1.2.3", out); err == nil || !strings.Contains(msg, "macrack-runner-stage is missing") {
		t.Fatalf("build-pkg.sh without macrack-runner-stage: %v: %s", err, msg)
	}
	if err := os.WriteFile(filepath.Join(bin, "macrack-runner-stage"), []byte("stage"), 0o700); err != nil {
		t.Fatal(err)
	}
	msg, err := s.run(t, nil, "build-pkg.sh", bin, "1.2.3", out, "Developer ID Installer: Example Corp (TEAMID)")
	if err != nil {
		t.Fatalf("build-pkg.sh: %v: %s", err, msg)
	}
	staged, err := os.ReadFile(s.staged)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"-rw-r--r-- ./Library/LaunchDaemons/io.macrack.agent.plist",
		"-rw-r--r-- ./Library/LaunchDaemons/io.macrack.reboot.plist",
		"-rwxr-xr-x ./Library/MacRack/bin/agent",
		"-rwxr-xr-x ./Library/MacRack/bin/macrack-runner-stage",
		"-rwxr-xr-x ./Library/MacRack/bin/vm-helper",
	}
	var files []string
	for _, l := range strings.Split(strings.TrimSpace(string(staged)), "\n") {
		if !strings.HasPrefix(l, "d") {
			files = append(files, l)
		}
	}
	if !reflect.DeepEqual(files, want) {
		t.Errorf("the package holds %q, want %q", files, want)
	}
	calls := s.callLines(t)
	if len(calls) != 2 || !strings.Contains(calls[0], "--ownership recommended") ||
		!strings.Contains(calls[0], "--identifier io.macrack.agent --version 1.2.3") || !strings.Contains(calls[0], "--scripts") {
		t.Errorf("pkgbuild: %q", calls)
	}
	if !strings.Contains(calls[1], "--sign Developer ID Installer: Example Corp (TEAMID) "+out) {
		t.Errorf("productbuild: %q", calls[1])
	}
	if _, err := os.Stat(out); err != nil {
		t.Errorf("no package: %v", err)
	}
}
