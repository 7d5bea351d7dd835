package report

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
	macrackscheme "github.com/boualleiguie/macrack-operator/internal/scheme"
)

const testNode = "c02test00001"

// server is a fake API server holding the chassis' MacNode, which counts
// the report's writes and can refuse them.
type server struct {
	t      *testing.T
	c      client.Client
	mu     sync.Mutex
	bodies []string
	refuse error
	wrote  chan struct{}
}

func newServer(t *testing.T, reported *fleetv1alpha1.ReportedFacts) *server {
	t.Helper()
	scheme, err := macrackscheme.New()
	if err != nil {
		t.Fatal(err)
	}
	s := &server{t: t, wrote: make(chan struct{}, 100)}
	mn := &fleetv1alpha1.MacNode{ObjectMeta: metav1.ObjectMeta{Name: testNode},
		Spec:   fleetv1alpha1.MacNodeSpec{Serial: "C02TEST00001", NodeClassName: "m4-test"},
		Status: fleetv1alpha1.MacNodeStatus{Reported: reported}}
	s.c = fake.NewClientBuilder().WithScheme(scheme).WithObjects(mn).WithStatusSubresource(&fleetv1alpha1.MacNode{}).
		WithInterceptorFuncs(interceptor.Funcs{
			SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, p client.Patch, opts ...client.SubResourcePatchOption) error {
				body, err := p.Data(obj)
				if err != nil {
					return err
				}
				s.mu.Lock()
				refuse := s.refuse
				s.bodies = append(s.bodies, string(body))
				s.mu.Unlock()
				defer func() { s.wrote <- struct{}{} }()
				if refuse != nil {
					return refuse
				}
				return c.SubResource(sub).Patch(ctx, obj, p, opts...)
			},
		}).Build()
	return s
}

func (s *server) writes() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.bodies)
}

func (s *server) reported() *fleetv1alpha1.ReportedFacts {
	s.t.Helper()
	mn := &fleetv1alpha1.MacNode{}
	if err := s.c.Get(context.Background(), client.ObjectKey{Name: testNode}, mn); err != nil {
		s.t.Fatal(err)
	}
	if mn.Status.Reported == nil {
		return &fleetv1alpha1.ReportedFacts{}
	}
	return mn.Status.Reported
}

// source is one of the agent's sources of the report, publishing its
// n-th state.
type source struct {
	name    string
	publish func(r *Reporter, n int)
}

// sources are the agent's five: each publish names its sequence number,
// so that the report shows which publish of each it holds.
var sources = []source{
	{"facts", func(r *Reporter, n int) {
		r.Facts(&fleetv1alpha1.ReportedFacts{Chip: "M4", MacOSVersion: fmt.Sprintf("15.%d", n), SIPEnabled: ptr.To(true),
			Quota: &fleetv1alpha1.QuotaReport{State: fleetv1alpha1.QuotaOK}})
	}},
	{"quota", func(r *Reporter, n int) {
		r.Quota(&fleetv1alpha1.QuotaReport{State: fleetv1alpha1.QuotaStuck, RunningVMs: int32(n)})
	}},
	{"inventory", func(r *Reporter, n int) {
		r.Inventory(fleetv1alpha1.HostInventory{Disks: []types.UID{types.UID(fmt.Sprintf("uid-%d", n))}})
	}},
	{"images", func(r *Reporter, n int) {
		r.Images(Images{Images: []fleetv1alpha1.ReportedImage{{Name: "sequoia", Phase: fleetv1alpha1.ImagePulling, BytesDone: int64(n)}},
			Cache: &fleetv1alpha1.ImageCacheReport{Used: resource.MustParse("1Gi"), Budget: resource.MustParse("500Gi")}})
	}},
	{"wipes", func(r *Reporter, n int) {
		r.Wipes([]fleetv1alpha1.WipeEvidence{{Namespace: "t", Name: fmt.Sprintf("vm-%d", n), UID: "u", Method: "unlink"}})
	}},
}

