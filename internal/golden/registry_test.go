package golden

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"oras.land/oras-go/v2/content"

	"github.com/boualleiguie/macrack-operator/test/registry"
)

// These tests run against the real registry (`make registry` builds it);
// without it they fail, saying so.

func TestPushAndResolveThroughARealRegistry(t *testing.T) {
	reg := registry.StartT(t)
	for _, comp := range []Compression{Zstd, LZ4} {
		t.Run(string(comp), func(t *testing.T) {
			ctx := context.Background()
			src, want := testSource(t)
			repoName := reg.Host() + "/goldens/macos-" + string(comp)
			repo, err := Repository(repoName, RemoteOptions{PlainHTTP: true})
			if err != nil {
				t.Fatal(err)
			}
			desc, err := Push(ctx, repo, "15.5", src, PushOptions{ChunkSize: 1 << 20, Compression: comp})
			if err != nil {
				t.Fatalf("Push: %v", err)
			}
			pinned := repoName + "@" + desc.Digest.String()
			ref, err := ParseReference(pinned)
			if err != nil {
				t.Fatalf("ParseReference(%s): %v", pinned, err)
			}
			// A fresh repository, as a puller would open it.
			pull, err := Repository(pinned, RemoteOptions{PlainHTTP: true})
			if err != nil {
				t.Fatal(err)
			}
			g, err := Resolve(ctx, pull, ref.Reference)
			if err != nil {
				t.Fatalf("Resolve(%s): %v", pinned, err)
			}
			if g.Manifest.Digest != desc.Digest || len(g.Chunks) != 3 || g.DiskSize() != int64(len(want)) {
				t.Fatalf("golden %s: %d chunks, %d bytes", g.Manifest.Digest, len(g.Chunks), g.DiskSize())
			}
			if got := reassemble(t, pull, g); !bytes.Equal(got, want) {
				t.Fatal("the disk pulled differs from the disk pushed")
			}
			for _, d := range []struct {
				name string
				size int64
				dg   string
			}{{"aux", g.AuxiliaryStorage.Size, g.AuxiliaryStorage.Digest.String()}, {"hw", g.HardwareModel.Size, g.HardwareModel.Digest.String()}} {
				if d.size == 0 || d.dg == "" {
					t.Errorf("%s: %d bytes %s", d.name, d.size, d.dg)
				}
			}
			rc, err := pull.Fetch(ctx, g.HardwareModel)
			if err != nil {
				t.Fatal(err)
			}
			hw, err := content.ReadAll(rc, g.HardwareModel)
			rc.Close()
			if err != nil || string(hw) != "hardware model bytes" {
				t.Errorf("the hardware model: %q, %v", hw, err)
			}
			// The tag resolves to the same golden.
			byTag, err := Resolve(ctx, pull, "15.5")
			if err != nil || byTag.Manifest.Digest != desc.Digest {
				t.Errorf("Resolve by tag: %v, %v", byTag, err)
			}
		})
	}
}

func TestARegistryRestartKeepsTheGolden(t *testing.T) {
	reg := registry.StartT(t)
	ctx := context.Background()
	src, want := testSource(t)
	repo, err := Repository(reg.Host()+"/goldens/macos", RemoteOptions{PlainHTTP: true})
	if err != nil {
		t.Fatal(err)
	}
	desc, err := Push(ctx, repo, "", src, PushOptions{ChunkSize: 1 << 20})
	if err != nil {
		t.Fatalf("Push: %v", err)
	}
	if err := reg.Restart(); err != nil {
		t.Fatalf("Restart: %v", err)
	}
	g, err := Resolve(ctx, repo, desc.Digest.String())
	if err != nil {
		t.Fatalf("Resolve after a restart: %v", err)
	}
	if got := reassemble(t, repo, g); !bytes.Equal(got, want) {
		t.Fatal("the disk differs after a restart")
	}
}

