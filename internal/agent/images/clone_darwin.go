//go:build darwin

package images

import (
	"errors"
	"io/fs"
	"os"

	"golang.org/x/sys/unix"
)

// Clone makes dst an APFS clone of src (clonefile, not following a
// symlink), and sparse-copies it where the filesystem cannot clone.
func (c FSCloner) Clone(src, dst string) (Method, error) {
	if _, err := os.Lstat(dst); err == nil {
		return "", &fs.PathError{Op: "clone", Path: dst, Err: fs.ErrExist}
	}
	err := unix.Clonefile(src, dst, unix.CLONE_NOFOLLOW)
	if err == nil {
		return MethodClonefile, nil
	}
	if errors.Is(err, unix.EEXIST) || errors.Is(err, unix.ENOENT) {
		return "", &fs.PathError{Op: "clonefile", Path: dst, Err: err}
	}
	c.Log.V(1).Info("Clonefile unavailable; sparse copy", "src", src, "error", err.Error())
	return MethodSparseCopy, SparseCopy(src, dst)
}
