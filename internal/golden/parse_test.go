package golden

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/opencontainers/go-digest"
	specs "github.com/opencontainers/image-spec/specs-go"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2/content/memory"
)

// fixture is a golden's manifest and config as structs, for a test to bend
// before they are marshalled. The chunks' digests are made up: Parse reads
// no chunk.
type fixture struct {
	manifest ocispec.Manifest
	config   Config
	// rawConfig, if set, replaces the marshalled config.
	rawConfig []byte
	// configDesc, if set, is applied to the config descriptor after it is
	// computed from the config bytes.
	configDesc func(*ocispec.Descriptor)
}

func fakeDigest(s string) digest.Digest { return digest.SHA256.FromString(s) }

func chunkLayer(i int, mediaType string, size int64) ocispec.Descriptor {
	return ocispec.Descriptor{
		MediaType: mediaType,
		Digest:    fakeDigest(fmt.Sprintf("compressed %d", i)),
		Size:      size/2 + 1,
		Annotations: map[string]string{
			AnnotationUncompressedSize:   strconv.FormatInt(size, 10),
			AnnotationUncompressedDigest: fakeDigest(fmt.Sprintf("uncompressed %d", i)).String(),
		},
	}
}

// newFixture is a valid golden of three chunks of 1 MiB, the last 1000
// bytes short.
func newFixture() *fixture {
	const chunk = 1 << 20
	sizes := []int64{chunk, chunk, chunk - 1000}
	var layers []ocispec.Descriptor
	var disk int64
	for i, s := range sizes {
		mt := DiskMediaTypeZstd
		if i == 1 {
			mt = DiskMediaTypeLZ4
		}
		layers = append(layers, chunkLayer(i, mt, s))
		disk += s
	}
	layers = append(layers,
		ocispec.Descriptor{MediaType: AuxMediaType, Digest: fakeDigest("aux"), Size: 32 << 20},
		ocispec.Descriptor{MediaType: HardwareModelMediaType, Digest: fakeDigest("hw"), Size: 100})
	return &fixture{
		manifest: ocispec.Manifest{
			Versioned:    specs.Versioned{SchemaVersion: 2},
			MediaType:    ocispec.MediaTypeImageManifest,
			ArtifactType: ArtifactType,
			Layers:       layers,
		},
		config: Config{
			MacOSVersion:     "15.5",
			XcodeVersions:    []string{"16.4", "16.3"},
			MinimumDiskBytes: 100 << 30,
			DiskBytes:        disk,
			ChunkBytes:       chunk,
		},
	}
}

func (f *fixture) bytes(t testing.TB) (manifest, config []byte) {
	t.Helper()
	config = f.rawConfig
	if config == nil {
		var err error
		if config, err = json.Marshal(f.config); err != nil {
			t.Fatal(err)
		}
	}
	m := f.manifest
	m.Config = ocispec.Descriptor{MediaType: ConfigMediaType, Digest: digest.SHA256.FromBytes(config), Size: int64(len(config))}
	if f.configDesc != nil {
		f.configDesc(&m.Config)
	}
	manifest, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return manifest, config
}

func TestParseAcceptsAGoldenAndComputesOffsets(t *testing.T) {
	f := newFixture()
	m, c := f.bytes(t)
	g, err := Parse(m, c)
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	if g.Manifest.Digest != digest.SHA256.FromBytes(m) || g.Manifest.Size != int64(len(m)) || g.Manifest.ArtifactType != ArtifactType {
		t.Errorf("Manifest descriptor %+v does not describe the manifest", g.Manifest)
	}
	if len(g.Chunks) != 3 {
		t.Fatalf("%d chunks, want 3", len(g.Chunks))
	}
	wantOffsets := []int64{0, 1 << 20, 2 << 20}
	wantComp := []Compression{Zstd, LZ4, Zstd}
	for i, ch := range g.Chunks {
		if ch.Index != i || ch.Offset != wantOffsets[i] || ch.Compression != wantComp[i] {
			t.Errorf("chunk %d: index %d offset %d compression %s, want %d %d %s", i, ch.Index, ch.Offset, ch.Compression, i, wantOffsets[i], wantComp[i])
		}
		if ch.Digest != fakeDigest(fmt.Sprintf("uncompressed %d", i)) {
			t.Errorf("chunk %d: digest %s", i, ch.Digest)
		}
	}
	if g.DiskSize() != 3<<20-1000 || g.Chunks[2].Size != 1<<20-1000 {
		t.Errorf("disk %d, last chunk %d", g.DiskSize(), g.Chunks[2].Size)
	}
	if g.AuxiliaryStorage.Digest != fakeDigest("aux") || g.HardwareModel.Digest != fakeDigest("hw") {
		t.Errorf("aux %s, hardware model %s", g.AuxiliaryStorage.Digest, g.HardwareModel.Digest)
	}
	if g.Config.MacOSVersion != "15.5" || len(g.Config.XcodeVersions) != 2 || g.Config.MinimumDiskBytes != 100<<30 {
		t.Errorf("config %+v", g.Config)
	}
}

