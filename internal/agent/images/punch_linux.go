package images

import "golang.org/x/sys/unix"

// punchHole deallocates [off, off+n) of f so that it reads as zeros,
// keeping the file's size. Partial blocks at the edges are zeroed by the
// kernel.
func punchHole(f any, off, n int64) error {
	fd, ok := f.(interface{ Fd() uintptr })
	if !ok {
		return errPunchUnsupported
	}
	return unix.Fallocate(int(fd.Fd()), unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, off, n)
}
