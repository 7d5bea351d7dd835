package main

import (
	"archive/tar"
	"bytes"
	"debug/elf"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"golang.org/x/crypto/x509roots/fallback/bundle"
	"sigs.k8s.io/yaml"
)

const (
	// Entrypoint is where the operator binary sits in the image.
	Entrypoint = "/operator"
	// User is distroless' nonroot, as uid:gid: the Deployment's
	// runAsNonRoot needs a numeric user.
	User = "65532:65532"
	// CABundlePath is where Go's crypto/x509 looks first on Linux.
	CABundlePath = "/etc/ssl/certs/ca-certificates.crt"
)

// OperatorOptions describe the operator image.
type OperatorOptions struct {
	// Binary is the static linux operator binary (CGO_ENABLED=0).
	Binary string
	// Arch is its GOARCH; the image's platform is linux/Arch.
	Arch string
	// CABundle is a PEM file of CA certificates; empty: the Mozilla roots of
	// golang.org/x/crypto/x509roots/fallback, at this module's pinned version.
	CABundle string
	// Labels are the image's OCI labels.
	Labels map[string]string
	// Created stamps the config and every file: a fixed time (by default
	// the Unix epoch, or $SOURCE_DATE_EPOCH) makes the same inputs give the
	// same digest on any machine.
	Created time.Time
}

// OperatorImage is the operator on an empty base: one layer with /operator,
// the CA bundle, /etc/passwd and /etc/group naming root and nonroot, and a
// /tmp; entrypoint /operator, user 65532:65532, OCI media types.
func OperatorImage(o OperatorOptions) (v1.Image, error) {
	bin, err := os.ReadFile(o.Binary)
	if err != nil {
		return nil, err
	}
	if err := checkStatic(o.Binary, o.Arch); err != nil {
		return nil, err
	}
	var cas []byte
	if o.CABundle != "" {
		if cas, err = os.ReadFile(o.CABundle); err != nil {
			return nil, err
		}
		if n := countPEMCertificates(cas); n == 0 {
			return nil, fmt.Errorf("%s holds no PEM certificate", o.CABundle)
		}
	} else {
		cas = fallbackRoots()
	}
	files := []file{
		dirEntry("etc/", 0o755, 0),
		regEntry("etc/group", 0o644, 0, []byte("root:x:0:\nnonroot:x:65532:\n")),
		regEntry("etc/passwd", 0o644, 0, []byte("root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n")),
		dirEntry("etc/ssl/", 0o755, 0),
		dirEntry("etc/ssl/certs/", 0o755, 0),
		regEntry(strings.TrimPrefix(CABundlePath, "/"), 0o644, 0, cas),
		dirEntry("home/", 0o755, 0),
		dirEntry("home/nonroot/", 0o700, 65532),
		regEntry(strings.TrimPrefix(Entrypoint, "/"), 0o755, 0, bin),
		dirEntry("tmp/", 0o1777, 0),
	}
	layer, err := tarLayer(files, o.Created)
	if err != nil {
		return nil, err
	}
	return assemble(layer, o.Arch, o.Created, o.Labels, func(c *v1.Config) {
		c.Entrypoint = []string{Entrypoint}
		c.User = User
		c.WorkingDir = "/"
	}, "the operator, CA certificates, passwd and group")
}

// BundleImage is the OLM bundle image of dir (what `operator-sdk run bundle`
// and opm read): /manifests and /metadata on an empty base, labelled with
// metadata/annotations.yaml's annotations, as a bundle image must be.
func BundleImage(dir, arch string, created time.Time) (v1.Image, error) {
	raw, err := os.ReadFile(filepath.Join(dir, "metadata", "annotations.yaml"))
	if err != nil {
		return nil, err
	}
	var ann struct {
		Annotations map[string]string `json:"annotations"`
	}
	if err := yaml.UnmarshalStrict(raw, &ann); err != nil {
		return nil, fmt.Errorf("%s/metadata/annotations.yaml: %w", dir, err)
	}
	if ann.Annotations["operators.operatorframework.io.bundle.mediatype.v1"] != "registry+v1" {
		return nil, fmt.Errorf("%s/metadata/annotations.yaml is not a registry+v1 bundle's", dir)
	}
	var files []file
	for _, sub := range []string{"manifests", "metadata"} {
		files = append(files, dirEntry(sub+"/", 0o755, 0))
		entries, err := os.ReadDir(filepath.Join(dir, sub))
		if err != nil {
			return nil, err
		}
		for _, e := range entries {
			if e.IsDir() {
				return nil, fmt.Errorf("%s/%s/%s: a bundle's folders hold files only", dir, sub, e.Name())
			}
			data, err := os.ReadFile(filepath.Join(dir, sub, e.Name()))
			if err != nil {
				return nil, err
			}
			files = append(files, regEntry(path.Join(sub, e.Name()), 0o644, 0, data))
		}
	}
	layer, err := tarLayer(files, created)
	if err != nil {
		return nil, err
	}
	return assemble(layer, arch, created, ann.Annotations, nil, "the OLM bundle: manifests/ and metadata/")
}

