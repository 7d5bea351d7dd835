//go:build unix

package instances

import (
	"io/fs"
	"syscall"
)

// allocated is what a file holds on disk, as du counts it.
func allocated(info fs.FileInfo) int64 {
	if st, ok := info.Sys().(*syscall.Stat_t); ok {
		return st.Blocks * 512
	}
	return info.Size()
}
