// Package golden is MacRack's golden-image format: an OCI artifact that
// holds one macOS disk cut into fixed-size chunks, each compressed on its
// own and carried as one layer, plus the VM's auxiliary storage and
// hardware model, and a config blob with the versions and the minimum
// disk. The shape follows Tart's disk format (DiskV2), with MacRack's own
// media types and annotations; Parse refuses anything that is not it
// before a byte of a chunk is fetched.
package golden

import (
	"errors"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// Media types and annotations of a golden. The manifest is an OCI image
// manifest whose artifactType is ArtifactType.
const (
	ArtifactType    = "application/vnd.macrack.golden.v1"
	ConfigMediaType = "application/vnd.macrack.golden.config.v1+json"
	// DiskMediaTypeZstd and DiskMediaTypeLZ4 are a disk chunk's layer,
	// compressed with zstd or LZ4 (one frame per chunk).
	DiskMediaTypeZstd      = "application/vnd.macrack.golden.disk.v1+zstd"
	DiskMediaTypeLZ4       = "application/vnd.macrack.golden.disk.v1+lz4"
	AuxMediaType           = "application/vnd.macrack.golden.aux.v1"
	HardwareModelMediaType = "application/vnd.macrack.golden.hardware-model.v1"

	// AnnotationUncompressedSize is a chunk's size once decompressed, in
	// bytes (decimal).
	AnnotationUncompressedSize = "io.macrack.golden.uncompressed-size"
	// AnnotationUncompressedDigest is the sha256 digest of a chunk once
	// decompressed.
	AnnotationUncompressedDigest = "io.macrack.golden.uncompressed-digest"
)

// Limits checked by Parse, before any chunk is fetched: a manifest that
// claims more makes a clean error, never a huge allocation or file.
const (
	DefaultChunkSize int64 = 512 << 20
	MaxChunkSize     int64 = 4 << 30
	MaxChunks              = 4096
	MaxDiskSize      int64 = 4 << 40
	MaxManifestSize  int64 = 4 << 20
	MaxConfigSize    int64 = 64 << 10
	MaxAuxSize       int64 = 256 << 20
	MaxHardwareModel int64 = 64 << 10
)

// Compression is how a chunk is compressed.
type Compression string

const (
	Zstd Compression = "zstd"
	LZ4  Compression = "lz4"
)

// Config is a golden's config blob.
type Config struct {
	// MacOSVersion is the guest's macOS, for example "15.5".
	MacOSVersion string `json:"macOSVersion"`
	// XcodeVersions are the Xcodes installed, for example ["16.4"].
	XcodeVersions []string `json:"xcodeVersions"`
	// MinimumDiskBytes is the smallest instance disk the golden fits on.
	MinimumDiskBytes int64 `json:"minimumDiskBytes"`
	// DiskBytes is the disk's uncompressed size: the sum of its chunks.
	DiskBytes int64 `json:"diskBytes"`
	// ChunkBytes is the uncompressed size of every chunk but the last.
	ChunkBytes int64 `json:"chunkBytes"`
}

// Chunk is one disk layer: where its bytes go and what they must hash to.
type Chunk struct {
	Index int
	// Offset is where the chunk's first byte goes in the disk.
	Offset int64
	// Layer is the compressed blob: media type, size and digest, which the
	// fetch is checked against.
	Layer ocispec.Descriptor
	// Size and Digest are the chunk's once decompressed, from its
	// annotations, which the decompressed bytes are checked against.
	Size        int64
	Digest      digest.Digest
	Compression Compression
}

// Golden is a parsed, checked golden manifest and config.
type Golden struct {
	// Manifest is the manifest's own descriptor (its digest pins the golden).
	Manifest         ocispec.Descriptor
	Config           Config
	Chunks           []Chunk
	AuxiliaryStorage ocispec.Descriptor
	HardwareModel    ocispec.Descriptor
}

// DiskSize is the disk's uncompressed size.
func (g *Golden) DiskSize() int64 { return g.Config.DiskBytes }

// ErrInvalid is wrapped by every refusal of a manifest or config that is
// not a well-formed golden within the limits.
var ErrInvalid = errors.New("not a valid MacRack golden")
