package fleet

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"fmt"
	"io"
	"maps"
	"net/http"
	_ "net/http/pprof"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/pprof/profile"
	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/transport"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	computev1alpha1 "github.com/boualleiguie/macrack-operator/api/compute/v1alpha1"
	leasingv1alpha1 "github.com/boualleiguie/macrack-operator/api/leasing/v1alpha1"
	"github.com/boualleiguie/macrack-operator/internal/audit/sink"
	"github.com/boualleiguie/macrack-operator/internal/enroll"
	"github.com/boualleiguie/macrack-operator/internal/simfleet"
	"github.com/boualleiguie/macrack-operator/test/envtest/harness"
)

// The benchmark's settings, from the environment (make bench-fleet N=…).
const (
	envSize = "FLEET_N"
	// envProfile, set, writes the operator's CPU profile of each wave to
	// <dir>/<wave>.pprof, and serves net/http/pprof on pprofAddress.
	envProfile   = "FLEET_PROFILE_DIR"
	pprofAddress = "127.0.0.1:6061"
	// envWaves, set to "cold", stops after the cold wave: at N = 1,000 the
	// three waves take an hour on a 2-core machine, the cold one a quarter
	// of it, and the growth table needs the cold wave alone.
	envWaves = "FLEET_WAVES"
	// envHeldIdle, set to a duration, measures the fleet for that long
	// after the cold wave, every lease held and its VMs running, with
	// nothing asked of it: what a long wave pays per second beyond the
	// heartbeats (the guest's reports, the chassis' reports).
	envHeldIdle = "FLEET_HELD_IDLE"
	// fleetPprofAddress is the fleet child's net/http/pprof, with
	// FLEET_PROFILE_DIR set.
	fleetPprofAddress = "127.0.0.1:6062"
	// envHeap, set to a directory, writes the benchmark process's heap
	// profile (in use, after a collection) at the end of each wave to
	// <dir>/heap-<wave>.pprof: what the operator holds once the wave's
	// objects all exist. Unlike FLEET_PROFILE_DIR it costs the wave
	// nothing while it runs.
	envHeap = "FLEET_HEAP_DIR"
	// envOperator, set to "masters", runs the operator in system:masters,
	// which priority and fairness exempts, as the benchmark did before
	// the operator's FlowSchema. By default it runs as its Deployment's
	// ServiceAccount does, under config/rbac's roles, and its requests
	// queue where a cluster's would.
	envOperator = "FLEET_OPERATOR"
)

const (
	fleetClass  = "m4-fleet"
	fleetImage  = "fleet-golden"
	heartbeat   = 10 * time.Second
	missedBeats = 4
	// workers act for the tenants side by side.
	workers = 64
	// waveTimeout bounds one wave: a wave that misses it fails the run.
	waveTimeout = 40 * time.Minute
	// idleFor is how long the idle fleet is measured: heartbeats and
	// reports alone.
	idleFor = 30 * time.Second
	// apiserverProfileFor is how much of each wave the API server's CPU
	// profile covers, from its start (FLEET_PROFILE_DIR).
	apiserverProfileFor = 30 * time.Second
)

// BenchmarkFleet is the fleet at scale, as tenants see it through the API
// server: N minis enrolled and running their agents (in one child
// process), N tenants each with a namespace, one lease and two instances.
// It runs three waves: a cold one (every chassis pulls the golden at
// once), the release wave (every lease reaches earliestReleaseAt at once,
// on a clock stepped 25h for the operator and the agents alike), and a
// warm one (the golden cached on every chassis). Run it once per size:
//
//	make bench-fleet N=1000
func BenchmarkFleet(b *testing.B) {
	n := 10
	if v := os.Getenv(envSize); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 1 {
			b.Fatalf("%s=%q is not a positive number", envSize, v)
		}
	}
	if os.Getenv(envHeap) != "" {
		// Finer than the default 512 KiB, so that the operator's smaller
		// holders show.
		runtime.MemProfileRate = 64 << 10
	}
	if dir := os.Getenv(envProfile); dir != "" {
		// The operator's goroutines and blocking, live, while a wave runs.
		runtime.SetBlockProfileRate(int(time.Millisecond))
		go func() { _ = http.ListenAndServe(pprofAddress, nil) }()
	}
	f := startBench(b, n)
	f.report = append(f.report, fmt.Sprintf("fleet N=%d: %d minis, %d tenants, %d leases, %d instances; heartbeat %s, grace %s",
		n, n, n, n, 2*n, heartbeat, heartbeat*missedBeats))
	idle := f.idle(idleFor)
	cold := f.wave("cold", "a")
	waves := []*waveResult{idle, cold}
	if v := os.Getenv(envHeldIdle); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			b.Fatalf("%s=%q is not a positive duration", envHeldIdle, v)
		}
		held := f.idle(d)
		held.name = "held"
		waves = append(waves, held)
	}
	switch v := os.Getenv(envWaves); v {
	case "", "all":
		release := f.release("a")
		warm := f.wave("warm", "b")
		waves = append(waves, release, warm)
		b.ReportMetric(warm.allRunning.Seconds(), "warm-s")
		b.ReportMetric(release.allReady.Seconds(), "release-s")
	case "cold":
	default:
		b.Fatalf("%s=%q: want cold or all", envWaves, v)
	}
	for _, w := range waves {
		f.report = append(f.report, w.lines()...)
	}
	if fp := f.track.falsePositives(); fp != 0 {
		b.Errorf("%d chassis went NotReady for a missed heartbeat while their agents ran", fp)
	} else {
		f.report = append(f.report, "heartbeat: 0 chassis marked NotReady for a missed heartbeat")
	}
	f.report = append(f.report, fmt.Sprintf("creates retried after a timeout or internal error: %d", f.retries.Load()))
	f.report = append(f.report, f.retryReport()...)
	fmt.Println(strings.Join(f.report, "\n"))
	b.ReportMetric(cold.allRunning.Seconds(), "cold-s")
	b.ReportMetric(float64(waves[len(waves)-1].peakOperator)/(1<<20), "operator-MB")
}

