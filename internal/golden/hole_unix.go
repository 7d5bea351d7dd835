//go:build linux || darwin || freebsd

package golden

import (
	"os"

	"golang.org/x/sys/unix"
)

// isHole says whether size bytes at off of f are a hole of a sparse file,
// all zeros with no data: SEEK_DATA finds no data before off+size. Where
// the file system cannot tell, it says no, and the bytes are read.
func isHole(f *os.File, off, size int64) bool {
	next, err := unix.Seek(int(f.Fd()), off, unix.SEEK_DATA)
	if err == unix.ENXIO {
		// No data at or after off: the rest of the file is a hole.
		return true
	}
	return err == nil && next >= off+size
}
