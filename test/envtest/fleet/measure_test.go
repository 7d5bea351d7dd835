package fleet

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"runtime/metrics"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"k8s.io/client-go/kubernetes"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/boualleiguie/macrack-operator/test/envtest/harness"
)

// proc is one process's CPU and memory, from /proc.
type proc struct {
	cpu      time.Duration
	rss, hwm int64
}

// readProc reads /proc/<pid>/stat and status; pid "self" is this process.
func readProc(pid string) (proc, error) {
	var p proc
	stat, err := os.ReadFile(filepath.Join("/proc", pid, "stat"))
	if err != nil {
		return p, err
	}
	// The fields after the command's closing parenthesis: utime and stime
	// are the 12th and 13th of them, in clock ticks (100 a second).
	fields := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
	if len(fields) < 13 {
		return p, fmt.Errorf("/proc/%s/stat: %d fields", pid, len(fields))
	}
	ut, _ := strconv.ParseInt(fields[11], 10, 64)
	st, _ := strconv.ParseInt(fields[12], 10, 64)
	p.cpu = time.Duration(ut+st) * 10 * time.Millisecond
	status, err := os.ReadFile(filepath.Join("/proc", pid, "status"))
	if err != nil {
		return p, err
	}
	for _, line := range strings.Split(string(status), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		switch k {
		case "VmRSS":
			p.rss = kb << 10
		case "VmHWM":
			p.hwm = kb << 10
		}
	}
	return p, nil
}

// findProcess is the pid of the process whose command line holds every
// one of words.
func findProcess(words ...string) (string, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return "", err
	}
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		all := true
		for _, w := range words {
			if !bytes.Contains(cmdline, []byte(w)) {
				all = false
				break
			}
		}
		if all {
			return e.Name(), nil
		}
	}
	return "", fmt.Errorf("no process with %q", words)
}

// controlPlanePIDs finds the benchmark's kube-apiserver and etcd among the
// machine's processes.
func controlPlanePIDs(env *harness.Env) (apiserver, etcd string, err error) {
	u, err := url.Parse(env.Config.Host)
	if err != nil {
		return "", "", err
	}
	if apiserver, err = findProcess("kube-apiserver", "--secure-port="+u.Port()); err != nil {
		return "", "", err
	}
	etcdURL := env.Environment.ControlPlane.Etcd.URL
	if etcd, err = findProcess("etcd", "--listen-client-urls="+etcdURL.String()); err != nil {
		return "", "", err
	}
	return apiserver, etcd, nil
}

// sample is the costs at one moment; a wave's cost is the difference of
// two.
type sample struct {
	at                    time.Time
	operator, fleet       proc
	apiserver, etcd       proc
	apiReads, apiWrites   float64
	flowWaits             map[string]flowWait
	reconciles, decisions map[string]float64
}

// requestLine matches apiserver_request_total's samples; flowWaitLine the
// sums and counts of apiserver_flowcontrol_request_wait_duration_seconds,
// the time requests queued in priority and fairness before they ran.
var (
	requestLine  = regexp.MustCompile(`^apiserver_request_total\{([^}]*)\} ([0-9.e+]+)$`)
	verbLabel    = regexp.MustCompile(`verb="([A-Z]+)"`)
	flowWaitLine = regexp.MustCompile(`^apiserver_flowcontrol_request_wait_duration_seconds_(sum|count)\{([^}]*)\} ([0-9.e+]+)$`)
	levelLabel   = regexp.MustCompile(`priority_level="([^"]+)"`)
)

// flowWait is one priority level's queueing, summed.
type flowWait struct{ seconds, requests float64 }

// apiRequests reads the API server's request counters from its /metrics,
// as reads (GET, LIST, WATCH) and writes (POST, PUT, PATCH, DELETE,
// APPLY), and its priority levels' queueing.
func apiRequests(ctx context.Context, cs *kubernetes.Clientset) (reads, writes float64, waits map[string]flowWait, err error) {
	raw, err := cs.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return 0, 0, nil, err
	}
	waits = map[string]flowWait{}
	sc := bufio.NewScanner(bytes.NewReader(raw))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if m := flowWaitLine.FindStringSubmatch(sc.Text()); m != nil {
			level := levelLabel.FindStringSubmatch(m[2])
			if level == nil {
				continue
			}
			v, _ := strconv.ParseFloat(m[3], 64)
			w := waits[level[1]]
			if m[1] == "sum" {
				w.seconds += v
			} else {
				w.requests += v
			}
			waits[level[1]] = w
			continue
		}
		m := requestLine.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		v, _ := strconv.ParseFloat(m[2], 64)
		verb := verbLabel.FindStringSubmatch(m[1])
		if verb == nil {
			continue
		}
		switch verb[1] {
		case "GET", "LIST", "WATCH":
			reads += v
		case "POST", "PUT", "PATCH", "DELETE", "APPLY", "DELETECOLLECTION":
			writes += v
		}
	}
	return reads, writes, waits, sc.Err()
}