// bench is one fleet benchmark's cluster.
type bench struct {
	b            *testing.B
	n            int
	env          *harness.Env
	op           *harness.Operator
	clk          *harness.OffsetClock
	clientset    *kubernetes.Clientset
	tenants      client.Client
	namespaces   []string
	track        *tracker
	child        *exec.Cmd
	childIn      io.WriteCloser
	childOut     *bufio.Scanner
	apiserverPID string
	etcdPID      string
	// auditLog is the API server's audit log of writes, with
	// FLEET_WRITES_DIR set; "" without.
	auditLog string
	report   []string
	// retries counts the creates retried after a timeout or internal error;
	// retryCauses counts them by the refusal's cause.
	retries     atomic.Int64
	retryMu     sync.Mutex
	retryCauses map[string]int
}

// digits makes a refusal's message a cause: the same for every tenant,
// port and name.
var digits = regexp.MustCompile(`[0-9]+`)

func (f *bench) retried(err error) {
	f.retries.Add(1)
	cause := digits.ReplaceAllString(err.Error(), "N")
	if len(cause) > 160 {
		cause = cause[:160]
	}
	f.retryMu.Lock()
	defer f.retryMu.Unlock()
	if f.retryCauses == nil {
		f.retryCauses = map[string]int{}
	}
	f.retryCauses[cause]++
}

// retryReport lists the retries' causes, the most frequent first.
func (f *bench) retryReport() []string {
	f.retryMu.Lock()
	defer f.retryMu.Unlock()
	causes := slices.Collect(maps.Keys(f.retryCauses))
	slices.SortFunc(causes, func(a, b string) int { return f.retryCauses[b] - f.retryCauses[a] })
	out := make([]string, 0, len(causes))
	for _, c := range causes {
		out = append(out, fmt.Sprintf("  %d× %s", f.retryCauses[c], c))
	}
	return out
}

func startBench(b *testing.B, n int) *bench {
	ctx := context.Background()
	f := &bench{b: b, n: n, clk: &harness.OffsetClock{}}
	var err error
	var auditArgs map[string]string
	if dir := os.Getenv(envWrites); dir != "" {
		if f.auditLog, auditArgs, err = auditFlags(dir); err != nil {
			b.Fatal(err)
		}
	}
	if f.env, err = harness.Start(harness.WithWebhooks, func(env *envtest.Environment) {
		// A thousand agents, each with its watches, and tenants creating
		// at once: the API server's in-flight limits are a real one's.
		args := env.ControlPlane.GetAPIServer().Configure().Set("max-requests-inflight", "800").Set("max-mutating-requests-inflight", "400")
		for k, v := range auditArgs {
			args.Set(k, v)
		}
	}); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = f.env.Stop() })
	admin := f.env.Client
	if dir := os.Getenv(envProfile); dir != "" {
		// kubectl on the benchmark's cluster, while it runs.
		if _, err := f.env.AdminKubeconfig(dir); err != nil {
			b.Fatal(err)
		}
	}
	if f.clientset, err = kubernetes.NewForConfig(f.env.Config); err != nil {
		b.Fatal(err)
	}
	if f.apiserverPID, f.etcdPID, err = controlPlanePIDs(f.env); err != nil {
		b.Fatal(err)
	}
	if err := admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: harness.AgentsNamespace}}); err != nil {
		b.Fatal(err)
	}
	for _, file := range []string{"config/rbac/agent_role.yaml", "config/rbac/tenant_roles.yaml"} {
		if err := f.env.ApplyYAML(ctx, file); err != nil {
			b.Fatal(err)
		}
	}
	nats, err := harness.StartNATS(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = nats.Kill() })
	sink, err := sink.Open(ctx, nats.URL(), io.Discard)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = sink.Close() })
	if f.op, err = f.env.StartOperator(harness.OperatorOptions{Webhooks: true, Clock: f.clk,
		HeartbeatGrace: heartbeat * missedBeats, AuditSink: sink, MaxConcurrentReconciles: 8,
		ApplyAdmissionPolicies: true, AsServiceAccount: os.Getenv(envOperator) != "masters"}); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = f.op.Stop() })
	if _, err := harness.CreateClass(ctx, admin, fleetClass, 2); err != nil {
		b.Fatal(err)
	}
	if err := f.env.CreateImage(ctx, admin, fleetImage, "60Gi"); err != nil {
		b.Fatal(err)
	}
	if f.track, err = startTracker(ctx, f.env); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(f.track.stop)

	t0 := time.Now()
	f.startFleet(ctx)
	f.waitFor("every chassis Ready", func() bool { return f.track.readyNodes() == n })
	f.report = append(f.report, fmt.Sprintf("fleet up: %d chassis enrolled, their agents started and Ready in %s", n, time.Since(t0).Round(100*time.Millisecond)))

	t0 = time.Now()
	f.makeTenants(ctx)
	f.report = append(f.report, fmt.Sprintf("tenants: %d namespaces and role bindings in %s", n, time.Since(t0).Round(100*time.Millisecond)))
	return f
}