func setAnnotation(f *fixture, layer int, key, value string) {
	a := map[string]string{}
	for k, v := range f.manifest.Layers[layer].Annotations {
		a[k] = v
	}
	a[key] = value
	f.manifest.Layers[layer].Annotations = a
}

func dropAnnotation(f *fixture, layer int, key string) {
	a := map[string]string{}
	for k, v := range f.manifest.Layers[layer].Annotations {
		if k != key {
			a[k] = v
		}
	}
	f.manifest.Layers[layer].Annotations = a
}

func TestParseRefusals(t *testing.T) {
	cases := []struct {
		name   string
		bend   func(f *fixture)
		wantIn []string
	}{
		{"a Docker manifest", func(f *fixture) { f.manifest.MediaType = "application/vnd.docker.distribution.manifest.v2+json" }, []string{"mediaType", "docker"}},
		{"no artifactType", func(f *fixture) { f.manifest.ArtifactType = "" }, []string{"artifactType"}},
		{"another artifactType", func(f *fixture) { f.manifest.ArtifactType = "application/vnd.example.thing" }, []string{"artifactType", "vnd.example.thing"}},
		{"schemaVersion 1", func(f *fixture) { f.manifest.SchemaVersion = 1 }, []string{"schemaVersion is 1"}},
		{"an image config", func(f *fixture) {
			f.configDesc = func(d *ocispec.Descriptor) { d.MediaType = ocispec.MediaTypeImageConfig }
		}, []string{"config's mediaType", ocispec.MediaTypeImageConfig}},
		{"a tar layer", func(f *fixture) { f.manifest.Layers[1].MediaType = ocispec.MediaTypeImageLayerGzip }, []string{"layer 1", ocispec.MediaTypeImageLayerGzip}},
		{"two aux layers", func(f *fixture) {
			f.manifest.Layers = append(f.manifest.Layers, ocispec.Descriptor{MediaType: AuxMediaType, Digest: fakeDigest("aux2"), Size: 10})
		}, []string{"layer 5", "second auxiliary"}},
		{"two hardware models", func(f *fixture) {
			f.manifest.Layers = append(f.manifest.Layers, ocispec.Descriptor{MediaType: HardwareModelMediaType, Digest: fakeDigest("hw2"), Size: 10})
		}, []string{"layer 5", "second hardware model"}},
		{"no aux", func(f *fixture) { f.manifest.Layers = append(f.manifest.Layers[:3:3], f.manifest.Layers[4]) }, []string{"no auxiliary storage"}},
		{"no hardware model", func(f *fixture) { f.manifest.Layers = f.manifest.Layers[:4] }, []string{"no hardware model"}},
		{"no chunk", func(f *fixture) { f.manifest.Layers = f.manifest.Layers[3:] }, []string{"no disk chunk"}},
		{"no uncompressed size", func(f *fixture) { dropAnnotation(f, 1, AnnotationUncompressedSize) }, []string{"layer 1", "no " + AnnotationUncompressedSize}},
		{"no uncompressed digest", func(f *fixture) { dropAnnotation(f, 2, AnnotationUncompressedDigest) }, []string{"layer 2", "no " + AnnotationUncompressedDigest}},
		{"size +5", func(f *fixture) { setAnnotation(f, 0, AnnotationUncompressedSize, "+5") }, []string{"layer 0", `"+5"`, "leading zeros"}},
		{"size 05", func(f *fixture) { setAnnotation(f, 0, AnnotationUncompressedSize, "05") }, []string{"layer 0", `"05"`}},
		{"size 0", func(f *fixture) { setAnnotation(f, 0, AnnotationUncompressedSize, "0") }, []string{"layer 0", `"0"`}},
		{"size -5", func(f *fixture) { setAnnotation(f, 0, AnnotationUncompressedSize, "-5") }, []string{"layer 0", `"-5"`}},
		{"size with a space", func(f *fixture) { setAnnotation(f, 0, AnnotationUncompressedSize, " 1048576") }, []string{"layer 0", `" 1048576"`}},
		{"size in hex", func(f *fixture) { setAnnotation(f, 0, AnnotationUncompressedSize, "0x100000") }, []string{"layer 0", `"0x100000"`}},
		{"size 1e6", func(f *fixture) { setAnnotation(f, 0, AnnotationUncompressedSize, "1e6") }, []string{"layer 0", `"1e6"`}},
		{"a chunk of 1 EiB", func(f *fixture) { setAnnotation(f, 1, AnnotationUncompressedSize, strconv.FormatInt(1<<60, 10)) }, []string{"layer 1", "1152921504606846976", "over the chunk limit"}},
		{"a chunk past int64", func(f *fixture) { setAnnotation(f, 1, AnnotationUncompressedSize, "99999999999999999999999") }, []string{"layer 1", "over the chunk limit"}},
		{"a chunk of 4 GiB and one byte", func(f *fixture) {
			setAnnotation(f, 1, AnnotationUncompressedSize, strconv.FormatInt(MaxChunkSize+1, 10))
		}, []string{"layer 1", "4294967297", "over the chunk limit"}},
		{"an md5 digest", func(f *fixture) {
			setAnnotation(f, 0, AnnotationUncompressedDigest, "md5:d41d8cd98f00b204e9800998ecf8427e")
		}, []string{"layer 0", "md5", "sha256"}},
		{"a short digest", func(f *fixture) { setAnnotation(f, 0, AnnotationUncompressedDigest, "sha256:abc") }, []string{"layer 0", "sha256:abc"}},
		{"an upper-case digest", func(f *fixture) {
			setAnnotation(f, 0, AnnotationUncompressedDigest, strings.ToUpper(fakeDigest("x").String()))
		}, []string{"layer 0", AnnotationUncompressedDigest}},
		{"a bad layer digest", func(f *fixture) { f.manifest.Layers[2].Digest = "sha256:zz" }, []string{"layer 2", "sha256:zz"}},
		{"an empty compressed layer", func(f *fixture) { f.manifest.Layers[0].Size = 0 }, []string{"layer 0", "size 0 is not positive"}},
		{"a compressed layer far over its chunk", func(f *fixture) { f.manifest.Layers[0].Size = 1 << 30 }, []string{"layer 0", "1073741824", "over the limit"}},
		{"an aux over 256 MiB", func(f *fixture) { f.manifest.Layers[3].Size = MaxAuxSize + 1 }, []string{"layer 3", "auxiliary", "over the limit"}},
		{"a hardware model over 64 KiB", func(f *fixture) { f.manifest.Layers[4].Size = MaxHardwareModel + 1 }, []string{"layer 4", "hardware model", "over the limit"}},
		{"a config over 64 KiB", func(f *fixture) {
			f.configDesc = func(d *ocispec.Descriptor) { d.Size = MaxConfigSize + 1 }
		}, []string{"the config", "over the limit"}},
		{"a middle chunk short", func(f *fixture) {
			setAnnotation(f, 1, AnnotationUncompressedSize, "1000")
			f.config.DiskBytes = 2<<20 - 1000 + 1000
		}, []string{"chunk 1", "1000", "chunkBytes 1048576"}},
		{"the last chunk over chunkBytes", func(f *fixture) {
			setAnnotation(f, 2, AnnotationUncompressedSize, strconv.FormatInt(1<<20+1, 10))
			f.config.DiskBytes = 3<<20 + 1
		}, []string{"chunk 2 (the last", "1048577 is over chunkBytes 1048576"}},
		{"diskBytes not the chunks' sum", func(f *fixture) { f.config.DiskBytes++ }, []string{"diskBytes is 3144729", "add up to 3144728"}},
		{"minimum disk below the disk", func(f *fixture) { f.config.MinimumDiskBytes = 1 << 20 }, []string{"minimumDiskBytes 1048576", "less than"}},
		{"no minimum disk", func(f *fixture) { f.config.MinimumDiskBytes = 0 }, []string{"minimumDiskBytes 0"}},
		{"a minimum disk of 1 EiB", func(f *fixture) { f.config.MinimumDiskBytes = 1 << 60 }, []string{"minimumDiskBytes", "over the limit"}},
		{"chunkBytes 0", func(f *fixture) { f.config.ChunkBytes = 0 }, []string{"chunkBytes 0"}},
		{"macOS v15", func(f *fixture) { f.config.MacOSVersion = "v15" }, []string{`macOSVersion "v15"`}},
		{"macOS 15.5.1.2", func(f *fixture) { f.config.MacOSVersion = "15.5.1.2" }, []string{`"15.5.1.2"`}},
		{"no macOS", func(f *fixture) { f.config.MacOSVersion = "" }, []string{`macOSVersion ""`}},
		{"no Xcode", func(f *fixture) { f.config.XcodeVersions = nil }, []string{"no Xcode"}},
		{"Xcode beta", func(f *fixture) { f.config.XcodeVersions = []string{"16.4", "26.0b1"} }, []string{`xcodeVersions[1] "26.0b1"`}},
		{"a config that is not JSON", func(f *fixture) { f.rawConfig = []byte("macOS 15.5") }, []string{"config is not a golden config"}},
		{"a config whose digest is not the manifest's", func(f *fixture) {
			f.configDesc = func(d *ocispec.Descriptor) { d.Digest = fakeDigest("other config") }
		}, []string{"config blob's digest"}},
		{"10,000 layers", func(f *fixture) {
			for i := range 10000 {
				f.manifest.Layers = append(f.manifest.Layers, chunkLayer(i, DiskMediaTypeZstd, 1<<20))
			}
		}, []string{"10005 layers", "limit of 4098"}},
		{"4097 chunks", func(f *fixture) {
			var l []ocispec.Descriptor
			for i := range MaxChunks + 1 {
				l = append(l, chunkLayer(i, DiskMediaTypeZstd, 1<<20))
			}
			f.manifest.Layers = l
		}, []string{"layer 4096", "more than 4096 disk chunks"}},
		{"a disk over 4 TiB", func(f *fixture) {
			var l []ocispec.Descriptor
			for i := range 1025 {
				l = append(l, chunkLayer(i, DiskMediaTypeZstd, MaxChunkSize))
			}
			f.manifest.Layers = append(l, f.manifest.Layers[3:]...)
		}, []string{"layer 1024", "more than the limit of 4398046511104"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			// The positive control: the same fixture, unbent, parses.
			m, c := newFixture().bytes(t)
			if _, err := Parse(m, c); err != nil {
				t.Fatalf("the unbent fixture: %v", err)
			}
			f := newFixture()
			tc.bend(f)
			m, c = f.bytes(t)
			g, err := Parse(m, c)
			if err == nil {
				t.Fatalf("Parse accepted it: %+v", g.Config)
			}
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("the error does not wrap ErrInvalid: %v", err)
			}
			for _, s := range tc.wantIn {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("the error lacks %q: %v", s, err)
				}
			}
		})
	}
}

