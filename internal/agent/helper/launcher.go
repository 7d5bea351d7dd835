package helper

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"golang.org/x/sys/unix"

	"github.com/boualleiguie/macrack-operator/internal/agent/vmspec"
)

// Launcher starts one helper per instance and finds the ones running.
type Launcher interface {
	// Launch starts the helper of the instance with spec, unless it runs
	// already, and returns its socket once it serves. It does not start the
	// VM: the agent does, through a Client, and so sees a start's error.
	Launch(ctx context.Context, instanceUID string, spec vmspec.VMSpec) (socketPath string, err error)
	// Running maps the UID of each instance whose helper runs to its
	// socket; an agent calls it after a restart to reattach. Files left by
	// helpers that died are removed.
	Running() (map[string]string, error)
	// Remove ends the instance's helper, stopping its VM, and removes its
	// files. Removing a helper that does not run only removes its files.
	Remove(ctx context.Context, instanceUID string) error
}

// Suffixes of a helper's files in the launcher's directory, after the UID.
const (
	socketSuffix = ".sock"
	pidSuffix    = ".pid"
	specSuffix   = ".spec.json"
	logSuffix    = ".log"
)

// uidPattern keeps a UID safe as a file name; Kubernetes UIDs are UUIDs.
var uidPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$`)

// files are the helpers' files in one directory: <uid>.sock, the socket;
// <uid>.pid, written by the helper itself; <uid>.spec.json, its spec;
// <uid>.log, its output.
type files struct {
	dir string
	log logr.Logger
}

func (f files) path(uid, suffix string) string { return filepath.Join(f.dir, uid+suffix) }

// check validates uid and spec for a launch.
func (f files) check(uid string, spec vmspec.VMSpec) error {
	if !uidPattern.MatchString(uid) {
		return fmt.Errorf("%w: %q", ErrInvalidUID, uid)
	}
	if spec.UID != uid {
		return fmt.Errorf("%w: spec is for instance %q, not %q", ErrSpecMismatch, spec.UID, uid)
	}
	if err := spec.Validate(); err != nil {
		return fmt.Errorf("launching helper of %s: %w", uid, err)
	}
	if sock := f.path(uid, socketSuffix); len(sock) > maxSocketPath {
		return fmt.Errorf("%w: %q is %d bytes, the limit is %d", ErrSocketPathTooLong, sock, len(sock), maxSocketPath)
	}
	return nil
}

// running lists the helpers whose process lives and answers as itself on
// its socket, or is busy: takes the connection but answers late, as on a
// loaded host. It removes the files of those whose process is gone. A live
// process with no socket to answer on (still starting, or a recycled pid) is
// left out but keeps its files.
func (f files) running() (map[string]string, error) {
	entries, err := os.ReadDir(f.dir)
	if err != nil {
		return nil, fmt.Errorf("listing helpers in %s: %w", f.dir, err)
	}
	out := map[string]string{}
	for _, e := range entries {
		uid, ok := strings.CutSuffix(e.Name(), pidSuffix)
		if !ok || !uidPattern.MatchString(uid) {
			continue
		}
		pid, err := f.pid(uid)
		if err != nil {
			return nil, err
		}
		if !processAlive(pid) {
			f.log.Info("Removing files of a dead helper", "instanceUID", uid, "pid", pid)
			f.cleanup(uid)
			continue
		}
		// A busy helper counts: it may be running its VM, and a caller
		// that stops or counts VMs must not miss it.
		sock := f.path(uid, socketSuffix)
		if ok, busy := f.probe(sock, uid, pid); ok || busy {
			out[uid] = sock
		}
	}
	return out, nil
}

// answerTimeout bounds a helper's hello when the launcher checks it.
const answerTimeout = 2 * time.Second

// answers reports whether the helper at sock is uid's, in process pid.
func (f files) answers(sock, uid string, pid int) bool {
	ok, _ := f.probe(sock, uid, pid)
	return ok
}

// probe reports whether the helper at sock is uid's, in process pid, and,
// when it is not known to be, whether it is busy: the socket took the
// connection but no hello came back in time. A busy helper may well be
// uid's, under load.
func (f files) probe(sock, uid string, pid int) (ok, busy bool) {
	ctx, cancel := context.WithTimeout(context.Background(), answerTimeout)
	defer cancel()
	c, err := Dial(ctx, sock)
	if err != nil {
		return false, errors.Is(err, context.DeadlineExceeded)
	}
	defer c.Close()
	h := c.Hello()
	return h.InstanceUID == uid && h.PID == pid, false
}

// pid reads uid's pid file; a missing or garbled one reads as pid 0, dead.
func (f files) pid(uid string) (int, error) {
	b, err := os.ReadFile(f.path(uid, pidSuffix))
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("reading pid of helper %s: %w", uid, err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return 0, nil
	}
	return pid, nil
}

// cleanup removes uid's socket, pid and spec files; the log stays until
// Remove, for the post-mortem of a helper that died.
func (f files) cleanup(uid string) {
	for _, s := range []string{socketSuffix, pidSuffix, specSuffix} {
		if err := os.Remove(f.path(uid, s)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			f.log.Error(err, "Removing helper file failed", "instanceUID", uid)
		}
	}
}

// logTail is the end of uid's log, to explain a helper that died.
func (f files) logTail(uid string) string {
	b, err := os.ReadFile(f.path(uid, logSuffix))
	if err != nil {
		return ""
	}
	const max = 2048
	if len(b) > max {
		b = b[len(b)-max:]
	}
	return strings.TrimSpace(string(b))
}

// waitReady waits until the helper at sock answers, its process exits
// (exited yields), or ctx ends.
func (f files) waitReady(ctx context.Context, uid string, exited <-chan error) error {
	sock := f.path(uid, socketSuffix)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		// Ready once Running would list it: pid file written, socket answering.
		if pid, err := f.pid(uid); err == nil && processAlive(pid) && f.answers(sock, uid, pid) {
			return nil
		}
		select {
		case err := <-exited:
			return fmt.Errorf("%w: instance %s: %v; log: %s", ErrHelperExited, uid, err, f.logTail(uid))
		case <-ctx.Done():
			return fmt.Errorf("waiting for helper of %s: %w", uid, ctx.Err())
		case <-tick.C:
		}
	}
}

// waitGone waits until pid is gone or ctx ends.
func waitGone(ctx context.Context, pid int) error {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for processAlive(pid) {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
	return nil
}

// processAlive reports whether pid runs; EPERM means it runs as another user.
func processAlive(pid int) bool {
	if pid <= 0 {
		return false
	}
	err := unix.Kill(pid, 0)
	return err == nil || errors.Is(err, unix.EPERM)
}

// existing returns uid's socket if its helper runs already, with spec; a
// helper running another spec is an error.
func (f files) existing(uid string, spec vmspec.VMSpec) (string, bool, error) {
	pid, err := f.pid(uid)
	if err != nil {
		return "", false, err
	}
	sock := f.path(uid, socketSuffix)
	if !processAlive(pid) {
		return "", false, nil
	}
	ok, busy := f.probe(sock, uid, pid)
	if busy {
		return "", false, fmt.Errorf("%w: the helper of %s (pid %d) did not answer within %s", ErrHelperBusy, uid, pid, answerTimeout)
	}
	if !ok {
		return "", false, nil
	}
	running, err := f.readSpec(uid)
	if err != nil {
		return "", false, err
	}
	if !sameSpec(running, spec) {
		return "", false, fmt.Errorf("%w: the helper of %s runs an earlier spec", ErrSpecMismatch, uid)
	}
	return sock, true, nil
}

func (f files) writeSpec(uid string, spec vmspec.VMSpec) error {
	b, err := json.Marshal(spec)
	if err != nil {
		return fmt.Errorf("encoding spec of %s: %w", uid, err)
	}
	if err := os.WriteFile(f.path(uid, specSuffix), b, 0o600); err != nil {
		return fmt.Errorf("writing spec of %s: %w", uid, err)
	}
	return nil
}

func (f files) readSpec(uid string) (vmspec.VMSpec, error) {
	return ReadSpecFile(f.path(uid, specSuffix))
}

// ReadSpecFile reads a spec a launcher wrote, as the vm-helper does at start.
func ReadSpecFile(path string) (vmspec.VMSpec, error) {
	var spec vmspec.VMSpec
	b, err := os.ReadFile(path)
	if err != nil {
		return spec, fmt.Errorf("reading spec: %w", err)
	}
	if err := json.Unmarshal(b, &spec); err != nil {
		return spec, fmt.Errorf("decoding spec %s: %w", path, err)
	}
	return spec, nil
}
