package harness

import (
	"context"
	"fmt"
	"os"

	"github.com/boualleiguie/macrack-operator/internal/golden"
	"github.com/boualleiguie/macrack-operator/internal/golden/simgolden"
)

// PushGoldenTo packs a sim golden of diskBytes, cut into chunks of
// chunkBytes (a marker at the start of each, so that no two goldens share a
// chunk blob), and pushes it to the registry at host ("127.0.0.1:port") as
// repository macrack/<name>, with remote's transport and credentials. It
// returns the digest-pinned reference.
func PushGoldenTo(ctx context.Context, host string, remote golden.RemoteOptions, name string, diskBytes, chunkBytes, minimumDiskBytes int64) (string, error) {
	dir, err := os.MkdirTemp("", "macrack-golden-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(dir)
	src, err := simgolden.Write(dir, name, diskBytes, chunkBytes, minimumDiskBytes)
	if err != nil {
		return "", err
	}
	repoRef := host + "/macrack/" + name
	repo, err := golden.Repository(repoRef, remote)
	if err != nil {
		return "", err
	}
	desc, err := golden.Push(ctx, repo, "15.5", src, golden.PushOptions{ChunkSize: chunkBytes})
	if err != nil {
		return "", fmt.Errorf("pushing the sim golden %s to %s: %w", name, host, err)
	}
	return repoRef + "@" + desc.Digest.String(), nil
}

// PushGoldenSized is PushGolden with the disk and chunk sizes chosen: a sim
// golden of diskBytes in chunks of chunkBytes, pushed to the suite's
// registry as macrack/<name>.
func (e *Env) PushGoldenSized(ctx context.Context, name string, diskBytes, chunkBytes, minimumDiskBytes int64) (string, error) {
	srv, err := e.Registry()
	if err != nil {
		return "", err
	}
	return PushGoldenTo(ctx, srv.Host(), golden.RemoteOptions{PlainHTTP: true}, name, diskBytes, chunkBytes, minimumDiskBytes)
}

// ResolveGolden reads a pushed golden's manifest and config back from its
// registry (its chunks' layer digests, its sizes), as the operator does.
func ResolveGolden(ctx context.Context, ref string, remote golden.RemoteOptions) (*golden.Golden, error) {
	repo, err := golden.Repository(ref, remote)
	if err != nil {
		return nil, err
	}
	return golden.Resolve(ctx, repo, ref)
}
