package host

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// BootIDSource says which boot of the host this is. The id changes only
// when the host reboots: the quarantine loop proves a reboot by it, and a
// stuck quota lasts only as long as the boot it was seen in.
type BootIDSource interface {
	BootID(ctx context.Context) (string, error)
}

// BootIDFile holds a sim host's boot id, in its kernel state directory.
const BootIDFile = "boot-id"

// maxBootID is ReportedFacts.bootID's schema limit.
const maxBootID = 64

// SimBootID is a sim host's boot id: a UUID in Dir/BootIDFile (Dir is the
// sim kernel's state directory, shared by the agent and its helpers),
// made on the first read of a boot and replaced by NewBoot when the sim
// host reboots.
type SimBootID struct{ Dir string }

var _ BootIDSource = SimBootID{}

// BootID implements BootIDSource. The first reader of a boot makes the id;
// a link, which fails if the file exists, makes sure that two readers at
// once agree on it.
func (s SimBootID) BootID(context.Context) (string, error) {
	path := filepath.Join(s.Dir, BootIDFile)
	id, err := readBootID(path)
	if err == nil || !errors.Is(err, fs.ErrNotExist) {
		return id, err
	}
	tmp, err := writeTemp(s.Dir, newUUID())
	if err != nil {
		return "", err
	}
	defer os.Remove(tmp)
	if err := os.Link(tmp, path); err != nil && !errors.Is(err, fs.ErrExist) {
		return "", fmt.Errorf("recording the sim host's boot id: %w", err)
	}
	return readBootID(path)
}

// NewBoot gives the sim host a new boot id, as its reboot does, and
// returns it.
func (s SimBootID) NewBoot() (string, error) {
	id := newUUID()
	tmp, err := writeTemp(s.Dir, id)
	if err != nil {
		return "", err
	}
	defer os.Remove(tmp) // no-op after the rename
	if err := os.Rename(tmp, filepath.Join(s.Dir, BootIDFile)); err != nil {
		return "", fmt.Errorf("recording the sim host's new boot id: %w", err)
	}
	return id, nil
}

func readBootID(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("reading the sim host's boot id: %w", err)
	}
	id := strings.TrimSpace(string(b))
	if id == "" || len(id) > maxBootID {
		return "", fmt.Errorf("the sim host's boot id in %s is %q: not 1 to %d characters", path, id, maxBootID)
	}
	return id, nil
}

func writeTemp(dir, content string) (string, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("creating %s: %w", dir, err)
	}
	f, err := os.CreateTemp(dir, "."+BootIDFile+".*")
	if err != nil {
		return "", fmt.Errorf("recording the sim host's boot id: %w", err)
	}
	_, err = f.WriteString(content + "\n")
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(f.Name())
		return "", fmt.Errorf("recording the sim host's boot id: %w", err)
	}
	return f.Name(), nil
}

// newUUID is a random (version 4) UUID, as kern.bootsessionuuid is one.
func newUUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}
