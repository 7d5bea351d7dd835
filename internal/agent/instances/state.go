package instances

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// The agent's own records in its state directory (Disks.Root), which
// survive its restarts: the quarantine loop keeps all else in the API.
const (
	// quotaFile is the last quota report, with the boot it is about.
	quotaFile = "quota.json"
	// quotaStickFile is the last SimQuotaStickAnnotation value handled.
	quotaStickFile = "quota-stick-handled"
)

func (r *Instances) statePath(name string) string { return filepath.Join(r.Disks.Root, name) }

// writeState replaces the record name with v through a rename, so that an
// agent killed mid-write leaves the previous record rather than half.
func (r *Instances) writeState(name string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(r.Disks.Root, 0o700); err != nil {
		return fmt.Errorf("creating the state directory: %w", err)
	}
	tmp, err := os.CreateTemp(r.Disks.Root, "."+name+".*")
	if err != nil {
		return fmt.Errorf("writing %s: %w", name, err)
	}
	defer os.Remove(tmp.Name()) // no-op after the rename
	_, err = tmp.Write(b)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), r.statePath(name))
	}
	if err != nil {
		return fmt.Errorf("writing %s: %w", name, err)
	}
	return nil
}

// readState reads the record name into v; false if there is none.
func (r *Instances) readState(name string, v any) (bool, error) {
	b, err := os.ReadFile(r.statePath(name))
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("reading %s: %w", name, err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		return false, fmt.Errorf("decoding %s: %w", name, err)
	}
	return true, nil
}

func (r *Instances) removeState(name string) error {
	if err := os.Remove(r.statePath(name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("removing %s: %w", name, err)
	}
	return nil
}
