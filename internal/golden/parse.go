package golden

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2"
	"oras.land/oras-go/v2/content"
	"oras.land/oras-go/v2/registry"
)

// versionPattern is a macOS or Xcode version: "15", "15.5", "16.4.1".
var versionPattern = regexp.MustCompile(`^[0-9]+(\.[0-9]+){0,2}$`)

// canonicalSize is a positive decimal without sign, leading zeros or
// spaces.
var canonicalSize = regexp.MustCompile(`^[1-9][0-9]*$`)

// maxLayers bounds the layer list before anything else is read of it: every
// chunk, the auxiliary storage and the hardware model.
const maxLayers = MaxChunks + 2

// MaxCompressedSize is the largest compressed layer a chunk of uncompressed
// bytes may be: zstd and LZ4 grow incompressible data by well under a
// percent, so a layer that claims more is not one of ours, and a fetch is
// never allowed to run that far past the chunk.
func MaxCompressedSize(uncompressed int64) int64 {
	return uncompressed + 1<<20 + uncompressed/8
}

// Parse checks that manifest and config are a golden within the limits and
// returns it, with each chunk's offset computed. config is the config blob
// the manifest names; its size and digest are checked against the
// manifest's descriptor. Every refusal wraps ErrInvalid.
func Parse(manifest []byte, config []byte) (*Golden, error) {
	m, err := parseManifest(manifest)
	if err != nil {
		return nil, err
	}
	if int64(len(config)) != m.Config.Size {
		return nil, invalidf("the config blob is %d bytes, the manifest says %d", len(config), m.Config.Size)
	}
	if got := digest.SHA256.FromBytes(config); got != m.Config.Digest {
		return nil, invalidf("the config blob's digest is %s, the manifest says %s", got, m.Config.Digest)
	}
	g := &Golden{
		Manifest: ocispec.Descriptor{
			MediaType:    ocispec.MediaTypeImageManifest,
			ArtifactType: ArtifactType,
			Digest:       digest.SHA256.FromBytes(manifest),
			Size:         int64(len(manifest)),
		},
	}
	if err := g.fill(m, config); err != nil {
		return nil, err
	}
	return g, nil
}

// parsedManifest is a manifest whose layers have been sorted into chunks,
// auxiliary storage and hardware model and checked one by one, before the
// config is fetched.
type parsedManifest struct {
	Config           ocispec.Descriptor
	Chunks           []Chunk
	AuxiliaryStorage ocispec.Descriptor
	HardwareModel    ocispec.Descriptor
	diskBytes        int64
}

func invalidf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, args...))
}

// parseManifest checks everything the manifest alone can tell: media types,
// the layer count, every layer's sizes, digests and annotations, and the
// disk's total. It reads no blob.
func parseManifest(b []byte) (*parsedManifest, error) {
	if int64(len(b)) > MaxManifestSize {
		return nil, invalidf("the manifest is %d bytes, over the limit of %d", len(b), MaxManifestSize)
	}
	var m ocispec.Manifest
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&m); err != nil {
		return nil, invalidf("the manifest is not JSON: %v", err)
	}
	if dec.More() {
		return nil, invalidf("the manifest has trailing data after its JSON object")
	}
	if m.SchemaVersion != 2 {
		return nil, invalidf("the manifest's schemaVersion is %d, want 2", m.SchemaVersion)
	}
	if m.MediaType != ocispec.MediaTypeImageManifest {
		return nil, invalidf("the manifest's mediaType is %q, want %q", m.MediaType, ocispec.MediaTypeImageManifest)
	}
	if m.ArtifactType != ArtifactType {
		return nil, invalidf("the manifest's artifactType is %q, want %q", m.ArtifactType, ArtifactType)
	}
	if m.Config.MediaType != ConfigMediaType {
		return nil, invalidf("the config's mediaType is %q, want %q", m.Config.MediaType, ConfigMediaType)
	}
	if err := checkDescriptor("the config", m.Config, MaxConfigSize); err != nil {
		return nil, err
	}
	if len(m.Layers) > maxLayers {
		return nil, invalidf("the manifest has %d layers, over the limit of %d (%d chunks, the auxiliary storage and the hardware model)",
			len(m.Layers), maxLayers, MaxChunks)
	}
	p := &parsedManifest{Config: m.Config}
	var haveAux, haveHW bool
	for i, l := range m.Layers {
		what := fmt.Sprintf("layer %d", i)
		switch l.MediaType {
		case DiskMediaTypeZstd, DiskMediaTypeLZ4:
			c, err := parseChunk(what, l)
			if err != nil {
				return nil, err
			}
			if len(p.Chunks) == MaxChunks {
				return nil, invalidf("%s: more than %d disk chunks", what, MaxChunks)
			}
			c.Index = len(p.Chunks)
			c.Offset = p.diskBytes
			p.diskBytes += c.Size
			if p.diskBytes > MaxDiskSize {
				return nil, invalidf("%s: the disk's chunks add up to more than the limit of %d bytes", what, MaxDiskSize)
			}
			p.Chunks = append(p.Chunks, c)
		case AuxMediaType:
			if haveAux {
				return nil, invalidf("%s: a second auxiliary storage layer", what)
			}
			if err := checkDescriptor(what+" (auxiliary storage)", l, MaxAuxSize); err != nil {
				return nil, err
			}
			haveAux, p.AuxiliaryStorage = true, l
		case HardwareModelMediaType:
			if haveHW {
				return nil, invalidf("%s: a second hardware model layer", what)
			}
			if err := checkDescriptor(what+" (hardware model)", l, MaxHardwareModel); err != nil {
				return nil, err
			}
			haveHW, p.HardwareModel = true, l
		default:
			return nil, invalidf("%s: media type %q is none of a golden's (%s, %s, %s, %s)",
				what, l.MediaType, DiskMediaTypeZstd, DiskMediaTypeLZ4, AuxMediaType, HardwareModelMediaType)
		}
	}
	if len(p.Chunks) == 0 {
		return nil, invalidf("the manifest has no disk chunk")
	}
	if !haveAux {
		return nil, invalidf("the manifest has no auxiliary storage layer (%s)", AuxMediaType)
	}
	if !haveHW {
		return nil, invalidf("the manifest has no hardware model layer (%s)", HardwareModelMediaType)
	}
	return p, nil
}

