//go:build !linux

package images

// startWriteback is the final fsync's alone where there is no
// sync_file_range.
func startWriteback(diskFile, int64, int64) {}