// counters sums a metric family's counters or histogram counts by one
// label, from gatherers.
func counters(name, label string, gatherers ...prometheus.Gatherer) map[string]float64 {
	out := map[string]float64{}
	for _, g := range gatherers {
		mfs, err := g.Gather()
		if err != nil {
			continue
		}
		for _, mf := range mfs {
			if mf.GetName() != name {
				continue
			}
			for _, m := range mf.GetMetric() {
				key := labelValue(m, label)
				switch {
				case m.GetCounter() != nil:
					out[key] += m.GetCounter().GetValue()
				case m.GetHistogram() != nil:
					out[key] += float64(m.GetHistogram().GetSampleCount())
				}
			}
		}
	}
	return out
}

func labelValue(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// take samples every cost now.
func (f *bench) take(ctx context.Context) (sample, error) {
	s := sample{at: time.Now()}
	var err error
	if s.operator, err = readProc("self"); err != nil {
		return s, err
	}
	if s.fleet, err = readProc(strconv.Itoa(f.child.Process.Pid)); err != nil {
		return s, err
	}
	if s.apiserver, err = readProc(f.apiserverPID); err != nil {
		return s, err
	}
	if s.etcd, err = readProc(f.etcdPID); err != nil {
		return s, err
	}
	if s.apiReads, s.apiWrites, s.flowWaits, err = apiRequests(ctx, f.clientset); err != nil {
		return s, err
	}
	s.reconciles = counters("controller_runtime_reconcile_total", "controller", ctrlmetrics.Registry)
	s.decisions = counters("macrack_policy_decide_duration_seconds", "", f.op.Registry, ctrlmetrics.Registry)
	return s, nil
}

// peaks follows the processes' resident memory while a wave runs.
type peaks struct {
	mu                                 sync.Mutex
	operator, fleet, apiserver, etcd   int64
	stop                               chan struct{}
	done                               chan struct{}
	operatorPID, fleetPID, apiPID, etc string
	// liveHeap and heapGoal: this process's Go heap at its largest, from
	// runtime/metrics (no stop of the world).
	liveHeap, heapGoal uint64
	// peakProfile, if set, is where the heap profile at the live heap's
	// largest is written: what the peak holds, which the wave's end no
	// longer does.
	peakProfile string
	profiled    uint64
}

// heapMetrics are this process's live heap after the last collection and
// the collector's goal for the next.
var heapMetrics = []metrics.Sample{{Name: "/gc/heap/live:bytes"}, {Name: "/gc/heap/goal:bytes"}}

func watchPeaks(operatorPID, fleetPID, apiPID, etcdPID, peakProfile string) *peaks {
	p := &peaks{stop: make(chan struct{}), done: make(chan struct{}),
		operatorPID: operatorPID, fleetPID: fleetPID, apiPID: apiPID, etc: etcdPID, peakProfile: peakProfile}
	go func() {
		defer close(p.done)
		t := time.NewTicker(500 * time.Millisecond)
		defer t.Stop()
		for {
			p.mu.Lock()
			for _, x := range []struct {
				pid  string
				peak *int64
			}{{p.operatorPID, &p.operator}, {p.fleetPID, &p.fleet}, {p.apiPID, &p.apiserver}, {p.etc, &p.etcd}} {
				if pr, err := readProc(x.pid); err == nil && pr.rss > *x.peak {
					*x.peak = pr.rss
				}
			}
			if p.operatorPID == "self" {
				metrics.Read(heapMetrics)
				p.liveHeap = max(p.liveHeap, heapMetrics[0].Value.Uint64())
				p.heapGoal = max(p.heapGoal, heapMetrics[1].Value.Uint64())
				// A new peak 2 MB past the last profiled one is profiled
				// again: the profile's in-use figures are the last
				// collection's, the live heap just read.
				if p.peakProfile != "" && p.liveHeap >= p.profiled+2<<20 {
					p.profiled = p.liveHeap
					var buf bytes.Buffer
					if pprof.WriteHeapProfile(&buf) == nil {
						_ = os.WriteFile(p.peakProfile, buf.Bytes(), 0o644)
					}
				}
			}
			p.mu.Unlock()
			select {
			case <-p.stop:
				return
			case <-t.C:
			}
		}
	}()
	return p
}

func (p *peaks) end() {
	close(p.stop)
	<-p.done
}