// startFleet enrolls every mini, as `macrackctl node enroll` does, and
// starts the fleet's child process.
func (f *bench) startFleet(ctx context.Context) {
	root, err := os.MkdirTemp("", "mf")
	if err != nil {
		f.b.Fatal(err)
	}
	f.b.Cleanup(func() { _ = os.RemoveAll(root) })
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(16)
	for i := range f.n {
		g.Go(func() error {
			serial := fmt.Sprintf("C02F%08d", i+1)
			kc, err := enroll.Enroll(gctx, f.env.Client, f.env.Config, enroll.Options{Serial: serial, Class: fleetClass,
				AgentsNamespace: harness.AgentsNamespace, TokenTTL: 24 * time.Hour})
			if err != nil {
				return err
			}
			dir := filepath.Join(root, enroll.NodeName(serial))
			if err := os.MkdirAll(dir, 0o700); err != nil {
				return err
			}
			return os.WriteFile(filepath.Join(dir, simfleet.BootstrapKubeconfig), kc, 0o600)
		})
	}
	if err := g.Wait(); err != nil {
		f.b.Fatal(err)
	}
	logf, err := os.Create(filepath.Join(f.b.TempDir(), "fleet.log"))
	if err != nil {
		f.b.Fatal(err)
	}
	f.child = exec.Command(os.Args[0], "-test.run=^$")
	f.child.Env = append(os.Environ(), envFleetRoot+"="+root, envHeartbeat+"="+heartbeat.String())
	f.child.Stderr = logf
	if f.childIn, err = f.child.StdinPipe(); err != nil {
		f.b.Fatal(err)
	}
	out, err := f.child.StdoutPipe()
	if err != nil {
		f.b.Fatal(err)
	}
	f.childOut = bufio.NewScanner(out)
	if err := f.child.Start(); err != nil {
		f.b.Fatal(err)
	}
	f.b.Cleanup(func() {
		_ = f.childIn.Close()
		_ = f.child.Process.Signal(os.Interrupt)
		done := make(chan struct{})
		go func() { _ = f.child.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(time.Minute):
			_ = f.child.Process.Kill()
		}
		_ = logf.Close()
	})
}

// makeTenants makes one namespace per tenant, each with its own user
// bound to macrack-tenant-edit there, and a client that acts as whichever
// tenant its request's context names.
func (f *bench) makeTenants(ctx context.Context) {
	f.namespaces = make([]string, f.n)
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(workers)
	for i := range f.n {
		g.Go(func() error {
			ns := fmt.Sprintf("tenant-%05d", i+1)
			f.namespaces[i] = ns
			if err := f.env.Client.Create(gctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
				return err
			}
			return f.env.Client.Create(gctx, &rbacv1.RoleBinding{
				ObjectMeta: metav1.ObjectMeta{Name: "macrack-tenant-edit", Namespace: ns},
				RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "macrack-tenant-edit"},
				Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: ns}},
			})
		})
	}
	if err := g.Wait(); err != nil {
		f.b.Fatal(err)
	}
	cfg := rest.CopyConfig(f.env.Config)
	cfg.QPS, cfg.Burst = -1, -1
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return asTenant{rt} })
	var err error
	if f.tenants, err = client.New(cfg, client.Options{Scheme: f.env.Scheme}); err != nil {
		f.b.Fatal(err)
	}
}

// tenantKey carries the tenant a request acts as.
type tenantKey struct{}

