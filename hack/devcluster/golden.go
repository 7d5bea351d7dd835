package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
	"github.com/boualleiguie/macrack-operator/internal/golden"
	"github.com/boualleiguie/macrack-operator/internal/golden/simgolden"
	"github.com/boualleiguie/macrack-operator/test/registry"
)

// The sim golden of `make run`: a sparse disk of a few hundred MiB, cut in
// chunks small enough that a pull's progress shows.
const (
	simGoldenName  = "sequoia-15.5-xcode-16.4"
	simGoldenDisk  = 320 << 20
	simGoldenChunk = 32 << 20
	// simMinimumDisk is what instances need: the class's disks hold it.
	simMinimumDisk = 60 << 30
)

// startStore starts the Distribution registry on a free loopback port,
// pushes the sim golden to it, and creates its MacOSImage: instances pull
// it for real, as they would from Harbor, ECR or Artifactory.
func startStore(ctx context.Context, c client.Client, dir string, log io.Writer) (*registry.Server, string, error) {
	srv, err := registry.StartWith(filepath.Join(dir, "storage"), registry.Options{Log: log})
	if err != nil {
		return nil, "", fmt.Errorf("starting the registry (make registry builds it): %w", err)
	}
	srcDir := filepath.Join(dir, "source")
	if err := os.MkdirAll(srcDir, 0o700); err != nil {
		return srv, "", err
	}
	src, err := simgolden.Write(srcDir, simGoldenName, simGoldenDisk, simGoldenChunk, simMinimumDisk)
	if err != nil {
		return srv, "", err
	}
	repoRef := srv.Host() + "/macrack/" + simGoldenName
	repo, err := golden.Repository(repoRef, golden.RemoteOptions{PlainHTTP: true})
	if err != nil {
		return srv, "", err
	}
	desc, err := golden.Push(ctx, repo, "15.5-xcode-16.4", src, golden.PushOptions{ChunkSize: simGoldenChunk})
	if err != nil {
		return srv, "", fmt.Errorf("pushing the sim golden: %w", err)
	}
	ref := repoRef + "@" + desc.Digest.String()
	img := &fleetv1alpha1.MacOSImage{ObjectMeta: metav1.ObjectMeta{Name: simGoldenName},
		Spec: fleetv1alpha1.MacOSImageSpec{Source: ref, PlainHTTP: true}}
	if err := client.IgnoreAlreadyExists(c.Create(ctx, img)); err != nil {
		return srv, ref, err
	}
	return srv, ref, nil
}
