package harness

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"oras.land/oras-go/v2/content"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
	"github.com/boualleiguie/macrack-operator/internal/conditions"
	"github.com/boualleiguie/macrack-operator/internal/golden"
	"github.com/boualleiguie/macrack-operator/internal/reconcile/image"
	"github.com/boualleiguie/macrack-operator/test/registry"
)

// SimGoldenDisk is the size of the sim goldens the harness pushes: three
// chunks of SimGoldenChunk, mostly zeros, as a macOS disk mostly is.
const (
	SimGoldenChunk int64 = 1 << 20
	SimGoldenDisk        = 3 * SimGoldenChunk
)

// imageStore is a suite's OCI registry on loopback, the real Distribution
// registry, and the goldens pushed to it.
type imageStore struct {
	mu     sync.Mutex
	dir    string
	server *registry.Server
}

func (s *imageStore) stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.server != nil {
		s.server.Stop()
	}
	_ = os.RemoveAll(s.dir)
}

// Registry is the suite's registry, started on first use.
func (e *Env) Registry() (*registry.Server, error) {
	if e.images == nil {
		e.images = &imageStore{}
	}
	s := e.images
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.server != nil {
		return s.server, nil
	}
	dir, err := os.MkdirTemp("", "macrack-registry-")
	if err != nil {
		return nil, err
	}
	srv, err := registry.Start(filepath.Join(dir, "storage"))
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	s.dir, s.server = dir, srv
	return srv, nil
}

// PushGolden pushes a small sim golden (SimGoldenDisk bytes in chunks of
// SimGoldenChunk) to the suite's registry as repository macrack/<name>, and
// returns its digest-pinned reference.
func (e *Env) PushGolden(ctx context.Context, name string, minimumDiskBytes int64) (string, error) {
	return e.PushGoldenSized(ctx, name, SimGoldenDisk, SimGoldenChunk, minimumDiskBytes)
}

// CreateImage pushes a sim golden whose minimum disk is minimumDisk and
// creates its MacOSImage, or finds it. Where the suite's operator resolves
// images, it waits for the Resolved condition; elsewhere (suites of the
// admission layers alone) it resolves the golden from the registry itself
// and writes status.resolved as the operator would.
func (e *Env) CreateImage(ctx context.Context, c client.Client, name, minimumDisk string) error {
	q, err := resource.ParseQuantity(minimumDisk)
	if err != nil {
		return err
	}
	ref, err := e.PushGolden(ctx, name, q.Value())
	if err != nil {
		return err
	}
	img := &fleetv1alpha1.MacOSImage{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: fleetv1alpha1.MacOSImageSpec{Source: ref, PlainHTTP: true}}
	if err := client.IgnoreAlreadyExists(c.Create(ctx, img)); err != nil {
		return err
	}
	if e.resolving {
		return wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			got := &fleetv1alpha1.MacOSImage{}
			if err := e.Client.Get(ctx, client.ObjectKey{Name: name}, got); err != nil {
				return false, err
			}
			return conditions.IsTrue(got.Status.Conditions, fleetv1alpha1.ConditionResolved), nil
		})
	}
	return e.resolveImage(ctx, name)
}

// resolveImage writes status.resolved of image name from its registry, as
// the operator's image controller does.
func (e *Env) resolveImage(ctx context.Context, name string) error {
	img := &fleetv1alpha1.MacOSImage{}
	if err := e.Client.Get(ctx, client.ObjectKey{Name: name}, img); err != nil {
		return err
	}
	repo, err := golden.Repository(img.Spec.Source, golden.RemoteOptions{PlainHTTP: img.Spec.PlainHTTP})
	if err != nil {
		return err
	}
	g, err := golden.Resolve(ctx, repo, img.Spec.Source)
	if err != nil {
		return err
	}
	model, err := content.FetchAll(ctx, repo, g.HardwareModel)
	if err != nil {
		return err
	}
	img.Status.Resolved = image.Resolved(g, model)
	return e.Client.Status().Update(ctx, img)
}