// missing names the sources whose last publish (last) the report lacks.
func missing(r *fleetv1alpha1.ReportedFacts, last int) []string {
	var out []string
	if r.MacOSVersion != fmt.Sprintf("15.%d", last) || r.SIPEnabled == nil {
		out = append(out, "facts")
	}
	if r.Quota == nil || r.Quota.State != fleetv1alpha1.QuotaStuck || r.Quota.RunningVMs != int32(last) {
		out = append(out, "quota")
	}
	if r.Inventory == nil || !slices.Equal(r.Inventory.Disks, []types.UID{types.UID(fmt.Sprintf("uid-%d", last))}) {
		out = append(out, "inventory")
	}
	if len(r.Images) != 1 || r.Images[0].BytesDone != int64(last) || r.ImageCache == nil {
		out = append(out, "images")
	}
	if len(r.Wipes) != 1 || r.Wipes[0].Name != fmt.Sprintf("vm-%d", last) {
		out = append(out, "wipes")
	}
	return out
}

// publishAll has each source publish its states 0..last, all at once.
func publishAll(r *Reporter, srcs []source, last int) int {
	var wg sync.WaitGroup
	for _, s := range srcs {
		wg.Go(func() {
			for n := range last + 1 {
				s.publish(r, n)
			}
		})
	}
	wg.Wait()
	return len(srcs) * (last + 1)
}

// waitForTimer returns once a goroutine waits on clk: Run, in its
// debounce.
func waitForTimer(t *testing.T, clk *clocktesting.FakeClock) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !clk.HasWaiters() {
		if time.Now().After(deadline) {
			t.Fatal("the reporter never waited on its clock")
		}
		runtime.Gosched()
	}
}

// The five sources publish at once, each many times: the report holds the
// last publish of every one, in fewer writes than publishes; here one,
// once the debounce has passed, and none before.
func TestConcurrentPublishesFromEverySourceAreOneCoalescedWrite(t *testing.T) {
	srv := newServer(t, nil)
	clk := clocktesting.NewFakeClock(time.Now())
	r := &Reporter{Client: srv.c, NodeName: testNode, Clock: clk, Log: logr.Discard()}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = r.Run(ctx) }()
	defer func() { cancel(); <-done }()

	const last = 9
	published := publishAll(r, sources, last)
	waitForTimer(t, clk)
	if n := len(srv.writes()); n != 0 {
		t.Fatalf("%d writes before the debounce passed, want none", n)
	}
	clk.Step(DefaultDebounce)
	<-srv.wrote
	if got := missing(srv.reported(), last); len(got) != 0 {
		t.Fatalf("the report lacks the last publish of %v", got)
	}
	if n := len(srv.writes()); n != 1 || n >= published {
		t.Fatalf("%d writes for %d publishes, want one", n, published)
	}
}

// The check above fails when a source's publishes are lost: the control,
// with the inventory left out, names it, and only it.
func TestADroppedSourceIsMissingFromTheReport(t *testing.T) {
	srv := newServer(t, nil)
	r := &Reporter{Client: srv.c, NodeName: testNode, Log: logr.Discard()}
	var rest []source
	for _, s := range sources {
		if s.name != "inventory" {
			rest = append(rest, s)
		}
	}
	publishAll(r, rest, 3)
	if err := r.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := missing(srv.reported(), 3); !slices.Equal(got, []string{"inventory"}) {
		t.Fatalf("missing %v, want [inventory]", got)
	}

	// Positive control: every source, then nothing is missing.
	publishAll(r, sources, 3)
	if err := r.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := missing(srv.reported(), 3); len(got) != 0 {
		t.Fatalf("missing %v with every source", got)
	}
}

// A field is one part's: a facts publish that carries the inventory, the
// images or the wipes, as a facts source may, does not write them; the
// parts' own publishes do. What an earlier run reported stands in a field
// no part has published.
func TestEachFieldHasOnePart(t *testing.T) {
	earlier := &fleetv1alpha1.HostInventory{Disks: []types.UID{"uid-earlier"}}
	srv := newServer(t, &fleetv1alpha1.ReportedFacts{Inventory: earlier, AgentVersion: "v0"})
	r := &Reporter{Client: srv.c, NodeName: testNode, Log: logr.Discard()}
	r.Facts(&fleetv1alpha1.ReportedFacts{Chip: "M4", Inventory: &fleetv1alpha1.HostInventory{},
		Wipes: []fleetv1alpha1.WipeEvidence{{Name: "from-facts"}}, Images: []fleetv1alpha1.ReportedImage{{Name: "from-facts"}}})
	if err := r.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	got := srv.reported()
	if got.Inventory == nil || !slices.Equal(got.Inventory.Disks, earlier.Disks) || got.Wipes != nil || got.Images != nil {
		t.Fatalf("after a facts publish: inventory %+v, wipes %+v, images %+v; want the earlier inventory and no wipes or images", got.Inventory, got.Wipes, got.Images)
	}
	if got.Chip != "M4" || got.AgentVersion != "" {
		t.Fatalf("chip %q agentVersion %q: want the facts' chip, and a fact they leave out cleared", got.Chip, got.AgentVersion)
	}
	// Positive control: the inventory's own publish writes it.
	r.Inventory(fleetv1alpha1.HostInventory{})
	if err := r.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := srv.reported(); !got.Inventory.Empty() {
		t.Fatalf("inventory %+v after its own publish, want it empty", got.Inventory)
	}
}

