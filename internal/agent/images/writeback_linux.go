package images

import (
	"os"

	"golang.org/x/sys/unix"
)

// startWriteback asks the kernel to start writing a verified chunk's range
// out, without waiting: the pull's final fsync then finds little left to
// flush, rather than the whole disk at once.
func startWriteback(f diskFile, off, n int64) {
	if file, ok := f.(*os.File); ok {
		_ = unix.SyncFileRange(int(file.Fd()), off, n, unix.SYNC_FILE_RANGE_WRITE)
	}
}
