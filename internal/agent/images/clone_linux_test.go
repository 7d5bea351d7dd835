package images

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/go-logr/logr/testr"
	"golang.org/x/sys/unix"
)

type fsType struct{}

// of names the filesystem holding path.
func (fsType) of(path string) string {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return err.Error()
	}
	switch st.Type {
	case unix.EXT4_SUPER_MAGIC:
		return "ext4"
	case unix.XFS_SUPER_MAGIC:
		return "xfs"
	case unix.BTRFS_SUPER_MAGIC:
		return "btrfs"
	case unix.TMPFS_MAGIC:
		return "tmpfs"
	case unix.OVERLAYFS_SUPER_MAGIC:
		return "overlayfs"
	}
	return fmt.Sprintf("magic %#x", st.Type)
}

func TestFSCloner(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "src")
	want := sparseFile(t, src, 8<<20, []int64{1 << 20, 5 << 20}, 256<<10, nil)
	// FICLONE itself, to report what this filesystem does.
	ferr := ficlone(src, filepath.Join(dir, "reflink"))
	var st fsType
	t.Logf("filesystem of %s: %s; FICLONE: %v", dir, st.of(dir), errOrOK(ferr))
	if ferr == nil {
		os.Remove(filepath.Join(dir, "reflink"))
	}
	dst := filepath.Join(dir, "dst")
	m, err := DefaultCloner(testr.New(t)).Clone(src, dst)
	if err != nil {
		t.Fatal(err)
	}
	if (ferr == nil) != (m == MethodFiclone) || (ferr != nil && m != MethodSparseCopy) {
		t.Errorf("method %s, FICLONE error %v", m, ferr)
	}
	got, err := os.ReadFile(dst)
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("clone differs (%v)", err)
	}
	if a := allocated(t, dst); a >= 8<<20 {
		t.Errorf("clone not sparse: %d bytes", a)
	}
	if _, err := DefaultCloner(testr.New(t)).Clone(src, dst); !errors.Is(err, fs.ErrExist) {
		t.Errorf("clone over an existing file: %v", err)
	}
}

func errOrOK(err error) string {
	if err == nil {
		return "works"
	}
	return err.Error()
}