func TestParseRefusesNonsense(t *testing.T) {
	for _, m := range []string{"", "null", "[]", "{} {}", `{"schemaVersion":2}`, strings.Repeat(" ", int(MaxManifestSize)+1)} {
		if _, err := Parse([]byte(m), []byte("{}")); !errors.Is(err, ErrInvalid) {
			t.Errorf("Parse(%.20q): %v, want ErrInvalid", m, err)
		}
	}
}

// countingStore is a memory store that counts the fetches of each blob.
type countingStore struct {
	*memory.Store
	mu      sync.Mutex
	fetches map[digest.Digest]int
}

func newCountingStore() *countingStore {
	return &countingStore{Store: memory.New(), fetches: map[digest.Digest]int{}}
}

func (s *countingStore) Fetch(ctx context.Context, d ocispec.Descriptor) (io.ReadCloser, error) {
	s.mu.Lock()
	s.fetches[d.Digest]++
	s.mu.Unlock()
	return s.Store.Fetch(ctx, d)
}

func (s *countingStore) total() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, c := range s.fetches {
		n += c
	}
	return n
}

func (s *countingStore) count(d digest.Digest) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.fetches[d]
}

// store pushes the fixture's manifest and config (no chunk: Resolve must
// not want one) and tags the manifest "golden".
func (f *fixture) store(t *testing.T) (*countingStore, ocispec.Descriptor, []byte) {
	t.Helper()
	ctx := context.Background()
	m, c := f.bytes(t)
	s := newCountingStore()
	var manifest ocispec.Manifest
	if err := json.Unmarshal(m, &manifest); err != nil {
		t.Fatal(err)
	}
	if err := s.Store.Push(ctx, manifest.Config, bytes.NewReader(c)); err != nil {
		t.Fatal(err)
	}
	desc := ocispec.Descriptor{MediaType: ocispec.MediaTypeImageManifest, Digest: digest.SHA256.FromBytes(m), Size: int64(len(m))}
	if err := s.Store.Push(ctx, desc, bytes.NewReader(m)); err != nil {
		t.Fatal(err)
	}
	if err := s.Tag(ctx, desc, "golden"); err != nil {
		t.Fatal(err)
	}
	return s, desc, m
}