// Every field of status.reported belongs to exactly one part: the parts
// but the facts name theirs, and the facts name all the others.
func TestThePartsCoverEveryFieldOnce(t *testing.T) {
	all := parts{facts: &fleetv1alpha1.ReportedFacts{}, quota: &fleetv1alpha1.QuotaReport{}, inventory: &fleetv1alpha1.HostInventory{},
		images: &Images{}, wipes: &[]fleetv1alpha1.WipeEvidence{}}
	fields, err := all.fields()
	if err != nil {
		t.Fatal(err)
	}
	facts, err := wholePatch(&fleetv1alpha1.ReportedFacts{})
	if err != nil {
		t.Fatal(err)
	}
	if len(fields) != len(facts) {
		t.Fatalf("the parts name %d fields, status.reported has %d", len(fields), len(facts))
	}
	for k := range facts {
		if _, ok := fields[k]; !ok {
			t.Errorf("no part names %s", k)
		}
	}
	if len(theirs()) != 6 { // quota, inventory, images, imageCache, imagePulls, wipes
		t.Errorf("the parts but the facts name %v", theirs())
	}
}

// A publish that changes nothing is no write, and a write names only the
// fields that changed.
func TestAnUnchangedPublishIsNoWrite(t *testing.T) {
	srv := newServer(t, nil)
	r := &Reporter{Client: srv.c, NodeName: testNode, Log: logr.Discard()}
	ctx := context.Background()
	sources[0].publish(r, 1)
	sources[2].publish(r, 1)
	if err := r.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	sources[0].publish(r, 1)
	sources[2].publish(r, 1)
	if err := r.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if n := len(srv.writes()); n != 1 {
		t.Fatalf("%d writes, want one: the second publishes changed nothing", n)
	}
	sources[2].publish(r, 2)
	if err := r.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	w := srv.writes()
	var p struct {
		Status struct {
			Reported map[string]json.RawMessage `json:"reported"`
		} `json:"status"`
	}
	if len(w) != 2 || json.Unmarshal([]byte(w[1]), &p) != nil {
		t.Fatalf("writes %v, want a second one", w)
	}
	if _, ok := p.Status.Reported["inventory"]; !ok || len(p.Status.Reported) != 1 {
		t.Fatalf("the second write %s, want the inventory alone", w[1])
	}
}

// A write the API server refuses is sent again: the next Flush writes
// what the refused one held, and Run tries again after Retry.
func TestARefusedWriteIsSentAgain(t *testing.T) {
	srv := newServer(t, nil)
	srv.refuse = errors.New("the API server is away")
	clk := clocktesting.NewFakeClock(time.Now())
	r := &Reporter{Client: srv.c, NodeName: testNode, Clock: clk, Log: logr.Discard()}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = r.Run(ctx) }()
	defer func() { cancel(); <-done }()

	sources[1].publish(r, 1)
	waitForTimer(t, clk)
	clk.Step(DefaultDebounce)
	<-srv.wrote
	if err := r.Flush(context.Background()); !errors.Is(err, ErrReport) || !strings.Contains(err.Error(), "away") {
		t.Fatalf("flush: %v, want the refusal", err)
	}
	<-srv.wrote
	srv.mu.Lock()
	srv.refuse = nil
	srv.mu.Unlock()
	waitForTimer(t, clk)
	clk.Step(DefaultRetry)
	<-srv.wrote
	if q := srv.reported().Quota; q == nil || q.RunningVMs != 1 {
		t.Fatalf("quota %+v after the retry, want the one refused before", q)
	}
}
