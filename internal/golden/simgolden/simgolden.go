// Package simgolden writes the source files of a simulated golden: a sparse
// disk with a marker at the start of every chunk, an auxiliary storage and a
// hardware model. `make run` and the suites push it through the real
// pipeline (golden.Push, a real registry, the agent's puller), so that what
// the sim exercises is everything but the guest's bytes.
package simgolden

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"

	"github.com/boualleiguie/macrack-operator/internal/golden"
)

// Write creates disk.img (diskBytes, sparse, a marker every chunkBytes),
// aux.img and hardware-model under dir, and returns them as a golden
// source of macOS 15.5 with Xcode 16.4 whose minimum disk is
// minimumDiskBytes (0: the disk's size).
func Write(dir, name string, diskBytes, chunkBytes, minimumDiskBytes int64) (golden.Source, error) {
	if diskBytes <= 0 || chunkBytes <= 0 {
		return golden.Source{}, fmt.Errorf("simgolden: disk %d and chunk %d must be positive", diskBytes, chunkBytes)
	}
	src := golden.Source{
		Disk: filepath.Join(dir, "disk.img"), AuxiliaryStorage: filepath.Join(dir, "aux.img"),
		HardwareModel: filepath.Join(dir, "hardware-model"),
		MacOSVersion:  "15.5", XcodeVersions: []string{"16.4"}, MinimumDiskBytes: minimumDiskBytes,
	}
	f, err := os.Create(src.Disk)
	if err != nil {
		return src, err
	}
	for off := int64(0); off < diskBytes; off += chunkBytes {
		marker := fmt.Appendf(nil, "macrack sim golden %s, chunk at %d\n", name, off)
		if _, err := f.WriteAt(marker[:min(int64(len(marker)), diskBytes-off)], off); err != nil {
			f.Close()
			return src, err
		}
	}
	if err := f.Truncate(diskBytes); err != nil {
		f.Close()
		return src, err
	}
	if err := f.Close(); err != nil {
		return src, err
	}
	if err := os.WriteFile(src.AuxiliaryStorage, bytes.Repeat([]byte{0xA5}, 64<<10), 0o600); err != nil {
		return src, err
	}
	return src, os.WriteFile(src.HardwareModel, []byte("bplist00 macrack sim hardware model"), 0o600)
}