func TestACorruptBlobInTheRegistryIsCaught(t *testing.T) {
	reg := registry.StartT(t)
	ctx := context.Background()
	src, _ := testSource(t)
	repo, err := Repository(reg.Host()+"/goldens/macos", RemoteOptions{PlainHTTP: true})
	if err != nil {
		t.Fatal(err)
	}
	desc, err := Push(ctx, repo, "15.5", src, PushOptions{ChunkSize: 1 << 20})
	if err != nil {
		t.Fatalf("Push: %v", err)
	}
	g, err := Resolve(ctx, repo, desc.Digest.String())
	if err != nil {
		t.Fatal(err)
	}
	// The positive control: chunk 0 reads whole before it is damaged.
	c := g.Chunks[0]
	rc, err := repo.Fetch(ctx, c.Layer)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := content.ReadAll(rc, c.Layer); err != nil {
		t.Fatalf("chunk 0 before the damage: %v", err)
	}
	rc.Close()

	// Damage chunk 0's blob where the registry stores it: same length,
	// some bytes in the middle flipped.
	path := reg.BlobPath(c.Layer.Digest.String())
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("the blob's data file: %v", err)
	}
	if int64(len(data)) != c.Layer.Size {
		t.Fatalf("the data file is %d bytes, the layer %d", len(data), c.Layer.Size)
	}
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	mid := int64(len(data) / 2)
	if _, err := f.WriteAt([]byte{^data[mid], ^data[mid+1], ^data[mid+2]}, mid); err != nil {
		t.Fatal(err)
	}
	f.Close()

	// content.ReadAll's digest check catches it...
	rc, err = repo.Fetch(ctx, c.Layer)
	if err != nil {
		t.Fatal(err)
	}
	_, err = content.ReadAll(rc, c.Layer)
	rc.Close()
	if !errors.Is(err, content.ErrMismatchedDigest) {
		t.Errorf("content.ReadAll of the damaged blob: %v, want ErrMismatchedDigest", err)
	}
	// ...and so does a chunk's reader, as ErrCorrupt, before io.EOF.
	rc, err = c.Fetch(ctx, repo)
	if err != nil {
		t.Fatal(err)
	}
	n, err := io.Copy(io.Discard, rc)
	rc.Close()
	if !errors.Is(err, ErrCorrupt) {
		t.Errorf("reading the damaged chunk: %d bytes, %v, want ErrCorrupt", n, err)
	}
	// The other chunks are untouched.
	for _, c := range g.Chunks[1:] {
		rc, err := c.Fetch(ctx, repo)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.Copy(io.Discard, rc); err != nil {
			t.Errorf("chunk %d: %v", c.Index, err)
		}
		rc.Close()
	}
}

// testHtpasswd is the user macrack with the password golden-secret (bcrypt,
// cost 4).
const testHtpasswd = "macrack:$2a$04$IlUUGsaIi/SCZqvvnaXDFOniTh9htcPeOpaaq4WXOBJiY3sBCYe.2\n"

func TestCredentialsFromADockerConfig(t *testing.T) {
	htpasswd := filepath.Join(t.TempDir(), "htpasswd")
	if err := os.WriteFile(htpasswd, []byte(testHtpasswd), 0o600); err != nil {
		t.Fatal(err)
	}
	reg, err := registry.StartWith(t.TempDir(), registry.Options{Htpasswd: htpasswd})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(reg.Stop)
	ctx := context.Background()
	src, _ := testSource(t)
	name := reg.Host() + "/goldens/macos"
	dockerConfig := func(entry string) []byte {
		return []byte(`{"auths":{"` + reg.Host() + `":` + entry + `}}`)
	}
	good := dockerConfig(`{"auth":"` + base64.StdEncoding.EncodeToString([]byte("macrack:golden-secret")) + `"}`)
	cases := []struct {
		name   string
		config []byte
		ok     bool
	}{
		{"anonymous", nil, false},
		{"a wrong password", dockerConfig(`{"username":"macrack","password":"guess"}`), false},
		{"another registry's credentials", []byte(`{"auths":{"registry.example.com":{"auth":"` +
			base64.StdEncoding.EncodeToString([]byte("macrack:golden-secret")) + `"}}}`), false},
		{"auth", good, true},
		{"username and password", dockerConfig(`{"username":"macrack","password":"golden-secret"}`), true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			repo, err := Repository(name, RemoteOptions{PlainHTTP: true, DockerConfigJSON: tc.config})
			if err != nil {
				t.Fatal(err)
			}
			desc, err := Push(ctx, repo, "15.5", src, PushOptions{ChunkSize: 1 << 20})
			if tc.ok != (err == nil) {
				t.Fatalf("Push: %v, want success %v", err, tc.ok)
			}
			if !tc.ok {
				if msg := strings.ToLower(err.Error()); !strings.Contains(msg, "401") && !strings.Contains(msg, "unauthorized") && !strings.Contains(msg, "credential not found") {
					t.Errorf("the refusal does not say unauthorized: %v", err)
				}
				return
			}
			if _, err := Resolve(ctx, repo, desc.Digest.String()); err != nil {
				t.Errorf("Resolve: %v", err)
			}
		})
	}
}

func TestAMissingRegistryBinaryFailsSayingMakeRegistry(t *testing.T) {
	t.Setenv(registry.EnvBinary, t.TempDir()+"/no-registry")
	_, err := registry.Start(t.TempDir())
	if err == nil || !strings.Contains(err.Error(), "make registry") {
		t.Fatalf("Start without the binary: %v", err)
	}
}