func asUser(ctx context.Context, user string) context.Context {
	return context.WithValue(ctx, tenantKey{}, user)
}

// asTenant impersonates the tenant its request's context names: one
// connection, a thousand identities.
type asTenant struct{ rt http.RoundTripper }

func (t asTenant) RoundTrip(req *http.Request) (*http.Response, error) {
	user, _ := req.Context().Value(tenantKey{}).(string)
	if user == "" {
		return t.rt.RoundTrip(req)
	}
	req = req.Clone(req.Context())
	req.Header.Set(transport.ImpersonateUserHeader, user)
	req.Header.Add(transport.ImpersonateGroupHeader, "system:authenticated")
	return t.rt.RoundTrip(req)
}

// waveResult is one wave's figures.
type waveResult struct {
	name                             string
	n                                int
	allBound, allRunning, allReady   time.Duration
	bound, running                   []time.Duration
	cost                             sampleDelta
	peakOperator, peakFleet, peakAPI int64
	peakEtcd                         int64
	// peakLiveHeap and peakHeapGoal are the benchmark process's Go heap
	// at its largest: live after a collection, and the size the collector
	// let it grow to before the next (the RSS follows the latter).
	peakLiveHeap, peakHeapGoal uint64
	// heapInuse is the process's heap in use at the wave's end, with
	// FLEET_HEAP_DIR set; heapTracker, the share the benchmark's own
	// tracker holds, so that the rest is the operator's.
	heapInuse, heapTracker int64

	heartbeats heartbeatGaps
	// writesBy is the wave's writes by writer, verb and what, with
	// FLEET_WRITES_DIR set.
	writesBy map[string]int

	release, idle bool
}

// sampleDelta is what a wave cost between two samples.
type sampleDelta struct {
	wall                                time.Duration
	operatorCPU, fleetCPU, apiCPU, etcd time.Duration
	reads, writes                       float64
	flowWaits                           map[string]flowWait
	reconciles                          map[string]float64
	decisions                           float64
}

func delta(a, b sample) sampleDelta {
	d := sampleDelta{wall: b.at.Sub(a.at), operatorCPU: b.operator.cpu - a.operator.cpu, fleetCPU: b.fleet.cpu - a.fleet.cpu,
		apiCPU: b.apiserver.cpu - a.apiserver.cpu, etcd: b.etcd.cpu - a.etcd.cpu,
		reads: b.apiReads - a.apiReads, writes: b.apiWrites - a.apiWrites, reconciles: map[string]float64{},
		flowWaits: map[string]flowWait{}}
	for k, v := range b.flowWaits {
		d.flowWaits[k] = flowWait{seconds: v.seconds - a.flowWaits[k].seconds, requests: v.requests - a.flowWaits[k].requests}
	}
	for k, v := range b.reconciles {
		d.reconciles[k] = v - a.reconciles[k]
	}
	for k, v := range b.decisions {
		d.decisions += v - a.decisions[k]
	}
	return d
}

// measure runs body between two samples, following peak memory and, if
// asked, profiling the operator's process.
func (f *bench) measure(name string, w *waveResult, body func()) {
	ctx := context.Background()
	if dir := os.Getenv(envProfile); dir != "" {
		pf, err := os.Create(filepath.Join(dir, name+".pprof"))
		if err != nil {
			f.b.Fatal(err)
		}
		if err := pprof.StartCPUProfile(pf); err != nil {
			f.b.Fatal(err)
		}
		defer func() { pprof.StopCPUProfile(); _ = pf.Close() }()
		// The API server's own profile of the wave's first minute: where
		// its CPU goes while the wave is busiest.
		done := f.apiserverProfile(ctx, filepath.Join(dir, "apiserver-"+name+".pprof"), apiserverProfileFor)
		defer func() { <-done }()
		// And the agents' (the fleet child's), over the same span.
		fleetDone := fleetProfile(ctx, filepath.Join(dir, "agents-"+name+".pprof"), apiserverProfileFor)
		defer func() { <-fleetDone }()
	}
	before, err := f.take(ctx)
	if err != nil {
		f.b.Fatal(err)
	}
	var peakProfile string
	if dir := os.Getenv(envHeap); dir != "" {
		peakProfile = filepath.Join(dir, "heap-"+name+"-peak.pprof")
	}
	pk := watchPeaks("self", strconv.Itoa(f.child.Process.Pid), f.apiserverPID, f.etcdPID, peakProfile)
	f.track.resetGaps()
	logFrom := logSize(f.auditLog)
	body()
	w.heartbeats = f.track.gapsSince()
	pk.end()
	if f.auditLog != "" {
		if w.writesBy, err = writesBetween(f.auditLog, logFrom, logSize(f.auditLog)); err != nil {
			f.b.Fatal(err)
		}
	}
	if dir := os.Getenv(envHeap); dir != "" {
		if w.heapInuse, w.heapTracker, err = writeHeapProfile(filepath.Join(dir, "heap-"+name+".pprof")); err != nil {
			f.b.Fatal(err)
		}
	}
	after, err := f.take(ctx)
	if err != nil {
		f.b.Fatal(err)
	}
	w.cost = delta(before, after)
	w.peakOperator, w.peakFleet, w.peakAPI, w.peakEtcd = pk.operator, pk.fleet, pk.apiserver, pk.etcd
	w.peakLiveHeap, w.peakHeapGoal = pk.liveHeap, pk.heapGoal
}

