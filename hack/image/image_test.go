package main

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"sigs.k8s.io/yaml"
)

// The operator image, built by the command as `make image PUSH=1` runs it,
// is pushed to a real registry (the CNCF Distribution registry of `make
// registry`) and read back: an OCI manifest whose digest is the one computed
// locally, one layer holding an executable /operator and the CA bundle, and a
// config with the entrypoint, the nonroot user and linux/GOARCH.
func TestOperatorImageIsPushedAndReadBack(t *testing.T) {
	bin := standInOperator(t)
	host := startRegistry(t)
	ref := host + "/macrack/operator:v0.1.0-test"
	out := filepath.Join(t.TempDir(), "layout")
	if err := run([]string{"--binary", bin, "--version", "v0.1.0", "--revision", "0123abc", "--output", out, "--push", ref}); err != nil {
		t.Fatal(err)
	}

	// The locally computed image: same inputs, same digest.
	local, err := OperatorImage(OperatorOptions{Binary: bin, Arch: runtime.GOARCH, Created: time.Unix(0, 0).UTC(), Labels: map[string]string{
		"org.opencontainers.image.source":      source,
		"org.opencontainers.image.version":     "v0.1.0",
		"org.opencontainers.image.title":       "macrack-operator",
		"org.opencontainers.image.description": "MacRack: rents whole Apple Mac minis to tenants, one dedicated chassis per lease",
		"org.opencontainers.image.revision":    "0123abc",
	}})
	if err != nil {
		t.Fatal(err)
	}
	want, err := local.Digest()
	if err != nil {
		t.Fatal(err)
	}

	r, err := name.ParseReference(ref)
	if err != nil {
		t.Fatal(err)
	}
	desc, err := remote.Get(r, remote.WithContext(context.Background()))
	if err != nil {
		t.Fatalf("reading %s back: %v", ref, err)
	}
	if desc.Digest != want {
		t.Errorf("the registry has %s, the local build %s", desc.Digest, want)
	}
	if desc.MediaType != types.OCIManifestSchema1 {
		t.Errorf("manifest media type %s, want %s", desc.MediaType, types.OCIManifestSchema1)
	}
	rawLocal, _ := local.RawManifest()
	if !bytes.Equal(desc.Manifest, rawLocal) {
		t.Errorf("the pushed manifest differs from the local one:\n%s\n%s", desc.Manifest, rawLocal)
	}
	var m v1.Manifest
	if err := json.Unmarshal(desc.Manifest, &m); err != nil {
		t.Fatal(err)
	}
	if m.Config.MediaType != types.OCIConfigJSON {
		t.Errorf("config media type %s, want %s", m.Config.MediaType, types.OCIConfigJSON)
	}
	if len(m.Layers) != 1 || m.Layers[0].MediaType != types.OCILayer {
		t.Fatalf("layers %+v, want one %s", m.Layers, types.OCILayer)
	}

	img, err := desc.Image()
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cf.OS != "linux" || cf.Architecture != runtime.GOARCH {
		t.Errorf("platform %s/%s, want linux/%s", cf.OS, cf.Architecture, runtime.GOARCH)
	}
	if strings.Join(cf.Config.Entrypoint, " ") != "/operator" || len(cf.Config.Cmd) != 0 {
		t.Errorf("entrypoint %q cmd %q, want [/operator] and no cmd", cf.Config.Entrypoint, cf.Config.Cmd)
	}
	if cf.Config.User != "65532:65532" {
		t.Errorf("user %q, want 65532:65532", cf.Config.User)
	}
	for k, v := range map[string]string{
		"org.opencontainers.image.source":   source,
		"org.opencontainers.image.version":  "v0.1.0",
		"org.opencontainers.image.title":    "macrack-operator",
		"org.opencontainers.image.revision": "0123abc",
	} {
		if cf.Config.Labels[k] != v {
			t.Errorf("label %s = %q, want %q", k, cf.Config.Labels[k], v)
		}
	}

	entries := layerEntries(t, img)
	binBytes, _ := os.ReadFile(bin)
	op, ok := entries["operator"]
	switch {
	case !ok:
		t.Fatalf("no /operator in the layer; it has %v", keys(entries))
	case op.hdr.Typeflag != tar.TypeReg || op.hdr.Mode != 0o755 || op.hdr.Uid != 0:
		t.Errorf("/operator: type %c mode %o uid %d, want a regular file, 0755, owned by root", op.hdr.Typeflag, op.hdr.Mode, op.hdr.Uid)
	case !bytes.Equal(op.data, binBytes):
		t.Errorf("/operator is not the binary built")
	}
	ca, ok := entries["etc/ssl/certs/ca-certificates.crt"]
	if !ok {
		t.Fatalf("no CA bundle in the layer; it has %v", keys(entries))
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca.data) || countPEMCertificates(ca.data) < 100 {
		t.Errorf("the CA bundle holds %d certificates, want the Mozilla roots (over 100)", countPEMCertificates(ca.data))
	}
	if p := entries["etc/passwd"]; !strings.Contains(string(p.data), "nonroot:x:65532:65532:") {
		t.Errorf("/etc/passwd names no nonroot 65532: %q", p.data)
	}
	if tmp := entries["tmp/"]; tmp.hdr == nil || tmp.hdr.Mode != 0o1777 {
		t.Errorf("/tmp is not a 1777 folder: %+v", tmp.hdr)
	}

	// The OCI layout the command wrote holds the same image.
	idx, err := layout.ImageIndexFromPath(out)
	if err != nil {
		t.Fatal(err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(im.Manifests) != 1 || im.Manifests[0].Digest != want || im.Manifests[0].Annotations["org.opencontainers.image.ref.name"] != ref {
		t.Errorf("the OCI layout's index is %+v, want one image %s named %s", im.Manifests, want, ref)
	}
}

// A tarball output is what `docker load` and `podman load` read, with the
// same config and layer.
func TestOperatorImageTarball(t *testing.T) {
	bin := standInOperator(t)
	out := filepath.Join(t.TempDir(), "operator.tar")
	if err := run([]string{"--binary", bin, "--version", "v0.1.0", "--output", out, "--tag", "ghcr.io/boualleiguie/macrack-operator:v0.1.0"}); err != nil {
		t.Fatal(err)
	}
	tag, _ := name.NewTag("ghcr.io/boualleiguie/macrack-operator:v0.1.0")
	img, err := tarball.ImageFromPath(out, &tag)
	if err != nil {
		t.Fatal(err)
	}
	local, err := OperatorImage(OperatorOptions{Binary: bin, Arch: runtime.GOARCH, Created: time.Unix(0, 0).UTC(), Labels: map[string]string{
		"org.opencontainers.image.source":      source,
		"org.opencontainers.image.version":     "v0.1.0",
		"org.opencontainers.image.title":       "macrack-operator",
		"org.opencontainers.image.description": "MacRack: rents whole Apple Mac minis to tenants, one dedicated chassis per lease",
	}})
	if err != nil {
		t.Fatal(err)
	}
	got, _ := img.ConfigName()
	want, _ := local.ConfigName()
	if got != want {
		t.Errorf("the tarball's config is %s, the local image's %s", got, want)
	}
}

// The bundle image carries bundle/ as /manifests and /metadata, labelled
// with its annotations, as OLM reads a bundle image.
func TestBundleImageIsPushedAndReadBack(t *testing.T) {
	const dir = "../../bundle"
	host := startRegistry(t)
	ref := host + "/macrack/operator-bundle:v0.1.0-test"
	if err := run([]string{"--bundle", dir, "--push", ref}); err != nil {
		t.Fatal(err)
	}
	r, _ := name.ParseReference(ref)
	img, err := remote.Image(r)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(dir, "metadata", "annotations.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var ann struct {
		Annotations map[string]string `json:"annotations"`
	}
	if err := yaml.Unmarshal(raw, &ann); err != nil {
		t.Fatal(err)
	}
	if len(ann.Annotations) == 0 {
		t.Fatal("bundle/metadata/annotations.yaml has no annotations")
	}
	for k, v := range ann.Annotations {
		if cf.Config.Labels[k] != v {
			t.Errorf("label %s = %q, want %q as annotations.yaml says", k, cf.Config.Labels[k], v)
		}
	}
	entries := layerEntries(t, img)
	for _, sub := range []string{"manifests", "metadata"} {
		names, err := os.ReadDir(filepath.Join(dir, sub))
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range names {
			want, _ := os.ReadFile(filepath.Join(dir, sub, n.Name()))
			got, ok := entries[sub+"/"+n.Name()]
			if !ok || !bytes.Equal(got.data, want) {
				t.Errorf("/%s/%s is missing from the bundle image or differs", sub, n.Name())
			}
		}
	}
}

// What cannot run on an empty base is refused before any image is made.
func TestOnlyAStaticLinuxBinaryOfTheArchIsTaken(t *testing.T) {
	bin := standInOperator(t)
	other := "arm64"
	if runtime.GOARCH == "arm64" {
		other = "amd64"
	}
	if _, err := OperatorImage(OperatorOptions{Binary: bin, Arch: other}); err == nil {
		t.Errorf("a %s binary was taken for %s", runtime.GOARCH, other)
	}
	text := filepath.Join(t.TempDir(), "operator")
	if err := os.WriteFile(text, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := OperatorImage(OperatorOptions{Binary: text, Arch: runtime.GOARCH}); err == nil {
		t.Error("a shell script was taken for the operator binary")
	}
	if err := checkStatic(bin, runtime.GOARCH); err != nil {
		t.Errorf("the CGO_ENABLED=0 stand-in was refused: %v", err)
	}
}

// standInOperator builds a small static linux program as the operator's
// stand-in: the image is the same whatever the binary, and compiling the
// real operator with CGO_ENABLED=0 would recompile every package it imports
// (`make image` builds the real one).
func standInOperator(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	src := "package main\n\nimport \"fmt\"\n\nfunc main() { fmt.Println(\"macrack operator stand-in\") }\n"
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module standin\n\ngo 1.26\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "operator")
	// No -trimpath: the standard library's packages compiled for the
	// project are reused from the build cache.
	cmd := exec.Command("go", "build", "-o", bin, ".")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+runtime.GOARCH, "GOWORK=off", "GOFLAGS=-buildvcs=false")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building the stand-in operator: %v\n%s", err, out)
	}
	return bin
}

