package vectors

import (
	"context"
	"encoding/json"
	"os"
	"runtime"
	"slices"
	"sort"
	"syscall"
	"testing"
	"time"

	utiljson "k8s.io/apimachinery/pkg/util/json"

	"github.com/boualleiguie/macrack-operator/internal/policy"
	"github.com/boualleiguie/macrack-operator/policies"
)

// realistic dresses an object as the API server stores it: managedFields
// from three managers and kubectl's last-applied annotation. The input
// builder strips the former; the latter stays, as a large string.
func realistic(obj map[string]any) map[string]any {
	if obj == nil {
		return nil
	}
	out := runtimeCopy(obj)
	meta, _ := out["metadata"].(map[string]any)
	if meta == nil {
		meta = map[string]any{}
		out["metadata"] = meta
	}
	applied, _ := json.Marshal(obj)
	ann, _ := meta["annotations"].(map[string]any)
	if ann == nil {
		ann = map[string]any{}
	}
	ann["kubectl.kubernetes.io/last-applied-configuration"] = string(applied)
	meta["annotations"] = ann
	meta["resourceVersion"] = "123456"
	meta["generation"] = int64(3)
	meta["creationTimestamp"] = "2026-06-01T12:00:00Z"
	fields := map[string]any{}
	for _, k := range []string{"spec", "status", "metadata"} {
		if sub, ok := out[k].(map[string]any); ok {
			f := map[string]any{}
			for kk := range sub {
				f["f:"+kk] = map[string]any{}
			}
			fields["f:"+k] = f
		}
	}
	var managed []any
	for _, m := range []string{"kubectl-client-side-apply", "macrack-operator", "macrack-agent"} {
		managed = append(managed, map[string]any{
			"manager": m, "operation": "Update", "apiVersion": out["apiVersion"],
			"time": "2026-06-01T12:00:00Z", "fieldsType": "FieldsV1", "fieldsV1": fields,
		})
	}
	meta["managedFields"] = managed
	return out
}

func runtimeCopy(m map[string]any) map[string]any {
	b, _ := json.Marshal(m)
	var out map[string]any
	_ = utiljson.Unmarshal(b, &out)
	return out
}

// benchInput is one allowed vector of the rule, dressed realistically, and
// its stored JSON, so that the benchmark includes decoding and conversion.
type benchInput struct {
	base        policy.Input
	objJSON     []byte
	oldJSON     []byte
	description string
}

func benchInputs(b *testing.B) (*policy.Engine, map[string]benchInput) {
	b.Helper()
	e, err := policy.Load(context.Background(), policies.FS)
	if err != nil {
		b.Fatal(err)
	}
	cases, err := Load(os.DirFS(vectorsDir()))
	if err != nil {
		b.Fatal(err)
	}
	out := map[string]benchInput{}
	for _, c := range cases {
		if _, done := out[c.Rule]; done || len(c.Expect) != 0 {
			continue
		}
		in, err := c.Input()
		if err != nil {
			b.Fatal(err)
		}
		bi := benchInput{base: in, description: c.Name}
		if in.Object != nil {
			bi.objJSON, _ = json.Marshal(realistic(in.Object))
		}
		if in.OldObject != nil {
			bi.oldJSON, _ = json.Marshal(realistic(in.OldObject))
		}
		out[c.Rule] = bi
	}
	return e, out
}

// decode is what a webhook does with the request's raw objects.
func (bi benchInput) decode() policy.Input {
	in := bi.base
	in.Object, in.OldObject = nil, nil
	if bi.objJSON != nil {
		_ = utiljson.Unmarshal(bi.objJSON, &in.Object)
	}
	if bi.oldJSON != nil {
		_ = utiljson.Unmarshal(bi.oldJSON, &in.OldObject)
	}
	return in
}

// percentiles reports p50 and p99 of per-operation latencies.
func percentiles(b *testing.B, samples []time.Duration) {
	if len(samples) == 0 {
		return
	}
	slices.Sort(samples)
	at := func(q float64) float64 { return float64(samples[int(q*float64(len(samples)-1))].Nanoseconds()) / 1000 }
	b.ReportMetric(at(0.50), "p50-µs")
	b.ReportMetric(at(0.99), "p99-µs")
}