func TestResolveFetchesTheManifestAndConfigOnly(t *testing.T) {
	s, desc, _ := newFixture().store(t)
	g, err := Resolve(context.Background(), s, "golden")
	if err != nil {
		t.Fatalf("Resolve: %v", err)
	}
	if g.Manifest.Digest != desc.Digest || len(g.Chunks) != 3 {
		t.Errorf("golden %s with %d chunks", g.Manifest.Digest, len(g.Chunks))
	}
	if n := s.total(); n != 2 {
		t.Errorf("%d fetches, want 2 (the manifest and the config)", n)
	}
	if _, err := Resolve(context.Background(), s, "nothing"); err == nil || errors.Is(err, ErrInvalid) {
		t.Errorf("Resolve of an unknown tag: %v, want a not-found error", err)
	}
}

func TestResolveRefuses10000LayersBeforeFetchingABlob(t *testing.T) {
	f := newFixture()
	for i := range 10000 {
		f.manifest.Layers = append(f.manifest.Layers, chunkLayer(i, DiskMediaTypeZstd, 1<<20))
	}
	s, desc, m := f.store(t)
	if int64(len(m)) > MaxManifestSize {
		t.Fatalf("the manifest is %d bytes: the test means the layer count to refuse it, not the size", len(m))
	}
	_, err := Resolve(context.Background(), s, "golden")
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "10005 layers") {
		t.Fatalf("Resolve: %v, want the layer count refused", err)
	}
	if n, mn := s.total(), s.count(desc.Digest); n != 1 || mn != 1 {
		t.Errorf("%d fetches (%d of the manifest), want only the manifest's", n, mn)
	}
}

