package images

import (
	"context"
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/go-logr/logr"

	"github.com/boualleiguie/macrack-operator/internal/golden"
)

// BenchmarkSparseWrite is the zero-skipping write of a 64 MiB mix of
// zeros, random and text, in the puller's 1 MiB buffers.
func BenchmarkSparseWrite(b *testing.B) {
	data := makeDisk(64<<20, 99)
	f, err := os.Create(filepath.Join(b.TempDir(), "disk.img"))
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	if err := f.Truncate(int64(len(data))); err != nil {
		b.Fatal(err)
	}
	var written int64
	b.SetBytes(int64(len(data)))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		written = 0
		for off := 0; off < len(data); off += bufSize {
			n, err := writeSparse(f, data[off:min(off+bufSize, len(data))], int64(off))
			if err != nil {
				b.Fatal(err)
			}
			written += n
		}
	}
	b.ReportMetric(float64(written)/float64(len(data))*100, "%written")
}

func BenchmarkSHA256(b *testing.B) {
	buf := makeDisk(1<<20, 98)
	h := sha256.New()
	b.SetBytes(int64(len(buf)))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		h.Write(buf)
	}
	h.Sum(nil)
}

// BenchmarkPullMemory is the whole pull of a 64 MiB golden (4 MiB
// chunks) from a memory store: fetch, hash, decompress, hash, sparse
// write, state, ready. Bytes are the disk's (uncompressed).
func BenchmarkPullMemory(b *testing.B) {
	disk := makeDisk(64<<20, 97)
	for _, bc := range []struct {
		name   string
		comp   golden.Compression
		verify bool
	}{
		{"zstd", golden.Zstd, false},
		{"zstd-verify-writes", golden.Zstd, true},
		{"lz4", golden.LZ4, false},
	} {
		b.Run(bc.name, func(b *testing.B) {
			tg := buildGolden(b, disk, 4<<20, bc.comp)
			root := b.TempDir()
			p := &Puller{Root: root, Log: logr.Discard(), VerifyWrites: bc.verify}
			b.ReportMetric(float64(bytesTotal(tg.g))/float64(len(disk))*100, "%compressed")
			b.SetBytes(int64(len(disk)))
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				name := fmt.Sprintf("g%d", i)
				if err := p.Pull(context.Background(), name, tg.g, tg.store); err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				os.RemoveAll(filepath.Join(root, name))
				b.StartTimer()
			}
		})
	}
}

// BenchmarkClone is SparseCopy of a 1 GiB file holding 100 MiB of data
// (100 regions of 1 MiB). Bytes are the file's logical size.
func BenchmarkClone(b *testing.B) {
	dir := b.TempDir()
	src := filepath.Join(dir, "src")
	const size = 1 << 30
	var at []int64
	for i := int64(0); i < 100; i++ {
		at = append(at, i*(size/100)&^4095)
	}
	sparseFile(b, src, size, at, 1<<20, nil)
	b.SetBytes(size)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		dst := filepath.Join(dir, fmt.Sprintf("dst%d", i))
		if err := SparseCopy(src, dst); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		os.Remove(dst)
		b.StartTimer()
	}
}