// processCPU is the process's CPU time so far, user and system, every
// thread: the collector's workers and any goroutine a decision starts count.
func processCPU(b *testing.B) time.Duration {
	var u syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &u); err != nil {
		b.Fatal(err)
	}
	return time.Duration(u.Utime.Nano() + u.Stime.Nano())
}

// BenchmarkRule: one rule, both engines where it has both, on a realistic
// stored object, warm, decoding and conversion included.
func BenchmarkRule(b *testing.B) { benchmarkRule(b, true) }

// BenchmarkRuleDecoded: the same from the decoded object a webhook already
// holds: the policy input's conversion is included, JSON decoding is not.
func BenchmarkRuleDecoded(b *testing.B) { benchmarkRule(b, false) }

func benchmarkRule(b *testing.B, decodeEach bool) {
	e, inputs := benchInputs(b)
	ids := make([]string, 0, len(inputs))
	for id := range inputs {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		bi := inputs[id]
		b.Run(id, func(b *testing.B) {
			ctx := context.Background()
			samples := make([]time.Duration, 0, b.N)
			decoded := bi.decode()
			b.ReportAllocs()
			b.ResetTimer()
			cpu := processCPU(b)
			for i := 0; i < b.N; i++ {
				in := decoded
				start := time.Now()
				if decodeEach {
					in = bi.decode()
				}
				ra, ca, applies, err := e.Answers(ctx, id, in)
				samples = append(samples, time.Since(start))
				if err != nil || ra.Kind != policy.AnswerAllow || (applies && !ra.Equal(ca)) {
					b.Fatalf("%s: %v rego %v cel %v", bi.description, err, ra, ca)
				}
			}
			b.StopTimer()
			// CPU per decision beside the latency: work spread over more
			// threads can answer sooner and cost as much, or more.
			b.ReportMetric(float64((processCPU(b)-cpu).Nanoseconds())/1000/float64(b.N), "cpu-µs/op")
			percentiles(b, samples)
		})
	}
}

// BenchmarkDecide: every rule that applies to the request's kind, as the
// webhook calls it.
func BenchmarkDecide(b *testing.B) {
	e, inputs := benchInputs(b)
	byKind := map[string]benchInput{}
	for _, bi := range inputs {
		k := bi.base.Request.Kind.Kind
		if _, ok := byKind[k]; !ok {
			byKind[k] = bi
		}
	}
	kinds := make([]string, 0, len(byKind))
	for k := range byKind {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	for _, k := range kinds {
		bi := byKind[k]
		b.Run(k, func(b *testing.B) {
			ctx := context.Background()
			samples := make([]time.Duration, 0, b.N)
			var rules int
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				start := time.Now()
				d, err := e.Decide(ctx, bi.decode())
				samples = append(samples, time.Since(start))
				if err != nil {
					b.Fatal(err)
				}
				rules = len(d.Rules)
			}
			b.StopTimer()
			b.ReportMetric(float64(rules), "rules")
			percentiles(b, samples)
		})
	}
}

// BenchmarkLoad: reading and compiling every rule, both engines.
func BenchmarkLoad(b *testing.B) {
	for i := 0; i < b.N; i++ {
		if _, err := policy.Load(context.Background(), policies.FS); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkShapesRetained: the heap an engine keeps once every vector's
// request shape has been specialized, as a long-running webhook's engine
// holds it (issue 39: the operator's peak RSS). Each op loads an engine and
// decides every vector once.
func BenchmarkShapesRetained(b *testing.B) {
	cases, err := Load(os.DirFS(vectorsDir()))
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	var loaded, warmed float64
	for i := 0; i < b.N; i++ {
		var m0, m1, m2 runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&m0)
		e, err := policy.Load(ctx, policies.FS)
		if err != nil {
			b.Fatal(err)
		}
		runtime.GC()
		runtime.ReadMemStats(&m1)
		Run(ctx, e, cases)
		runtime.GC()
		runtime.ReadMemStats(&m2)
		runtime.KeepAlive(e)
		loaded += float64(int64(m1.HeapAlloc)-int64(m0.HeapAlloc)) / 1e6
		warmed += float64(int64(m2.HeapAlloc)-int64(m1.HeapAlloc)) / 1e6
	}
	b.ReportMetric(loaded/float64(b.N), "loaded-MB")
	b.ReportMetric(warmed/float64(b.N), "shapes-MB")
}