func assemble(layer v1.Layer, arch string, created time.Time, labels map[string]string, config func(*v1.Config), history string) (v1.Image, error) {
	base := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	base = mutate.ConfigMediaType(base, types.OCIConfigJSON)
	img, err := mutate.Append(base, mutate.Addendum{
		Layer:   layer,
		History: v1.History{Created: v1.Time{Time: created}, CreatedBy: "hack/image: " + history},
	})
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS = "linux"
	cf.Architecture = arch
	cf.Created = v1.Time{Time: created}
	cf.Config.Labels = labels
	if config != nil {
		config(&cf.Config)
	}
	return mutate.ConfigFile(img, cf)
}

// file is one entry of a layer.
type file struct {
	name string
	mode int64
	uid  int
	dir  bool
	data []byte
}

func dirEntry(name string, mode int64, uid int) file {
	return file{name: name, mode: mode, uid: uid, dir: true}
}
func regEntry(name string, mode int64, uid int, data []byte) file {
	return file{name: name, mode: mode, uid: uid, data: data}
}

// tarLayer writes files, in name order, as a gzipped OCI layer with fixed
// times and owners, so that its digest depends on the contents alone.
func tarLayer(files []file, mtime time.Time) (v1.Layer, error) {
	sort.Slice(files, func(i, j int) bool { return files[i].name < files[j].name })
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, f := range files {
		h := &tar.Header{Name: f.name, Mode: f.mode, Uid: f.uid, Gid: f.uid, ModTime: mtime, Format: tar.FormatPAX}
		if f.dir {
			h.Typeflag = tar.TypeDir
		} else {
			h.Typeflag = tar.TypeReg
			h.Size = int64(len(f.data))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(f.data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	data := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(data)), nil
	}, tarball.WithMediaType(types.OCILayer))
}

// fallbackRoots is the Mozilla root store that x509roots/fallback embeds, as
// PEM. Roots that carry a constraint (trust limited by date, say) are left
// out: a PEM bundle cannot say it, and trusting less is the safe side.
func fallbackRoots() []byte {
	var out bytes.Buffer
	for r := range bundle.Roots() {
		if r.Constraint != nil {
			continue
		}
		_ = pem.Encode(&out, &pem.Block{Type: "CERTIFICATE", Bytes: r.Certificate})
	}
	return out.Bytes()
}

func countPEMCertificates(b []byte) int {
	n := 0
	for {
		var blk *pem.Block
		blk, b = pem.Decode(b)
		if blk == nil {
			return n
		}
		if blk.Type == "CERTIFICATE" {
			n++
		}
	}
}

// elfMachines are the GOARCHes an image is built for, by ELF machine.
var elfMachines = map[string]elf.Machine{
	"amd64":   elf.EM_X86_64,
	"arm64":   elf.EM_AARCH64,
	"ppc64le": elf.EM_PPC64,
	"s390x":   elf.EM_S390,
	"riscv64": elf.EM_RISCV,
}

// errNotStatic is checkStatic's refusal of a dynamically linked binary.
var errNotStatic = errors.New("not statically linked (build it with CGO_ENABLED=0): an empty base has no libc")

// checkStatic refuses what cannot run on an empty base: anything but a
// static linux ELF binary of arch.
func checkStatic(name, arch string) error {
	m, ok := elfMachines[arch]
	if !ok {
		return fmt.Errorf("architecture %q: want one of amd64, arm64, ppc64le, s390x, riscv64", arch)
	}
	f, err := elf.Open(name)
	if err != nil {
		return fmt.Errorf("%s: not a linux binary: %w", name, err)
	}
	defer f.Close()
	if f.Machine != m {
		return fmt.Errorf("%s: built for %s, want %s (GOARCH=%s)", name, f.Machine, m, arch)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return fmt.Errorf("%s: %w", name, errNotStatic)
		}
	}
	if libs, _ := f.ImportedLibraries(); len(libs) > 0 {
		return fmt.Errorf("%s: needs %s: %w", name, strings.Join(libs, ", "), errNotStatic)
	}
	return nil
}
