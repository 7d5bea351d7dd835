package images

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// Clone reflinks src to dst with FICLONE where the filesystem shares
// blocks (btrfs, xfs with reflink), and sparse-copies it otherwise.
func (c FSCloner) Clone(src, dst string) (Method, error) {
	err := ficlone(src, dst)
	if err == nil {
		return MethodFiclone, nil
	}
	if errors.Is(err, fs.ErrExist) {
		return "", err
	}
	c.Log.V(1).Info("FICLONE unavailable; sparse copy", "src", src, "error", err.Error())
	return MethodSparseCopy, SparseCopy(src, dst)
}

// ficlone makes dst a reflink of src, by dst.tmp renamed to dst.
func ficlone(src, dst string) (err error) {
	if _, err := os.Lstat(dst); err == nil {
		return &fs.PathError{Op: "clone", Path: dst, Err: fs.ErrExist}
	}
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	fi, err := in.Stat()
	if err != nil {
		return err
	}
	tmp := dst + ".tmp"
	out, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, fi.Mode().Perm())
	if err != nil {
		return err
	}
	if err := unix.IoctlFileClone(int(out.Fd()), int(in.Fd())); err != nil {
		out.Close()
		os.Remove(tmp)
		return &fs.PathError{Op: "FICLONE", Path: dst, Err: err}
	}
	if err := out.Close(); err != nil {
		os.Remove(tmp)
		return err
	}
	if err := os.Rename(tmp, dst); err != nil {
		os.Remove(tmp)
		return err
	}
	return syncDir(filepath.Dir(dst))
}
