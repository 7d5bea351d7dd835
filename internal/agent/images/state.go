package images

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"time"

	"github.com/opencontainers/go-digest"
)

// The files of a golden in the cache, <Root>/<name>/.
const (
	DiskFile          = "disk.img"
	AuxFile           = "aux.img"
	HardwareModelFile = "hardware-model"
	// stateFile records a pull in progress; readyFile is written last,
	// once every byte verified; lastUsedFile's mtime is the last clone.
	stateFile    = "state.json"
	readyFile    = "ready"
	lastUsedFile = "last-used"
	trashPrefix  = ".trash-"
)

var nameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)

// checkName refuses a name that is not one safe path element.
func checkName(name string) error {
	if !nameRE.MatchString(name) {
		return fmt.Errorf("invalid golden cache name %q: want [A-Za-z0-9][A-Za-z0-9._-]{0,127}", name)
	}
	return nil
}

// pullState is the per-golden resume record, state.json.
type pullState struct {
	Manifest digest.Digest `json:"manifest"`
	DiskSize int64         `json:"diskSize"`
	Chunks   int           `json:"chunks"`
	// Verified are the chunk indices whose bytes verified (they are
	// re-hashed against their digest before they are trusted again).
	Verified      []int `json:"verified"`
	Aux           bool  `json:"aux"`
	HardwareModel bool  `json:"hardwareModel"`
}

func readState(dir string) (*pullState, error) {
	b, err := os.ReadFile(filepath.Join(dir, stateFile))
	if err != nil {
		return nil, err
	}
	var s pullState
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("%s: %w", stateFile, err)
	}
	return &s, nil
}

func (s *pullState) verifiedSet() map[int]bool {
	m := make(map[int]bool, len(s.Verified))
	for _, i := range s.Verified {
		if i >= 0 && i < s.Chunks {
			m[i] = true
		}
	}
	return m
}

func (s *pullState) setVerified(m map[int]bool) {
	s.Verified = s.Verified[:0]
	for i := range m {
		s.Verified = append(s.Verified, i)
	}
	sort.Ints(s.Verified)
}

// readyMarker is readyFile: the golden in this directory is complete and
// verified.
type readyMarker struct {
	Manifest   digest.Digest `json:"manifest"`
	DiskSize   int64         `json:"diskSize"`
	BytesTotal int64         `json:"bytesTotal"`
	ReadyAt    time.Time     `json:"readyAt"`
}

func readReady(dir string) (*readyMarker, error) {
	b, err := os.ReadFile(filepath.Join(dir, readyFile))
	if err != nil {
		return nil, err
	}
	var m readyMarker
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("%s: %w", readyFile, err)
	}
	return &m, nil
}

// isReady reports whether dir holds a complete golden, with manifest
// when it is not empty.
func isReady(dir string, manifest digest.Digest) (*readyMarker, bool) {
	m, err := readReady(dir)
	if err != nil || (manifest != "" && m.Manifest != manifest) {
		return nil, false
	}
	fi, err := os.Stat(filepath.Join(dir, DiskFile))
	if err != nil || fi.Size() != m.DiskSize {
		return nil, false
	}
	return m, true
}

// writeJSONAtomic writes v to path by a temporary file renamed over it.
// durable syncs the file before the rename and the directory after, so
// that it survives a crash whole. The resume state does without (an fsync
// per chunk would flush disk.img's dirty pages each time): a crash may
// lose its last updates or leave it unreadable, which costs re-fetches
// (an unreadable state starts over), never a wrong byte, since every kept
// chunk is re-hashed before it is trusted.
func writeJSONAtomic(path string, v any, durable bool) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return writeFileAtomic(path, b, durable)
}

func writeFileAtomic(path string, b []byte, durable bool) (err error) {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			os.Remove(f.Name())
		}
	}()
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	if durable {
		if err := f.Sync(); err != nil {
			f.Close()
			return err
		}
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(f.Name(), path); err != nil {
		return err
	}
	if !durable {
		return nil
	}
	return syncDir(dir)
}

// removeDir takes dir out of the cache at once, by renaming it into a
// trash name in the same root (so nothing sees half of it), then deletes
// it.
func removeDir(dir string) error {
	if _, err := os.Lstat(dir); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	trash, err := os.MkdirTemp(filepath.Dir(dir), trashPrefix+filepath.Base(dir)+"-")
	if err != nil {
		return os.RemoveAll(dir)
	}
	target := filepath.Join(trash, "d")
	if err := os.Rename(dir, target); err != nil {
		os.Remove(trash)
		return os.RemoveAll(dir)
	}
	return os.RemoveAll(trash)
}
