package agent

import (
	"os"

	"golang.org/x/sys/unix"
)

// cloneFile makes dst a reflink of src where the filesystem supports it
// (btrfs, xfs), and a copy otherwise.
func cloneFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if err := unix.IoctlFileClone(int(out.Fd()), int(in.Fd())); err == nil {
		return out.Close()
	}
	out.Close()
	os.Remove(dst)
	return copyFile(src, dst)
}
