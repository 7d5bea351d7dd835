package images

import (
	"errors"

	"golang.org/x/sys/unix"
)

var errPunchUnsupported = errors.New("punching holes is not supported here")

// Space reports the free space of the filesystem holding a path.
type Space interface {
	Free(path string) (int64, error)
}

// StatfsSpace is Space by statfs(2): the blocks available to an
// unprivileged user.
type StatfsSpace struct{}

// Free returns the bytes available on path's filesystem.
func (StatfsSpace) Free(path string) (int64, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return 0, err
	}
	return int64(st.Bavail) * int64(st.Bsize), nil
}