// writeHeapProfile writes the process's heap profile after a collection,
// so that its in-use figures are the live heap now, not at the last cycle,
// and beside it (.txt) the runtime's memory classes and the kernel's RSS
// split: what of the RSS is not heap (stacks, the binary's pages). It
// returns the heap in use and the tracker's share of it (trackerShare).
func writeHeapProfile(file string) (inuse, tracker int64, err error) {
	runtime.GC()
	var buf bytes.Buffer
	if err := pprof.WriteHeapProfile(&buf); err != nil {
		return 0, 0, fmt.Errorf("writing %s: %w", file, err)
	}
	if err := os.WriteFile(file, buf.Bytes(), 0o644); err != nil {
		return 0, 0, err
	}
	if inuse, tracker, err = trackerShare(&buf); err != nil {
		return 0, 0, fmt.Errorf("reading %s: %w", file, err)
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	var b strings.Builder
	fmt.Fprintf(&b, "HeapAlloc %d MB\nHeapInuse %d MB\nHeapIdle %d MB\nHeapReleased %d MB\nStackInuse %d MB\nSys %d MB\nNextGC %d MB\nGoroutines %d\n",
		ms.HeapAlloc>>20, ms.HeapInuse>>20, ms.HeapIdle>>20, ms.HeapReleased>>20, ms.StackInuse>>20, ms.Sys>>20, ms.NextGC>>20, runtime.NumGoroutine())
	if status, err := os.ReadFile("/proc/self/status"); err == nil {
		for _, line := range strings.Split(string(status), "\n") {
			if strings.HasPrefix(line, "Rss") || strings.HasPrefix(line, "VmHWM") || strings.HasPrefix(line, "VmRSS") {
				b.WriteString(line + "\n")
			}
		}
	}
	fmt.Fprintf(&b, "In use %d MB, of which the benchmark's tracker %d MB\n", inuse>>20, tracker>>20)
	return inuse, tracker, os.WriteFile(strings.TrimSuffix(file, ".pprof")+".txt", []byte(b.String()), 0o644)
}

// trackerShare sums a heap profile's bytes in use, and those allocated
// under the benchmark's tracker: what its informers keep of each object
// (trackedFields) and its maps. The tracker's informers' own store is
// allocated in client-go, under no frame of the tracker, and so counts as
// the operator's: an entry per lease, instance, MacNode and heartbeat.
func trackerShare(r io.Reader) (inuse, tracker int64, err error) {
	p, err := profile.Parse(r)
	if err != nil {
		return 0, 0, err
	}
	idx := -1
	for i, st := range p.SampleType {
		if st.Type == "inuse_space" {
			idx = i
		}
	}
	if idx < 0 {
		return 0, 0, fmt.Errorf("no inuse_space in the heap profile")
	}
	const pkg = "macrack-operator/test/envtest/fleet."
	for _, s := range p.Sample {
		v := s.Value[idx]
		inuse += v
	frames:
		for _, loc := range s.Location {
			for _, l := range loc.Line {
				if fn := l.Function; fn != nil && (strings.Contains(fn.Name, pkg+"trackedFields") ||
					strings.Contains(fn.Name, pkg+"(*tracker)") || strings.Contains(fn.Name, pkg+"startTracker")) {
					tracker += v
					break frames
				}
			}
		}
	}
	return inuse, tracker, nil
}

// fleetProfile fetches the fleet child's CPU profile over the next d into
// file, in the background, as apiserverProfile does.
func fleetProfile(ctx context.Context, file string, d time.Duration) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		err := func() error {
			req, err := http.NewRequestWithContext(ctx, http.MethodGet,
				fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", fleetPprofAddress, int(d.Seconds())), nil)
			if err != nil {
				return err
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				return err
			}
			defer func() { _ = resp.Body.Close() }()
			if resp.StatusCode != http.StatusOK {
				return fmt.Errorf("%s", resp.Status)
			}
			raw, err := io.ReadAll(resp.Body)
			if err != nil {
				return err
			}
			return os.WriteFile(file, raw, 0o644)
		}()
		if err != nil {
			fmt.Fprintf(os.Stderr, "the agents' profile %s: %v\n", file, err)
		}
	}()
	return done
}

