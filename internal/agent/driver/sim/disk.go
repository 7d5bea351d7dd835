package sim

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// DiskState is the sim's record of whether a VM's disk was closed cleanly.
type DiskState string

// The disk states.
const (
	// DiskOpen: the VM started and has not stopped. Read after the VM is
	// gone, it means its helper died with the disk open (killed, or the
	// host lost power): as unclean as DiskDirty.
	DiskOpen DiskState = "open"
	// DiskClean: the guest shut down, by itself or on requestStop, and
	// closed its disk.
	DiskClean DiskState = "clean"
	// DiskDirty: the VM was forced off with its disk open.
	DiskDirty DiskState = "dirty"
)

// DiskStateSuffix names the record beside a disk: <disk>.sim-state.
const DiskStateSuffix = ".sim-state"

// ReadDiskState reads the record beside disk; "" if the VM never started.
func ReadDiskState(disk string) (DiskState, error) {
	b, err := os.ReadFile(disk + DiskStateSuffix)
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("reading the state of disk %s: %w", disk, err)
	}
	return DiskState(strings.TrimSpace(string(b))), nil
}

// DiskClosedCleanly reports whether the last VM to use disk closed it
// cleanly: only DiskClean is.
func DiskClosedCleanly(disk string) (bool, error) {
	st, err := ReadDiskState(disk)
	return st == DiskClean, err
}

// writeDiskState replaces the record through a rename, so that a helper
// killed mid-write leaves the previous record rather than half of one.
func writeDiskState(disk string, st DiskState) error {
	path := disk + DiskStateSuffix
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("recording the state of disk %s: %w", disk, err)
	}
	defer os.Remove(tmp.Name()) // no-op after the rename
	_, err = tmp.WriteString(string(st) + "\n")
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		return fmt.Errorf("recording the state of disk %s: %w", disk, err)
	}
	return nil
}