func TestResolveRefusesAHugeManifestBeforeFetchingIt(t *testing.T) {
	f := newFixture()
	f.manifest.Annotations = map[string]string{"padding": strings.Repeat("x", int(MaxManifestSize))}
	s, _, _ := f.store(t)
	_, err := Resolve(context.Background(), s, "golden")
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "bytes, not in 1..4194304") {
		t.Fatalf("Resolve: %v, want the manifest's size refused", err)
	}
	if n := s.total(); n != 0 {
		t.Errorf("%d fetches, want none", n)
	}
}

func TestResolveRefusesAHugeConfigBeforeFetchingIt(t *testing.T) {
	f := newFixture()
	f.rawConfig = append(bytes.Repeat([]byte(" "), int(MaxConfigSize)), []byte(`{}`)...)
	s, desc, _ := f.store(t)
	_, err := Resolve(context.Background(), s, "golden")
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "the config: size 65538 is over the limit of 65536") {
		t.Fatalf("Resolve: %v, want the config's size refused", err)
	}
	if n := s.total(); n != 1 || s.count(desc.Digest) != 1 {
		t.Errorf("%d fetches, want only the manifest's", n)
	}
}

func TestResolveRefusesAChunkOf1EiB(t *testing.T) {
	f := newFixture()
	setAnnotation(f, 0, AnnotationUncompressedSize, strconv.FormatInt(1<<60, 10))
	s, _, _ := f.store(t)
	_, err := Resolve(context.Background(), s, "golden")
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "over the chunk limit") {
		t.Fatalf("Resolve: %v, want the chunk refused", err)
	}
	if n := s.total(); n != 1 {
		t.Errorf("%d fetches, want only the manifest's", n)
	}
}