// apiserverProfile fetches the kube-apiserver's CPU profile (its
// --profiling is on by default) over the next d into file, in the
// background; the channel closes when it is written or has failed.
func (f *bench) apiserverProfile(ctx context.Context, file string, d time.Duration) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		raw, err := f.clientset.CoreV1().RESTClient().Get().AbsPath("/debug/pprof/profile").
			Param("seconds", strconv.Itoa(int(d.Seconds()))).Timeout(d + 30*time.Second).DoRaw(ctx)
		if err == nil {
			err = os.WriteFile(file, raw, 0o644)
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "the API server's profile %s: %v\n", file, err)
		}
	}()
	return done
}

// wave: every tenant creates its lease at once and, once it is Bound, its
// two instances; it ends when every instance is Running.
func (f *bench) wave(name, suffix string) *waveResult {
	ctx := context.Background()
	w := &waveResult{name: name, n: f.n}
	lease := "l-" + suffix
	starts := make([]time.Time, f.n)
	var t0 time.Time
	f.measure(name, w, func() {
		t0 = time.Now()
		g, gctx := errgroup.WithContext(ctx)
		g.SetLimit(workers)
		for i, ns := range f.namespaces {
			g.Go(func() error {
				tctx := asUser(gctx, ns)
				starts[i] = time.Now()
				l := &leasingv1alpha1.MacNodeLease{ObjectMeta: metav1.ObjectMeta{Name: lease, Namespace: ns},
					Spec: leasingv1alpha1.MacNodeLeaseSpec{NodeClassName: fleetClass, MinimumDuration: "24h"}}
				if err := f.createRetrying(tctx, f.tenants, l); err != nil {
					return err
				}
				// Instances are admitted in a Bound lease only: the tenant
				// waits for it, as `kubectl wait` would, on the watch.
				if err := wait.PollUntilContextTimeout(gctx, 20*time.Millisecond, waveTimeout, true, func(context.Context) (bool, error) {
					_, ok := f.track.leaseBoundAt(ns, lease)
					return ok, nil
				}); err != nil {
					return fmt.Errorf("lease %s/%s not Bound: %w", ns, lease, err)
				}
				for j := 1; j <= 2; j++ {
					inst := &computev1alpha1.MacOSInstance{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("i-%s-%d", suffix, j), Namespace: ns},
						Spec: computev1alpha1.MacOSInstanceSpec{LeaseName: lease, ImageName: fleetImage, CPU: 4,
							Memory: resource.MustParse("8Gi"), Disk: resource.MustParse("100Gi")}}
					if err := f.createRetrying(tctx, f.tenants, inst); err != nil {
						return err
					}
				}
				return nil
			})
		}
		if err := g.Wait(); err != nil {
			f.b.Fatal(err)
		}
		f.waitFor(name+": every lease Bound", func() bool { return f.track.boundCount(lease) == f.n })
		w.allBound = time.Since(t0)
		f.waitFor(name+": every instance Running", func() bool { return f.track.runningCount("i-"+suffix+"-") == 2*f.n })
		w.allRunning = time.Since(t0)
	})
	for i, ns := range f.namespaces {
		bound, ok := f.track.leaseBoundAt(ns, lease)
		if !ok {
			f.b.Fatalf("lease %s/%s: no Bound seen", ns, lease)
		}
		w.bound = append(w.bound, bound.Sub(starts[i]))
		r1, ok1 := f.track.instanceRunningAt(ns, "i-"+suffix+"-1")
		r2, ok2 := f.track.instanceRunningAt(ns, "i-"+suffix+"-2")
		if !ok1 || !ok2 {
			f.b.Fatalf("tenant %s: instance not seen Running", ns)
		}
		w.running = append(w.running, later(r1, r2).Sub(starts[i]))
	}
	if dup := f.track.doubleBindings(); len(dup) > 0 {
		f.b.Fatalf("leases bound to more than one chassis: %v", dup)
	}
	return w
}

// release: every tenant deletes its lease (Held until earliestReleaseAt),
// then the operator's and the agents' clock steps 25h at once, and every
// lease is ticked, as the clock's timers would. It ends when every lease
// is gone (released, its VMs stopped, its disks wiped, its audit records
// out) and every chassis is Ready again.
func (f *bench) release(suffix string) *waveResult {
	ctx := context.Background()
	w := &waveResult{name: "release", n: f.n, release: true}
	lease := "l-" + suffix
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(workers)
	for _, ns := range f.namespaces {
		g.Go(func() error {
			l := &leasingv1alpha1.MacNodeLease{ObjectMeta: metav1.ObjectMeta{Name: lease, Namespace: ns}}
			return f.tenants.Delete(asUser(gctx, ns), l)
		})
	}
	if err := g.Wait(); err != nil {
		f.b.Fatal(err)
	}
	f.waitFor("every lease Held", func() bool { return f.track.heldCount(lease) == f.n })
	f.measure("release", w, func() {
		t0 := time.Now()
		if _, err := io.WriteString(f.childIn, "step 25h\n"); err != nil {
			f.b.Fatal(err)
		}
		if !f.childOut.Scan() || f.childOut.Text() != "stepped" {
			f.b.Fatalf("the fleet did not step its clock: %q %v", f.childOut.Text(), f.childOut.Err())
		}
		objs := make([]client.Object, 0, f.n)
		for _, ns := range f.namespaces {
			objs = append(objs, &leasingv1alpha1.MacNodeLease{ObjectMeta: metav1.ObjectMeta{Name: lease, Namespace: ns}})
		}
		f.op.Step(25*time.Hour, objs...)
		f.waitFor("every lease released and gone", func() bool { return f.track.leaseCount(lease) == 0 })
		w.allBound = time.Since(t0) // all released
		f.waitFor("every chassis Ready again", func() bool { return f.track.readyNodes() == f.n })
		w.allReady = time.Since(t0)
	})
	return w
}

