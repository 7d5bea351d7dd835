package images

import "github.com/go-logr/logr"

// Method is how a file was cloned.
type Method string

const (
	// MethodClonefile is an APFS clone (clonefile(2)): instant, sharing
	// blocks until either side writes them.
	MethodClonefile Method = "clonefile"
	// MethodFiclone is a Linux reflink (ioctl FICLONE, btrfs or xfs).
	MethodFiclone Method = "ficlone"
	// MethodSparseCopy is SparseCopy: a copy that keeps holes.
	MethodSparseCopy Method = "sparse-copy"
)

// Cloner makes dst a copy of src, by the cheapest method it can. dst must
// not exist; it appears whole or not at all.
type Cloner interface {
	Clone(src, dst string) (Method, error)
}

// FSCloner clones by the filesystem (clonefile on darwin, FICLONE on
// Linux) and falls back to SparseCopy where the filesystem cannot.
type FSCloner struct {
	Log logr.Logger
}

// DefaultCloner is an FSCloner.
func DefaultCloner(log logr.Logger) Cloner { return FSCloner{Log: log} }

// SparseCopier clones by SparseCopy only.
type SparseCopier struct{}

// Clone copies src to dst with SparseCopy.
func (SparseCopier) Clone(src, dst string) (Method, error) {
	return MethodSparseCopy, SparseCopy(src, dst)
}
