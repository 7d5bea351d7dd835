package images

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"syscall"

	"github.com/opencontainers/go-digest"
	"golang.org/x/sys/unix"
)

// HoleSize is the granularity of zero skipping: a 64 KiB block of zeros
// is not written (it stays a hole and reads as zeros), as in Tart.
const HoleSize = 64 << 10

// bufSize is the read/write buffer of a pull or copy worker: a multiple
// of HoleSize so that blocks stay aligned to the chunk's start.
const bufSize = 1 << 20

var zeroBlock [HoleSize]byte

var bufPool = sync.Pool{New: func() any { b := make([]byte, bufSize); return &b }}

// isZero compares b with zeros on its own length (so a block shorter than
// HoleSize at the end of a chunk is compared on the bytes it has).
func isZero(b []byte) bool { return bytes.Equal(b, zeroBlock[:len(b)]) }

// writeSparse writes p at off, skipping every HoleSize block of p (counted
// from p's start) that is all zeros; adjacent non-zero blocks go in one
// WriteAt. The region must already read as zeros (a fresh truncate or a
// punched hole). It returns the bytes actually written.
func writeSparse(w io.WriterAt, p []byte, off int64) (int64, error) {
	var written int64
	start := -1
	flush := func(end int) error {
		n, err := w.WriteAt(p[start:end], off+int64(start))
		written += int64(n)
		start = -1
		return err
	}
	for i := 0; i < len(p); i += HoleSize {
		end := min(i+HoleSize, len(p))
		if isZero(p[i:end]) {
			if start >= 0 {
				if err := flush(i); err != nil {
					return written, err
				}
			}
			continue
		}
		if start < 0 {
			start = i
		}
	}
	if start >= 0 {
		if err := flush(len(p)); err != nil {
			return written, err
		}
	}
	return written, nil
}

// seeker is what SEEK_DATA needs of a file.
type seeker interface {
	Seek(offset int64, whence int) (int64, error)
}

// regionHasData reports whether [off, off+n) of f may hold bytes, by
// SEEK_DATA. When the filesystem or file cannot tell, it says yes.
func regionHasData(f any, off, n int64) bool {
	s, ok := f.(seeker)
	if !ok || n <= 0 {
		return n > 0
	}
	data, err := s.Seek(off, unix.SEEK_DATA)
	if errors.Is(err, syscall.ENXIO) {
		return false // no data at or after off
	}
	if err != nil {
		return true
	}
	return data < off+n
}

// hashRegion hashes n bytes of r from off with the digest's algorithm.
func hashRegion(ctx context.Context, r io.ReaderAt, off, n int64, alg digest.Algorithm) (digest.Digest, error) {
	if !alg.Available() {
		return "", fmt.Errorf("digest algorithm %q unavailable", alg)
	}
	h := alg.Hash()
	if err := copyRegion(ctx, h, r, off, n); err != nil {
		return "", err
	}
	return digest.NewDigest(alg, h), nil
}

func copyRegion(ctx context.Context, h hash.Hash, r io.ReaderAt, off, n int64) error {
	bp := bufPool.Get().(*[]byte)
	defer bufPool.Put(bp)
	buf := *bp
	for n > 0 {
		if err := ctx.Err(); err != nil {
			return err
		}
		m := int(min(int64(len(buf)), n))
		k, err := r.ReadAt(buf[:m], off)
		h.Write(buf[:k])
		off += int64(k)
		n -= int64(k)
		if k == m {
			continue
		}
		if err == nil || errors.Is(err, io.EOF) {
			return io.ErrUnexpectedEOF
		}
		return err
	}
	return nil
}

// allocatedBytes is the space a file or directory's files hold on disk,
// st_blocks*512 (what du reports): a sparse file counts only its
// allocated blocks.
func allocatedBytes(path string) (int64, error) {
	fi, err := os.Lstat(path)
	if err != nil {
		return 0, err
	}
	if !fi.IsDir() {
		return blocksOf(fi), nil
	}
	var total int64
	err = filepath.WalkDir(path, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		info, err := d.Info()
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		total += blocksOf(info)
		return nil
	})
	return total, err
}

func blocksOf(fi fs.FileInfo) int64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return int64(st.Blocks) * 512
	}
	return fi.Size()
}

// SparseCopy copies src to dst keeping it sparse: it seeks over src's
// holes with SEEK_DATA/SEEK_HOLE (the whole file is data where the
// filesystem cannot tell), skips 64 KiB runs of zeros inside data, and
// writes dst.tmp before renaming it to dst. dst must not exist.
func SparseCopy(src, dst string) error {
	return sparseCopy(context.Background(), src, dst)
}

func sparseCopy(ctx context.Context, src, dst string) (err error) {
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
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("clone %s: not a regular file", src)
	}
	tmp := dst + ".tmp"
	out, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_TRUNC, fi.Mode().Perm())
	if err != nil {
		return err
	}
	defer func() {
		if out != nil {
			out.Close()
		}
		if err != nil {
			os.Remove(tmp)
		}
	}()
	size := fi.Size()
	if err := out.Truncate(size); err != nil {
		return err
	}
	bp := bufPool.Get().(*[]byte)
	defer bufPool.Put(bp)
	buf := *bp

	for off := int64(0); off < size; {
		data, hole, ok := nextData(in, off, size)
		if !ok {
			break
		}
		for p := data; p < hole; {
			if err := ctx.Err(); err != nil {
				return err
			}
			m := int(min(int64(len(buf)), hole-p))
			k, rerr := in.ReadAt(buf[:m], p)
			if k > 0 {
				if _, werr := writeSparse(out, buf[:k], p); werr != nil {
					return werr
				}
			}
			p += int64(k)
			if k < m {
				if rerr == nil || errors.Is(rerr, io.EOF) {
					return fmt.Errorf("clone %s: file shrank during the copy", src)
				}
				return rerr
			}
		}
		off = hole
	}
	if err := out.Sync(); err != nil {
		return err
	}
	cerr := out.Close()
	out = nil
	if cerr != nil {
		return cerr
	}
	if err := os.Rename(tmp, dst); err != nil {
		return err
	}
	return syncDir(filepath.Dir(dst))
}

// nextData finds the next data extent [data, hole) at or after off.
func nextData(f *os.File, off, size int64) (data, hole int64, ok bool) {
	data, err := f.Seek(off, unix.SEEK_DATA)
	if errors.Is(err, syscall.ENXIO) {
		return 0, 0, false
	}
	if err != nil {
		return off, size, true // no SEEK_DATA here: all data
	}
	if data >= size {
		return 0, 0, false
	}
	hole, err = f.Seek(data, unix.SEEK_HOLE)
	if err != nil || hole > size {
		hole = size
	}
	return data, hole, true
}

// syncDir fsyncs a directory so that a rename in it is durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil && !errors.Is(err, syscall.EINVAL) {
		return err
	}
	return nil
}
