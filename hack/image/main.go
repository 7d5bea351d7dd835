// Command image builds MacRack's container images without Docker, with
// go-containerregistry: the operator's (`make image`) and the OLM bundle's
// (`make bundle-image`). Each is one layer on an empty base with OCI media
// types, written as an OCI image layout (--output DIR) or a tarball that
// `docker load` and `podman load` read (--output FILE.tar), and pushed to
// any registry with --push REF (credentials from the Docker config, as
// `docker login` or `crane auth login` write it; plain HTTP for loopback
// and private addresses, or with --insecure).
//
// The same inputs give the same digest on any machine: files and config
// carry a fixed time ($SOURCE_DATE_EPOCH, else the Unix epoch) and fixed
// owners, and the CA bundle comes from a pinned module, not from the build
// machine.
//
// It is its own module, so that go-containerregistry's dependencies stay out
// of the project's go.mod; the modules both use are at the project's versions
// (hack/check-aligned-modules.sh).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

const source = "https://github.com/boualleiguie/macrack-operator"

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("image", flag.ContinueOnError)
	binary := fs.String("binary", "", "the static linux operator binary (CGO_ENABLED=0 go build ./cmd/operator)")
	bundleDir := fs.String("bundle", "", "build the OLM bundle image of this bundle folder instead of the operator's")
	arch := fs.String("arch", runtime.GOARCH, "the image's architecture (GOARCH); the platform is linux/ARCH")
	version := fs.String("version", "", "org.opencontainers.image.version, e.g. v0.1.0 (operator image)")
	revision := fs.String("revision", "", "org.opencontainers.image.revision, the commit (operator image; optional)")
	caBundle := fs.String("ca-bundle", "", "a PEM file of CA certificates for "+CABundlePath+" (default: the Mozilla roots of golang.org/x/crypto/x509roots/fallback)")
	output := fs.String("output", "", "write the image here: an OCI image layout folder, or a tarball if it ends in .tar")
	tag := fs.String("tag", "", "the reference the OCI layout and the tarball name the image by (default: --push's, else macrack-operator:latest)")
	push := fs.String("push", "", "push the image to this reference, host[:port]/repository:tag")
	insecure := fs.Bool("insecure", false, "reach --push's registry over plain HTTP even when it is not on loopback or a private address")
	if err := fs.Parse(args); err != nil {
		return err
	}
	created, err := sourceDateEpoch()
	if err != nil {
		return err
	}

	var img v1.Image
	switch {
	case *bundleDir != "" && *binary != "":
		return errors.New("--binary and --bundle build two different images: give one")
	case *bundleDir != "":
		img, err = BundleImage(*bundleDir, *arch, created)
	case *binary != "":
		if *version == "" {
			return errors.New("--version is required for the operator image")
		}
		labels := map[string]string{
			"org.opencontainers.image.source":      source,
			"org.opencontainers.image.version":     *version,
			"org.opencontainers.image.title":       "macrack-operator",
			"org.opencontainers.image.description": "MacRack: rents whole Apple Mac minis to tenants, one dedicated chassis per lease",
		}
		if *revision != "" {
			labels["org.opencontainers.image.revision"] = *revision
		}
		img, err = OperatorImage(OperatorOptions{Binary: *binary, Arch: *arch, CABundle: *caBundle, Labels: labels, Created: created})
	default:
		return errors.New("give --binary (the operator image) or --bundle (the bundle image)")
	}
	if err != nil {
		return err
	}
	digest, err := img.Digest()
	if err != nil {
		return err
	}
	fmt.Printf("image: built %s (linux/%s)\n", digest, *arch)

	refName := *tag
	if refName == "" {
		refName = *push
	}
	if refName == "" {
		refName = "macrack-operator:latest"
	}
	var opts []name.Option
	if *insecure {
		opts = append(opts, name.Insecure)
	}
	if *output != "" {
		if err := write(img, *output, refName, opts); err != nil {
			return err
		}
		fmt.Printf("image: wrote %s\n", *output)
	}
	if *push != "" {
		ref, err := name.ParseReference(*push, opts...)
		if err != nil {
			return err
		}
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
		defer stop()
		if err := Push(ctx, img, ref); err != nil {
			return err
		}
		fmt.Printf("image: pushed %s@%s\n", ref.Context().Name(), digest)
	}
	return nil
}

// Push writes img to ref, with the Docker config's credentials.
func Push(ctx context.Context, img v1.Image, ref name.Reference) error {
	if err := remote.Write(ref, img, remote.WithContext(ctx), remote.WithAuthFromKeychain(authn.DefaultKeychain)); err != nil {
		return fmt.Errorf("pushing %s: %w", ref, err)
	}
	return nil
}

// write stores img as a tarball (path ending in .tar) or an OCI image layout
// folder, replacing what was there.
func write(img v1.Image, path, refName string, opts []name.Option) error {
	if strings.HasSuffix(path, ".tar") {
		tagged, err := name.NewTag(refName, opts...)
		if err != nil {
			return fmt.Errorf("the tarball names its image by a tag: %w", err)
		}
		return tarball.WriteToFile(path, tagged, img)
	}
	if err := os.RemoveAll(path); err != nil {
		return err
	}
	p, err := layout.Write(path, empty.Index)
	if err != nil {
		return err
	}
	return p.AppendImage(img, layout.WithAnnotations(map[string]string{"org.opencontainers.image.ref.name": refName}))
}

// sourceDateEpoch is $SOURCE_DATE_EPOCH (reproducible-builds.org), else the
// Unix epoch.
func sourceDateEpoch() (time.Time, error) {
	s := os.Getenv("SOURCE_DATE_EPOCH")
	if s == "" {
		return time.Unix(0, 0).UTC(), nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("SOURCE_DATE_EPOCH=%q: %w", s, err)
	}
	return time.Unix(n, 0).UTC(), nil
}
