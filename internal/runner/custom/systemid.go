package custom

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
)

// SystemIDFile is the file gitlab-runner reads its system id from, beside
// the config file it is given (commands/internal/configfile: Load).
const SystemIDFile = ".runner_system_id"

// systemIDRe is the form gitlab-runner accepts from the file; it ignores
// anything else and makes a new id (system_id_state.go loadFromFile).
var systemIDRe = regexp.MustCompile(`^[sr]_[0-9a-zA-Z]{12}$`)

// EnsureSystemID returns the system id in dir's .runner_system_id,
// creating dir (0700) and the file (0600) with a new s_ and 12 hex
// digits if they are missing or hold no valid id. dir is one chassis's,
// so GitLab sees one runner manager per chassis, whatever VM runs the
// job. Callers at once, in this process or another, agree on one id: a
// lock file beside it serialises them.
func EnsureSystemID(dir string) (string, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("%w: %w", ErrSystemID, err)
	}
	path := filepath.Join(dir, SystemIDFile)
	lock, err := os.OpenFile(path+".lock", os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return "", fmt.Errorf("%w: %w", ErrSystemID, err)
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return "", fmt.Errorf("%w: locking %s: %w", ErrSystemID, lock.Name(), err)
	}
	// Closing the file releases the lock.
	if id, err := readSystemID(path); err != nil || id != "" {
		return id, err
	}
	id, err := newSystemID()
	if err != nil {
		return "", err
	}
	// Write aside, then rename: gitlab-runner never reads half a file.
	tmp, err := os.CreateTemp(dir, ".runner_system_id-*")
	if err != nil {
		return "", fmt.Errorf("%w: %w", ErrSystemID, err)
	}
	defer os.Remove(tmp.Name())
	_, werr := tmp.WriteString(id + "\n")
	cerr := tmp.Close()
	if err := errors.Join(werr, cerr); err != nil {
		return "", fmt.Errorf("%w: %w", ErrSystemID, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return "", fmt.Errorf("%w: %w", ErrSystemID, err)
	}
	return id, nil
}

// readSystemID is the valid id in path, or "" if there is none.
func readSystemID(path string) (string, error) {
	b, err := os.ReadFile(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return "", nil
	case err != nil:
		return "", fmt.Errorf("%w: %w", ErrSystemID, err)
	}
	if id := strings.TrimSpace(string(b)); systemIDRe.MatchString(id) {
		return id, nil
	}
	return "", nil
}

// newSystemID is s_ and 12 random hex digits, the form gitlab-runner
// gives its own (GenerateUniqueSystemID).
func newSystemID() (string, error) {
	b := make([]byte, 6)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("%w: %w", ErrSystemID, err)
	}
	return "s_" + hex.EncodeToString(b), nil
}
