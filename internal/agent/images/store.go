package images

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/clock"
	"oras.land/oras-go/v2"
	"oras.land/oras-go/v2/content"

	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
	"github.com/boualleiguie/macrack-operator/internal/golden"
)

// Source opens a MacOSImage's repository: golden.Repository with the
// agent's registry credentials.
type Source func(img *fleetv1alpha1.MacOSImage) (oras.ReadOnlyTarget, error)

// Store is the agent's golden cache as its reconcilers see it: Ensure
// starts or joins the one download of an image and says where it stands,
// Clone makes an instance's disk from a verified golden, Report is what the
// agent writes into its MacNode. Pulls run in the background, on the
// store's own context, so that a reconcile never waits on the network.
type Store struct {
	Puller *Puller
	Cache  *Cache
	Cloner Cloner
	Source Source
	Clock  clock.Clock
	Log    logr.Logger
	// Budget is the cache's budget in allocated bytes: the class's
	// imageCacheBudget, or the agent's override.
	Budget func() int64
	// Pinned are the goldens never to evict: those of live instances and
	// those the bound lease books.
	Pinned func() map[string]bool
	// Retry is how soon a pull that waited for room, failed or ran out of
	// retries is tried again (default 30s).
	Retry time.Duration
	// OnEvict is told of each golden evicted to make room, and why.
	OnEvict func(name, reason string)

	mu       sync.Mutex
	ctx      context.Context
	pulls    map[string]*storePull
	onDemand int
	idle     *sync.Cond
}

// storePull is one image's pull as the store runs it.
type storePull struct {
	manifest digest.Digest
	prePull  bool
	running  bool
	// waiting says why the pull waits for room; failed why it stopped.
	waiting, failed string
	retryAt         time.Time
}

// Run gives the store the context its pulls run on, until ctx ends.
func (s *Store) Run(ctx context.Context) error {
	s.mu.Lock()
	s.init()
	s.ctx = ctx
	s.mu.Unlock()
	<-ctx.Done()
	s.mu.Lock()
	s.idle.Broadcast()
	s.mu.Unlock()
	return nil
}

func (s *Store) init() {
	if s.pulls == nil {
		s.pulls = map[string]*storePull{}
		s.idle = sync.NewCond(&s.mu)
	}
}

func (s *Store) clock() clock.Clock {
	if s.Clock == nil {
		return clock.RealClock{}
	}
	return s.Clock
}

// State is where one image stands on this chassis.
type State struct {
	Phase fleetv1alpha1.ImagePhase
	// Percent is the share of compressed bytes fetched.
	Percent int32
	Message string
}

