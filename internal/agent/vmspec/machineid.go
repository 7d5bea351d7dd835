package vmspec

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// MachineIdentifierFile is the machine identifier's file name, beside the
// instance's disk.
const MachineIdentifierFile = "machine-identifier"

// LoadOrCreateMachineIdentifier returns the identifier persisted at path, or
// creates one with generate and persists it first. The identifier must not
// change over the instance's life: macOS ties the guest's identity (and
// its keychain) to it. generate is the driver's (random bytes in the sim,
// VZMacMachineIdentifier on a Mac).
func LoadOrCreateMachineIdentifier(path string, generate func() ([]byte, error)) ([]byte, error) {
	b, err := os.ReadFile(path)
	switch {
	case err == nil:
		if len(b) == 0 {
			return nil, fmt.Errorf("%w: %s is empty", ErrMachineIdentifier, path)
		}
		return b, nil
	case !errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("reading machine identifier: %w", err)
	}
	b, err = generate()
	if err != nil {
		return nil, fmt.Errorf("generating machine identifier: %w", err)
	}
	if len(b) == 0 {
		return nil, fmt.Errorf("%w: the generator returned none", ErrMachineIdentifier)
	}
	if err := writeAtomic(path, b); err != nil {
		return nil, fmt.Errorf("persisting machine identifier: %w", err)
	}
	return b, nil
}

// writeAtomic writes b to path through a synced temporary file and a rename,
// so that a crash leaves either no file or the whole one.
func writeAtomic(path string, b []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name()) // no-op after the rename
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}