// idle measures the fleet with nothing to do for d: its heartbeats, the
// agents' periodic reports and the operator's assessments.
func (f *bench) idle(d time.Duration) *waveResult {
	w := &waveResult{name: "idle", n: f.n, idle: true}
	f.measure("idle", w, func() { time.Sleep(d) })
	return w
}

// createRetrying creates obj, again while the API server's RBAC informer
// has not yet seen the tenant's new binding (403), and again, as a tenant's
// client would, when a saturated API server or webhook timed out (counted
// in f.retries and reported: they are part of the figure).
func (f *bench) createRetrying(ctx context.Context, c client.Client, obj client.Object) error {
	retried := false
	var last error
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		err := c.Create(ctx, obj)
		switch {
		case err == nil:
			return true, nil
		case apierrors.IsAlreadyExists(err) && retried:
			return true, nil // the attempt that timed out was stored after all
		case apierrors.IsForbidden(err) && !strings.Contains(err.Error(), "admission webhook"):
			return false, nil
		case apierrors.IsInternalError(err) || apierrors.IsTimeout(err) || apierrors.IsServerTimeout(err) || apierrors.IsTooManyRequests(err):
			f.retried(err)
			retried, last = true, err
			return false, nil
		}
		return false, fmt.Errorf("creating %s %s/%s: %w", obj.GetObjectKind().GroupVersionKind().Kind, obj.GetNamespace(), obj.GetName(), err)
	})
	if err != nil && last != nil {
		// Say why it was refused until the end, and what the API server
		// was slow at then.
		fmt.Fprintf(os.Stderr, "creates retried, by cause:\n%s\n", strings.Join(f.retryReport(), "\n"))
		f.printSlowRequests()
		return fmt.Errorf("creating %s/%s: %w; refused last: %w", obj.GetNamespace(), obj.GetName(), err, last)
	}
	return err
}