// Ensure makes sure img's golden is, or is being, pulled, and returns where
// it stands. prePull marks a pull nobody waits on yet (a booking, a class's
// pre-pull), which yields bandwidth to on-demand pulls.
func (s *Store) Ensure(img *fleetv1alpha1.MacOSImage, prePull bool) State {
	want, ok := golden.PinnedDigest(img.Spec.Source)
	if !ok {
		return State{Phase: fleetv1alpha1.ImageFailed, Message: "spec.source is not pinned by digest"}
	}
	if s.Puller.Ready(img.Name, want) {
		return State{Phase: fleetv1alpha1.ImageReady}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.init()
	p := s.pulls[img.Name]
	if p == nil || p.manifest != want {
		p = &storePull{manifest: want, prePull: prePull}
		s.pulls[img.Name] = p
	}
	if !prePull && p.prePull {
		// Someone waits on it now: it stops yielding.
		p.prePull = false
		if p.running {
			s.onDemand++
		}
	}
	now := s.clock().Now()
	if !p.running && s.ctx != nil && !now.Before(p.retryAt) {
		p.running = true
		if !p.prePull {
			s.onDemand++
		}
		go s.pull(s.ctx, img.DeepCopy(), p)
	}
	return s.stateLocked(img.Name, p)
}

func (s *Store) stateLocked(name string, p *storePull) State {
	switch {
	case p.waiting != "":
		return State{Phase: fleetv1alpha1.ImageWaiting, Message: p.waiting}
	case p.failed != "" && !p.running:
		return State{Phase: fleetv1alpha1.ImageFailed, Message: p.failed}
	}
	st := s.Puller.Progress(name)
	out := State{Phase: fleetv1alpha1.ImagePulling, Message: st.Message}
	if st.BytesTotal > 0 {
		out.Percent = int32(st.BytesDone * 100 / st.BytesTotal)
	}
	return out
}

// pull resolves the golden from its registry, makes room within the
// budget, and pulls it. It records why it stopped, for Ensure and Report.
func (s *Store) pull(ctx context.Context, img *fleetv1alpha1.MacOSImage, p *storePull) {
	err := s.pullOnce(ctx, img, p)
	s.mu.Lock()
	defer s.mu.Unlock()
	p.running = false
	if !p.prePull {
		s.onDemand--
		s.idle.Broadcast()
	}
	var noRoom *NoRoomError
	switch {
	case err == nil:
		p.waiting, p.failed = "", ""
		if s.pulls[img.Name] == p { // not a newer golden of the name's
			delete(s.pulls, img.Name)
		}
	case errors.As(err, &noRoom):
		p.waiting = noRoom.Error() + "; the pull waits: a golden in use or booked is never evicted"
		p.retryAt = s.clock().Now().Add(s.retry())
	default:
		p.waiting = ""
		p.failed = err.Error()
		p.retryAt = s.clock().Now().Add(s.retry())
	}
	if err != nil && ctx.Err() == nil {
		s.Log.Info("The pull of a golden stopped; it is tried again later", "image", img.Name, "error", err.Error())
	}
}

func (s *Store) retry() time.Duration {
	if s.Retry > 0 {
		return s.Retry
	}
	return 30 * time.Second
}

func (s *Store) pullOnce(ctx context.Context, img *fleetv1alpha1.MacOSImage, p *storePull) error {
	if err := os.MkdirAll(s.Puller.Root, 0o755); err != nil {
		return fmt.Errorf("creating the image cache: %w", err)
	}
	repo, err := s.Source(img)
	if err != nil {
		return err
	}
	// The agent reads the manifest itself, by the pinned digest, rather
	// than trust anyone's copy of it.
	g, err := golden.Resolve(ctx, repo, img.Spec.Source)
	if err != nil {
		return fmt.Errorf("resolving %s: %w", img.Spec.Source, err)
	}
	release, err := s.makeRoom(img.Name, g)
	if err != nil {
		return err
	}
	defer release()
	s.mu.Lock()
	p.waiting = ""
	s.mu.Unlock()
	var src content.Fetcher = repo
	if p.prePull {
		src = yielding{Fetcher: repo, store: s, pull: p}
	}
	return s.Puller.Pull(ctx, img.Name, g, src)
}

// makeRoom reserves room for name's golden g within the budget, evicting
// the least recently used goldens that are not pinned, and returns the
// release of its reservation, for when the pull ends. The store alone
// holds the cache to its budget: the Puller only checks the free space.
func (s *Store) makeRoom(name string, g *golden.Golden) (func(), error) {
	if s.Budget == nil {
		return func() {}, nil
	}
	pinned := s.pinned()
	pinned[name] = true
	// What the image's directory holds already (a partial download to
	// resume, or the golden the pull replaces) is in the usage Reserve
	// counts: need is only what it may add.
	need := EstimatedSize(g)
	if have, err := allocatedBytes(s.Cache.Files(name).Dir); err == nil {
		need = max(need-have, 0)
	}
	budget := s.Budget()
	evicted, release, err := s.Cache.Reserve(name, need, budget, pinned)
	for _, e := range evicted {
		if s.OnEvict != nil {
			s.OnEvict(e, fmt.Sprintf("least recently used; evicted to make room for %s (%d bytes) within the cache budget of %d bytes",
				name, need, budget))
		}
	}
	if err != nil {
		return nil, err
	}
	return release, nil
}

func (s *Store) pinned() map[string]bool {
	out := map[string]bool{}
	if s.Pinned != nil {
		for k, v := range s.Pinned() {
			out[k] = v
		}
	}
	return out
}

// yielding is a pre-pull's fetcher: each blob waits while an on-demand pull
// runs, so that a booking never slows an instance that waits.
type yielding struct {
	content.Fetcher
	store *Store
	pull  *storePull
}

func (y yielding) Fetch(ctx context.Context, desc ocispec.Descriptor) (io.ReadCloser, error) {
	s := y.store
	s.mu.Lock()
	for s.onDemand > 0 && y.pull.prePull && ctx.Err() == nil {
		s.idle.Wait()
	}
	s.mu.Unlock()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return y.Fetcher.Fetch(ctx, desc)
}

// Clone makes an instance's disk and auxiliary storage from img's verified
// golden, and says how.
func (s *Store) Clone(img *fleetv1alpha1.MacOSImage, disk, aux string) (Method, error) {
	want, _ := golden.PinnedDigest(img.Spec.Source)
	return s.Cache.Clone(img.Name, want, disk, aux, s.Cloner)
}

// Report is the cache as the agent reports it on its MacNode: every golden
// it holds or pulls, and its use against the budget.
func (s *Store) Report() ([]fleetv1alpha1.ReportedImage, *fleetv1alpha1.ImageCacheReport) {
	byName := map[string]fleetv1alpha1.ReportedImage{}
	for _, st := range s.Puller.Statuses() {
		r := fleetv1alpha1.ReportedImage{Name: st.Name, Digest: st.Manifest.String(), BytesDone: st.BytesDone,
			BytesTotal: st.BytesTotal, BytesPerSecond: int64(st.Rate), Message: truncate(st.Message)}
		switch st.Phase {
		case PhaseReady:
			r.Phase = fleetv1alpha1.ImageReady
		case PhaseFailed:
			r.Phase = fleetv1alpha1.ImageFailed
		default:
			r.Phase = fleetv1alpha1.ImagePulling
		}
		byName[st.Name] = r
	}
	s.mu.Lock()
	for name, p := range s.pulls {
		r := byName[name]
		r.Name = name
		if r.Digest == "" {
			r.Digest = p.manifest.String()
		}
		switch {
		case p.waiting != "":
			r.Phase, r.Message = fleetv1alpha1.ImageWaiting, truncate(p.waiting)
		case p.failed != "" && !p.running:
			r.Phase, r.Message = fleetv1alpha1.ImageFailed, truncate(p.failed)
		case r.Phase == "":
			r.Phase = fleetv1alpha1.ImagePulling
		}
		byName[name] = r
	}
	s.mu.Unlock()
	out := make([]fleetv1alpha1.ReportedImage, 0, len(byName))
	for _, r := range byName {
		out = append(out, r)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	var used int64
	if usage, err := s.Cache.Usage(); err == nil {
		for _, n := range usage {
			used += n
		}
	}
	var budget int64
	if s.Budget != nil {
		budget = s.Budget()
	}
	return out, &fleetv1alpha1.ImageCacheReport{Used: *resource.NewQuantity(used, resource.BinarySI),
		Budget: *resource.NewQuantity(budget, resource.BinarySI)}
}

func truncate(s string) string {
	if len(s) > 1024 {
		return s[:1021] + "..."
	}
	return s
}
