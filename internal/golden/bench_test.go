package golden

import (
	"bytes"
	"io"
	"math/rand/v2"
	"testing"
)

// benchChunk is a 64 MiB chunk made like a macOS disk's: a quarter random
// (compressed files, code signatures), a quarter repetitive (text, tables),
// half zeros (free blocks); in runs of 1 MiB, interleaved.
func benchChunk() []byte {
	const size = 64 << 20
	const run = 1 << 20
	b := make([]byte, size)
	rng := rand.New(rand.NewPCG(5, 6))
	text := []byte("/System/Library/Frameworks/Foundation.framework/Versions/C/Foundation\x00\x01\x02 CFBundleIdentifier com.apple. ")
	for off := 0; off < size; off += run {
		switch (off / run) % 4 {
		case 0:
			for i := off; i < off+run; i += 8 {
				v := rng.Uint64()
				for j := range 8 {
					b[i+j] = byte(v >> (8 * j))
				}
			}
		case 1:
			for i := off; i < off+run; i++ {
				b[i] = text[(i*7+i/977)%len(text)]
			}
		}
	}
	return b
}

func BenchmarkCompress(b *testing.B) {
	data := benchChunk()
	for _, comp := range []Compression{Zstd, LZ4} {
		b.Run(string(comp), func(b *testing.B) {
			b.SetBytes(int64(len(data)))
			var out int
			for b.Loop() {
				var buf bytes.Buffer
				w, err := newCompressor(&buf, comp)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := w.Write(data); err != nil {
					b.Fatal(err)
				}
				if err := w.Close(); err != nil {
					b.Fatal(err)
				}
				out = buf.Len()
			}
			b.ReportMetric(100*float64(out)/float64(len(data)), "%size")
		})
	}
}

// BenchmarkOpen is what a puller pays per chunk: decompression and both
// digests (compressed and uncompressed) through Chunk.Open.
func BenchmarkOpen(b *testing.B) {
	data := benchChunk()
	for _, comp := range []Compression{Zstd, LZ4} {
		b.Run(string(comp), func(b *testing.B) {
			c, z := compressed(b, data, comp)
			b.SetBytes(int64(len(data)))
			for b.Loop() {
				rc, err := c.Open(bytes.NewReader(z))
				if err != nil {
					b.Fatal(err)
				}
				if n, err := io.Copy(io.Discard, rc); err != nil || n != int64(len(data)) {
					b.Fatalf("%d bytes, %v", n, err)
				}
				rc.Close()
			}
		})
	}
}

// BenchmarkDecompress is the decompressor alone, without the digests.
func BenchmarkDecompress(b *testing.B) {
	data := benchChunk()
	for _, comp := range []Compression{Zstd, LZ4} {
		b.Run(string(comp), func(b *testing.B) {
			c, z := compressed(b, data, comp)
			b.SetBytes(int64(len(data)))
			for b.Loop() {
				rc, err := c.Open(bytes.NewReader(z))
				if err != nil {
					b.Fatal(err)
				}
				cr := rc.(*chunkReader)
				if n, err := io.Copy(io.Discard, cr.dec); err != nil || n != int64(len(data)) {
					b.Fatalf("%d bytes, %v", n, err)
				}
				rc.Close()
			}
		})
	}
}