// checkDescriptor checks a blob's size (positive, at most max) and digest
// (a valid sha256).
func checkDescriptor(what string, d ocispec.Descriptor, max int64) error {
	if d.Size <= 0 {
		return invalidf("%s: size %d is not positive", what, d.Size)
	}
	if d.Size > max {
		return invalidf("%s: size %d is over the limit of %d", what, d.Size, max)
	}
	if err := checkDigest(d.Digest); err != nil {
		return invalidf("%s: digest %q: %v", what, d.Digest, err)
	}
	return nil
}

func checkDigest(d digest.Digest) error {
	if d.Algorithm() != digest.SHA256 {
		return fmt.Errorf("not a sha256 digest")
	}
	return d.Validate()
}

func parseChunk(what string, l ocispec.Descriptor) (Chunk, error) {
	c := Chunk{Layer: l, Compression: Zstd}
	if l.MediaType == DiskMediaTypeLZ4 {
		c.Compression = LZ4
	}
	sizeText, ok := l.Annotations[AnnotationUncompressedSize]
	if !ok {
		return c, invalidf("%s: no %s annotation", what, AnnotationUncompressedSize)
	}
	if !canonicalSize.MatchString(sizeText) {
		return c, invalidf("%s: %s %q is not a positive decimal without sign or leading zeros", what, AnnotationUncompressedSize, sizeText)
	}
	size, err := strconv.ParseInt(sizeText, 10, 64)
	if err != nil || size > MaxChunkSize {
		return c, invalidf("%s: uncompressed size %s is over the chunk limit of %d", what, sizeText, MaxChunkSize)
	}
	c.Size = size
	digestText, ok := l.Annotations[AnnotationUncompressedDigest]
	if !ok {
		return c, invalidf("%s: no %s annotation", what, AnnotationUncompressedDigest)
	}
	c.Digest = digest.Digest(digestText)
	if err := checkDigest(c.Digest); err != nil {
		return c, invalidf("%s: %s %q: %v", what, AnnotationUncompressedDigest, digestText, err)
	}
	if err := checkDescriptor(what, l, MaxCompressedSize(size)); err != nil {
		return c, err
	}
	return c, nil
}

