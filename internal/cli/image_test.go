package cli

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/boualleiguie/macrack-operator/internal/golden"
	"github.com/boualleiguie/macrack-operator/test/registry"
)

// vmFiles writes a small sparse VM: a disk of 2.5 MiB (random, a hole,
// text), an auxiliary storage and a hardware model.
func vmFiles(t *testing.T) (disk, aux, hw string, diskBytes int64) {
	t.Helper()
	dir := t.TempDir()
	disk, aux, hw = filepath.Join(dir, "disk.img"), filepath.Join(dir, "aux.img"), filepath.Join(dir, "hw.bin")
	diskBytes = 5 << 19
	f, err := os.Create(disk)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(diskBytes); err != nil {
		t.Fatal(err)
	}
	random := make([]byte, 300<<10)
	rng := rand.New(rand.NewPCG(7, 8))
	for i := range random {
		random[i] = byte(rng.Uint32())
	}
	if _, err := f.WriteAt(random, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(bytes.Repeat([]byte("golden "), 50000), 2<<20); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(aux, bytes.Repeat([]byte{1, 2, 3, 4}, 1<<14), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(hw, []byte("hardware model"), 0o644); err != nil {
		t.Fatal(err)
	}
	return disk, aux, hw, diskBytes
}

func TestImagePushThenInspectThroughARealRegistry(t *testing.T) {
	reg := registry.StartT(t)
	disk, aux, hw, diskBytes := vmFiles(t)
	repo := reg.Host() + "/goldens/macos"

	push := runCLI(t, "", "image", "push", "--disk", disk, "--aux", aux, "--hardware-model", hw,
		"--macos", "15.5", "--xcode", "16.4", "--xcode", "16.3,16.2", "--minimum-disk", "100Gi",
		"--chunk-size", "1Mi", "--compression", "lz4", "--concurrency", "2", "--plain-http", repo+":15.5")
	if push.code != 0 {
		t.Fatalf("push: exit %d\nstdout:\n%s\nstderr:\n%s", push.code, push.stdout, push.stderr)
	}
	pinned := strings.TrimSpace(push.stdout)
	if !strings.HasPrefix(pinned, repo+"@sha256:") || strings.Count(push.stdout, "\n") != 1 {
		t.Fatalf("push printed %q, want one line %s@sha256:...", push.stdout, repo)
	}
	if _, err := golden.ParseReference(pinned); err != nil {
		t.Errorf("the printed reference is not pinned: %v", err)
	}
	if !strings.Contains(push.stderr, "pushing "+repo+":15.5") || !strings.Contains(push.stderr, "100%") {
		t.Errorf("stderr lacks the progress bar:\n%s", push.stderr)
	}

	table := runCLI(t, "", "image", "inspect", "--plain-http", pinned)
	expectation{code: 0, stdout: []string{
		"Golden:", pinned,
		"macOS:", "15.5",
		"Xcode:", "16.4, 16.3, 16.2",
		"Minimum disk:", "100.0 GiB (107374182400 bytes)",
		"2.5 MiB (2621440 bytes) in 3 chunks of 1.0 MiB, lz4",
		"Auxiliary storage:", "64.0 KiB (65536 bytes)",
		"Hardware model:", "14 B (14 bytes)",
		"CHUNK", "OFFSET", "COMPRESSED", "LAYER DIGEST",
		"1048576", "2097152", "524288",
	}}.check(t, table)

	js := runCLI(t, "", "image", "inspect", "--plain-http", "-o", "json", repo+":15.5")
	if js.code != 0 {
		t.Fatalf("inspect -o json: exit %d\n%s", js.code, js.stderr)
	}
	var r GoldenReport
	if err := json.Unmarshal([]byte(js.stdout), &r); err != nil {
		t.Fatalf("inspect -o json is not JSON: %v\n%s", err, js.stdout)
	}
	if r.APIVersion != "macrackctl/v1" || r.Kind != "GoldenImage" || r.Reference != pinned {
		t.Errorf("envelope %s %s %s, want the pinned %s", r.APIVersion, r.Kind, r.Reference, pinned)
	}
	if r.MacOSVersion != "15.5" || strings.Join(r.XcodeVersions, ",") != "16.4,16.3,16.2" || r.MinimumDiskBytes != 100<<30 ||
		r.DiskBytes != diskBytes || r.ChunkBytes != 1<<20 || r.Compression != "lz4" || len(r.Chunks) != 3 {
		t.Errorf("report %+v", r)
	}
	var sum int64
	for i, c := range r.Chunks {
		if c.Index != i || c.Offset != int64(i)<<20 || c.Layer.MediaType != golden.DiskMediaTypeLZ4 ||
			!strings.HasPrefix(c.Digest, "sha256:") || !strings.HasPrefix(c.Layer.Digest, "sha256:") {
			t.Errorf("chunk %d: %+v", i, c)
		}
		sum += c.Layer.Size
	}
	if sum != r.CompressedBytes || r.AuxiliaryStorage.Size != 65536 || r.HardwareModel.Size != 14 {
		t.Errorf("compressed %d (chunks add to %d), aux %d, hw %d", r.CompressedBytes, sum, r.AuxiliaryStorage.Size, r.HardwareModel.Size)
	}

	// Pushing the same files again uploads nothing new and pins the same.
	again := runCLI(t, "", "image", "push", "--disk", disk, "--aux", aux, "--hardware-model", hw,
		"--macos", "15.5", "--xcode", "16.4,16.3,16.2", "--minimum-disk", strconv.FormatInt(100<<30, 10),
		"--chunk-size", "1Mi", "--compression", "lz4", "--plain-http", repo+":again")
	if again.code != 0 || strings.TrimSpace(again.stdout) != pinned {
		t.Errorf("a second push: exit %d, %q, want %s\n%s", again.code, again.stdout, pinned, again.stderr)
	}
}

func TestImageInspectRefusesWhatIsNotAGolden(t *testing.T) {
	reg := registry.StartT(t)
	r := runCLI(t, "", "image", "inspect", "--plain-http", reg.Host()+"/goldens/none:15.5")
	expectation{code: 2, stderr: []string{"goldens/none:15.5", "not found"}, absent: noStackTrace}.check(t, r)
}

func TestImageUsage(t *testing.T) {
	disk, aux, hw, _ := vmFiles(t)
	base := []string{"image", "push", "--disk", disk, "--aux", aux, "--hardware-model", hw, "--macos", "15.5", "--xcode", "16.4"}
	with := func(extra ...string) []string { return append(append([]string{}, base...), extra...) }
	cases := []struct {
		name string
		args []string
		want expectation
	}{
		{"image --help lists push and inspect", []string{"image", "--help"}, expectation{code: 0, stdout: []string{"push", "inspect"}}},
		{"help image push shows its flags", []string{"help", "image", "push"}, expectation{code: 0, stdout: []string{"--chunk-size SIZE", "--docker-config FILE"}}},
		{"image alone is a usage error", []string{"image"}, expectation{code: 2, stderr: []string{"no subcommand given"}}},
		{"an unknown image subcommand", []string{"image", "pull"}, expectation{code: 2, stderr: []string{`unknown subcommand "pull"`}}},
		{"push wants a repository", base, expectation{code: 2, stderr: []string{"want exactly one REPO[:TAG], got 0"}}},
		{"push wants --disk", []string{"image", "push", "127.0.0.1:1/x:1"}, expectation{code: 2, stderr: []string{"--disk is required"}}},
		{"push wants an Xcode", []string{"image", "push", "--disk", disk, "--aux", aux, "--hardware-model", hw, "--macos", "15.5", "127.0.0.1:1/x:1"},
			expectation{code: 2, stderr: []string{"--xcode is required"}}},
		{"push refuses gzip", with("--compression", "gzip", "127.0.0.1:1/x:1"), expectation{code: 2, stderr: []string{`"gzip" is neither zstd nor lz4`}}},
		{"push refuses a bad size", with("--chunk-size", "lots", "127.0.0.1:1/x:1"), expectation{code: 2, stderr: []string{`"lots" is not a size`}}},
		{"push refuses a digest", with("127.0.0.1:1/x@sha256:" + strings.Repeat("0", 64)), expectation{code: 2, stderr: []string{"names a digest"}}},
		{"push refuses a bad version before the network", with("--macos", "fifteen", "127.0.0.1:1/x:1"),
			expectation{code: 2, stderr: []string{`"fifteen"`}, absent: noStackTrace}},
		{"push to nowhere says so", with("--plain-http", "127.0.0.1:1/x:1"), expectation{code: 2, stderr: []string{"pushing 127.0.0.1:1/x:1"}, absent: noStackTrace}},
		{"inspect wants a reference", []string{"image", "inspect"}, expectation{code: 2, stderr: []string{"want exactly one REF"}}},
		{"inspect wants a tag or digest", []string{"image", "inspect", "127.0.0.1:1/x"}, expectation{code: 2, stderr: []string{"names no tag or digest"}}},
		{"inspect has no junit", []string{"image", "inspect", "-o", "junit", "127.0.0.1:1/x:1"}, expectation{code: 2, stderr: []string{"junit does not apply"}}},
		{"inspect reads the docker config", []string{"image", "inspect", "--docker-config", "/nonexistent/config.json", "127.0.0.1:1/x:1"},
			expectation{code: 2, stderr: []string{"the docker config"}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tc.want.check(t, runCLI(t, "", tc.args...))
		})
	}
}