// startRegistry runs bin/registry (`make registry`, or $MACRACK_REGISTRY_BIN)
// on a free loopback port with its storage in a temporary folder, as
// test/registry does for the project's own tests, and returns its host:port.
func startRegistry(t *testing.T) string {
	t.Helper()
	bin := os.Getenv("MACRACK_REGISTRY_BIN")
	if bin == "" {
		bin = filepath.Join("..", "..", "bin", "registry")
	}
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("the registry binary %s: %v; run `make registry`", bin, err)
	}
	dir := t.TempDir()
	addrFile := filepath.Join(dir, "addr")
	var logs bytes.Buffer
	cmd := exec.Command(bin, "-addr", "127.0.0.1:0", "-root", filepath.Join(dir, "storage"), "-addr-file", addrFile)
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(5 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case err := <-exited:
			t.Fatalf("the registry exited: %v\n%s", err, logs.String())
		default:
		}
		if b, err := os.ReadFile(addrFile); err == nil && len(bytes.TrimSpace(b)) > 0 {
			host := string(bytes.TrimSpace(b))
			resp, err := http.Get("http://" + host + "/v2/")
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					return host
				}
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("the registry did not answer within 30s\n%s", logs.String())
	return ""
}

type entry struct {
	hdr  *tar.Header
	data []byte
}

// layerEntries reads the image's one layer, uncompressed, by name.
func layerEntries(t *testing.T, img v1.Image) map[string]entry {
	t.Helper()
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	if len(layers) != 1 {
		t.Fatalf("%d layers, want one", len(layers))
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	out := map[string]entry{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		if _, dup := out[h.Name]; dup {
			t.Errorf("%s is twice in the layer", h.Name)
		}
		out[h.Name] = entry{hdr: h, data: data}
	}
}

func keys(m map[string]entry) string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return fmt.Sprint(ks)
}