// fill checks the config against the parsed manifest and fills g.
func (g *Golden) fill(p *parsedManifest, config []byte) error {
	var cfg Config
	if err := json.Unmarshal(config, &cfg); err != nil {
		return invalidf("the config is not a golden config: %v", err)
	}
	if !versionPattern.MatchString(cfg.MacOSVersion) {
		return invalidf("the config's macOSVersion %q is not a version like 15.5", cfg.MacOSVersion)
	}
	if len(cfg.XcodeVersions) == 0 {
		return invalidf("the config names no Xcode version")
	}
	for i, v := range cfg.XcodeVersions {
		if !versionPattern.MatchString(v) {
			return invalidf("the config's xcodeVersions[%d] %q is not a version like 16.4", i, v)
		}
	}
	if cfg.ChunkBytes <= 0 || cfg.ChunkBytes > MaxChunkSize {
		return invalidf("the config's chunkBytes %d is not in 1..%d", cfg.ChunkBytes, MaxChunkSize)
	}
	if cfg.DiskBytes <= 0 || cfg.DiskBytes > MaxDiskSize {
		return invalidf("the config's diskBytes %d is not in 1..%d", cfg.DiskBytes, MaxDiskSize)
	}
	if cfg.DiskBytes != p.diskBytes {
		return invalidf("the config's diskBytes is %d, the chunks add up to %d", cfg.DiskBytes, p.diskBytes)
	}
	if cfg.MinimumDiskBytes < cfg.DiskBytes {
		return invalidf("the config's minimumDiskBytes %d is less than the disk's %d bytes", cfg.MinimumDiskBytes, cfg.DiskBytes)
	}
	if cfg.MinimumDiskBytes > MaxDiskSize {
		return invalidf("the config's minimumDiskBytes %d is over the limit of %d", cfg.MinimumDiskBytes, MaxDiskSize)
	}
	last := len(p.Chunks) - 1
	for i, c := range p.Chunks {
		if i < last && c.Size != cfg.ChunkBytes {
			return invalidf("chunk %d (layer %s): uncompressed size %d, but every chunk but the last must be chunkBytes %d",
				i, c.Layer.Digest, c.Size, cfg.ChunkBytes)
		}
		if i == last && c.Size > cfg.ChunkBytes {
			return invalidf("chunk %d (the last, layer %s): uncompressed size %d is over chunkBytes %d",
				i, c.Layer.Digest, c.Size, cfg.ChunkBytes)
		}
	}
	g.Config = cfg
	g.Chunks = p.Chunks
	g.AuxiliaryStorage = p.AuxiliaryStorage
	g.HardwareModel = p.HardwareModel
	return nil
}

// Resolve resolves reference in src, checks the manifest and then the config
// within the limits, and returns the golden. It refuses a manifest over
// MaxManifestSize from its descriptor, before fetching it, and a config over
// MaxConfigSize, or a manifest that is not a golden (such as one of 10,000
// layers), before fetching the config; it fetches no chunk. Fetches are
// checked against their descriptors' size and digest (content.ReadAll).
func Resolve(ctx context.Context, src oras.ReadOnlyTarget, reference string) (*Golden, error) {
	desc, err := src.Resolve(ctx, reference)
	if err != nil {
		return nil, fmt.Errorf("resolving %s: %w", reference, err)
	}
	if desc.MediaType != "" && desc.MediaType != ocispec.MediaTypeImageManifest {
		return nil, invalidf("%s is a %q, not an OCI image manifest", reference, desc.MediaType)
	}
	if desc.Size <= 0 || desc.Size > MaxManifestSize {
		return nil, invalidf("%s: the manifest is %d bytes, not in 1..%d", reference, desc.Size, MaxManifestSize)
	}
	if err := checkDigest(desc.Digest); err != nil {
		return nil, invalidf("%s: the manifest's digest %q: %v", reference, desc.Digest, err)
	}
	if want, ok := PinnedDigest(reference); ok && want != desc.Digest {
		return nil, fmt.Errorf("resolving %s: the registry answered with manifest %s", reference, desc.Digest)
	}
	manifest, err := fetchAll(ctx, src, desc)
	if err != nil {
		return nil, fmt.Errorf("fetching the manifest %s: %w", desc.Digest, err)
	}
	p, err := parseManifest(manifest)
	if err != nil {
		return nil, err
	}
	config, err := fetchAll(ctx, src, p.Config)
	if err != nil {
		return nil, fmt.Errorf("fetching the config %s: %w", p.Config.Digest, err)
	}
	g := &Golden{Manifest: ocispec.Descriptor{
		MediaType:    ocispec.MediaTypeImageManifest,
		ArtifactType: ArtifactType,
		Digest:       desc.Digest,
		Size:         desc.Size,
	}}
	if err := g.fill(p, config); err != nil {
		return nil, err
	}
	return g, nil
}

// fetchAll fetches desc and checks its size and digest.
func fetchAll(ctx context.Context, src content.Fetcher, desc ocispec.Descriptor) ([]byte, error) {
	rc, err := src.Fetch(ctx, desc)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	return content.ReadAll(rc, desc)
}

// PinnedDigest is the digest reference pins, whether it is a bare digest or
// a full reference (host/repository@digest); false if it pins none.
func PinnedDigest(reference string) (digest.Digest, bool) {
	if d, err := digest.Parse(reference); err == nil {
		return d, true
	}
	if ref, err := registry.ParseReference(reference); err == nil {
		if d, err := ref.Digest(); err == nil {
			return d, true
		}
	}
	return "", false
}