func (f *bench) waitFor(what string, cond func() bool) {
	f.b.Helper()
	start := time.Now()
	deadline, progress := start.Add(waveTimeout), start.Add(30*time.Second)
	for !cond() {
		if now := time.Now(); now.After(deadline) {
			f.b.Fatalf("timed out after %s waiting: %s (%s)", waveTimeout, what, f.track.summary())
		} else if now.After(progress) {
			fmt.Fprintf(os.Stderr, "bench-fleet: %s waiting: %s (%s)\n", now.Sub(start).Round(time.Second), what, f.track.summary())
			progress = now.Add(30 * time.Second)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// lines renders the wave's figures.
func (w *waveResult) lines() []string {
	c := w.cost
	sec := c.wall.Seconds()
	out := []string{}
	switch {
	case w.idle && w.name == "held":
		out = append(out, fmt.Sprintf("held fleet, %s after the cold wave: every lease held, its VMs running, nothing asked", c.wall.Round(time.Second)))
	case w.idle:
		out = append(out, fmt.Sprintf("idle fleet, %s: the heartbeats and periodic reports alone", c.wall.Round(time.Second)))
	case w.release:
		out = append(out, fmt.Sprintf("release wave: all %d leases released and gone %s; every chassis Ready %s", w.n,
			w.allBound.Round(10*time.Millisecond), w.allReady.Round(10*time.Millisecond)))
	default:
		out = append(out,
			fmt.Sprintf("%s wave: all Bound %s, all Running %s", w.name, w.allBound.Round(10*time.Millisecond), w.allRunning.Round(10*time.Millisecond)),
			fmt.Sprintf("  per lease, to Bound: %s; to both instances Running: %s", quantiles(w.bound), quantiles(w.running)))
	}
	out = append(out,
		fmt.Sprintf("  CPU s: operator %.1f, agents %.1f, kube-apiserver %.1f, etcd %.1f (wall %.1f s)",
			c.operatorCPU.Seconds(), c.fleetCPU.Seconds(), c.apiCPU.Seconds(), c.etcd.Seconds(), sec),
		fmt.Sprintf("  peak RSS MB: operator %d, agents %d, kube-apiserver %d, etcd %d",
			w.peakOperator>>20, w.peakFleet>>20, w.peakAPI>>20, w.peakEtcd>>20),
		fmt.Sprintf("  operator's Go heap, peak MB: live %d, goal %d", w.peakLiveHeap>>20, w.peakHeapGoal>>20),
		fmt.Sprintf("  API requests: %.0f reads (%.0f/s), %.0f writes (%.0f/s); policy decisions %.0f (%.0f/s)",
			c.reads, c.reads/sec, c.writes, c.writes/sec, c.decisions, c.decisions/sec))
	if w.heapInuse > 0 {
		out = append(out, fmt.Sprintf("  Go heap in use at the wave's end, MB: %d, of which the operator's %d and the benchmark's tracker %d",
			w.heapInuse>>20, (w.heapInuse-w.heapTracker)>>20, w.heapTracker>>20))
	}
	keys := make([]string, 0, len(c.reconciles))
	for k := range c.reconciles {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var parts []string
	for _, k := range keys {
		if c.reconciles[k] > 0 {
			parts = append(parts, fmt.Sprintf("%s %.1f", k, c.reconciles[k]/float64(w.n)))
		}
	}
	out = append(out, "  reconciles per lease (per controller): "+strings.Join(parts, ", "))
	levels := make([]string, 0, len(c.flowWaits))
	for k, v := range c.flowWaits {
		if v.requests > 0 {
			levels = append(levels, k)
		}
	}
	slices.Sort(levels)
	parts = parts[:0]
	for _, k := range levels {
		v := c.flowWaits[k]
		parts = append(parts, fmt.Sprintf("%s %.0f requests, mean %s", k, v.requests,
			time.Duration(v.seconds/v.requests*float64(time.Second)).Round(time.Microsecond)))
	}
	out = append(out, "  queued in priority and fairness, per priority level: "+strings.Join(parts, "; "))
	if w.writesBy != nil {
		out = append(out, writesTable(w.writesBy, w.n)...)
	}
	if w.heartbeats.n > 0 {
		out = append(out, fmt.Sprintf("  heartbeats seen: %d, the longest gap between two of one chassis %s (%s)",
			w.heartbeats.n, w.heartbeats.longest.Round(10*time.Millisecond), w.heartbeats.node))
	}
	return out
}

func quantiles(d []time.Duration) string {
	s := slices.Clone(d)
	slices.Sort(s)
	at := func(q float64) time.Duration { return s[int(q*float64(len(s)-1))].Round(10 * time.Millisecond) }
	return fmt.Sprintf("p50 %s, p99 %s, max %s", at(0.5), at(0.99), s[len(s)-1].Round(10*time.Millisecond))
}

// slowLine matches the sums and counts of the API server's request and
// webhook latencies.
var slowLine = regexp.MustCompile(`^(apiserver_request_duration_seconds|apiserver_admission_webhook_admission_duration_seconds)_(sum|count)\{([^}]*)\} ([0-9.e+]+)$`)

// printSlowRequests prints, from the API server's /metrics, the request
// kinds and the webhooks with the longest mean latency so far.
func (f *bench) printSlowRequests() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	raw, err := f.clientset.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		fmt.Fprintf(os.Stderr, "the API server's metrics: %v\n", err)
		return
	}
	type agg struct{ sum, count float64 }
	by := map[string]*agg{}
	keep := regexp.MustCompile(`(verb|resource|subresource|name|operation|rejected)="([^"]*)"`)
	sc := bufio.NewScanner(bytes.NewReader(raw))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		m := slowLine.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		var key []string
		for _, l := range keep.FindAllStringSubmatch(m[3], -1) {
			if l[2] != "" {
				key = append(key, l[1]+"="+l[2])
			}
		}
		k := strings.TrimPrefix(m[1], "apiserver_") + " " + strings.Join(key, ",")
		a := by[k]
		if a == nil {
			a = &agg{}
			by[k] = a
		}
		v, _ := strconv.ParseFloat(m[4], 64)
		if m[2] == "sum" {
			a.sum += v
		} else {
			a.count += v
		}
	}
	keys := slices.Collect(maps.Keys(by))
	keys = slices.DeleteFunc(keys, func(k string) bool { return by[k].count < 5 })
	mean := func(k string) float64 { return by[k].sum / by[k].count }
	slices.SortFunc(keys, func(a, b string) int { return cmp.Compare(mean(b), mean(a)) })
	fmt.Fprintln(os.Stderr, "the API server's slowest requests and webhooks, mean since start:")
	for _, k := range keys[:min(len(keys), 20)] {
		fmt.Fprintf(os.Stderr, "  %.3f s over %.0f: %s\n", mean(k), by[k].count, k)
	}
}