func TestParseReference(t *testing.T) {
	hex := strings.Repeat("ab", 32)
	good := []struct{ in, registry, repo string }{
		{"127.0.0.1:5000/goldens/macos@sha256:" + hex, "127.0.0.1:5000", "goldens/macos"},
		{"registry.example.com/macos@sha256:" + hex, "registry.example.com", "macos"},
		// A tag beside the digest is dropped: the digest wins.
		{"127.0.0.1:5000/goldens/macos:15.5@sha256:" + hex, "127.0.0.1:5000", "goldens/macos"},
	}
	for _, tc := range good {
		ref, err := ParseReference(tc.in)
		if err != nil {
			t.Errorf("ParseReference(%q): %v", tc.in, err)
			continue
		}
		if ref.Registry != tc.registry || ref.Repository != tc.repo || ref.Reference != "sha256:"+hex {
			t.Errorf("ParseReference(%q) = %+v", tc.in, ref)
		}
	}
	bad := []struct{ in, want string }{
		{"127.0.0.1:5000/goldens/macos:15.5", "is a tag (15.5), not pinned by digest"},
		{"127.0.0.1:5000/goldens/macos", "names no digest"},
		{"macos@sha256:" + hex, "missing registry or repository"},
		{"127.0.0.1:5000/goldens/macos@sha256:abc", "invalid"},
		{"127.0.0.1:5000/goldens/macos@sha512:" + strings.Repeat("ab", 64), "digest"},
		{"127.0.0.1:5000/Goldens@sha256:" + hex, "invalid"},
	}
	for _, tc := range bad {
		if _, err := ParseReference(tc.in); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseReference(%q): %v, want an error with %q", tc.in, err, tc.want)
		}
	}
}

func TestDockerConfigCredentials(t *testing.T) {
	cfg := `{"auths":{
		"127.0.0.1:5000":{"auth":"` + "dXNlcjpwYXNzOndvcmQ=" + `"},
		"https://registry.example.com/v1/":{"username":"bob","password":"secret"},
		"tokens.example.com":{"identitytoken":"refresh"}}}`
	cred, err := DockerConfigCredentials([]byte(cfg))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if c, _ := cred(ctx, "127.0.0.1:5000"); c.Username != "user" || c.Password != "pass:word" {
		t.Errorf("127.0.0.1:5000: %+v", c)
	}
	if c, _ := cred(ctx, "registry.example.com"); c.Username != "bob" || c.Password != "secret" {
		t.Errorf("registry.example.com: %+v", c)
	}
	if c, _ := cred(ctx, "tokens.example.com"); c.RefreshToken != "refresh" {
		t.Errorf("tokens.example.com: %+v", c)
	}
	if c, _ := cred(ctx, "other.example.com"); c.Username != "" || c.Password != "" {
		t.Errorf("an unnamed host got %+v", c)
	}
	for _, bad := range []string{`{"auths":`, `{"auths":{"h":{"auth":"!!"}}}`, `{"auths":{"h":{"auth":"bm9jb2xvbg=="}}}`} {
		if _, err := DockerConfigCredentials([]byte(bad)); err == nil {
			t.Errorf("DockerConfigCredentials(%s) accepted it", bad)
		}
	}
	if _, err := DockerConfigCredentials(nil); err != nil {
		t.Errorf("no config: %v", err)
	}
}
