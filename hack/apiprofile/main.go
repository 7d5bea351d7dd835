// Command apiprofile splits a kube-apiserver CPU profile (as the fleet
// benchmark writes with FLEET_PROFILE_DIR: apiserver-<wave>.pprof) into the
// areas of a write's cost: admission webhooks, ValidatingAdmissionPolicies,
// the CRD's schema and CEL validation, managedFields, watch, storage, and so
// on. It prints each area's share of the profile's CPU, one column per
// profile given:
//
//	go run ./hack/apiprofile /tmp/prof/apiserver-cold.pprof ...
//
// A sample is counted once. The first areas (down to authz) wrap nothing of
// the others, so a sample goes to the first of them that any frame of its
// stack names. The handler chain wraps every request, so what none of them
// names goes to the innermost frame that names one of the rest.
package main

import (
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/google/pprof/profile"
)

// area is one part of the API server's work, named by substrings of the
// functions that do it.
type area struct {
	name  string
	funcs []string
}

// areas, in order; the first nesting of them are matched anywhere on a
// stack, the rest at its innermost frame.
var areas = []area{
	{"GC (background)", []string{"runtime.gcBgMarkWorker", "runtime.bgsweep", "runtime.bgscavenge"}},
	{"admission webhooks", []string{"admission/plugin/webhook"}},
	{"ValidatingAdmissionPolicies", []string{"admission/plugin/policy"}},
	{"CRD CEL rules", []string{"apiextensions-apiserver/pkg/apiserver/schema/cel"}},
	{"CRD schema validation", []string{"apiextensions-apiserver/pkg/apiserver/validation", "kube-openapi/pkg/validation"}},
	{"managedFields", []string{"managedfields", "fieldmanager", "structured-merge-diff"}},
	{"other admission", []string{"k8s.io/apiserver/pkg/admission", "plugin/pkg/admission"}},
	{"watch", []string{"handleWatch", "serveWatch", "cacheWatcher", "dispatchEvent", "watchCache", "processEvent",
		"WatchServer", "startDispatching", "watchChan"}},
	{"patch apply", []string{"jsonPatcher", "smpPatcher", "applyPatcher", "applyPatch"}},
	{"storage decode", []string{"etcd3.(*defaultDecoder)", "etcd3.(*corruptObjErrorInterpretingDecoder)", "etcd3.decode",
		"getStateFromObject", "etcd3.(*store).getState"}},
	{"authn", []string{"authentication/request/x509", "authentication/token", "pkg/serviceaccount", "bearertoken",
		"unionAuthRequestHandler", "AuthenticatedGroupAdder", "impersonation.(*constrainedImpersonationHandler).impersonate",
		"impersonation.(*impersonat"}},
	{"authz", []string{"plugin/pkg/auth/authorizer", "authorizer/union", "node.(*NodeAuthorizer)", "rbac.(*RBACAuthorizer)",
		"DefaultRuleResolver"}},
	// innermost from here
	{"storage write, etcd client", []string{"go.etcd.io", "storage/etcd3", "storage/value", "registry/generic/registry"}},
	{"request decode, response encode", []string{"endpoints/handlers", "serializer"}},
	{"priority and fairness", []string{"fairqueuing", "flowcontrol.(*configController)"}},
	{"TLS, HTTP", []string{"crypto/", "x/net/http2", "net/http.(*conn)", "net/http.(*persistConn)", "net/http.(*http2"}},
	{"controllers", []string{"client-go/tools/cache", "pkg/controller", "controlplane/controller"}},
}

// innermost is the index of the first area matched at the innermost frame.
const innermost = 12

const other = "other"

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: apiprofile <kube-apiserver CPU profile>...")
		os.Exit(2)
	}
	var shares []map[string]float64
	var totals []float64
	for _, file := range os.Args[1:] {
		s, total, err := split(file)
		if err != nil {
			fmt.Fprintf(os.Stderr, "apiprofile: %s: %v\n", file, err)
			os.Exit(1)
		}
		shares, totals = append(shares, s), append(totals, total)
	}
	report(os.Stdout, os.Args[1:], shares, totals)
}

// split reads one profile: each area's share of its CPU, and the CPU.
func split(file string) (map[string]float64, float64, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, 0, err
	}
	defer func() { _ = f.Close() }()
	p, err := profile.Parse(f)
	if err != nil {
		return nil, 0, err
	}
	cpu := len(p.SampleType) - 1 // cpu/nanoseconds
	sums := map[string]int64{}
	var total int64
	for _, s := range p.Sample {
		v := s.Value[cpu]
		total += v
		var frames []string // leaf first
		for _, loc := range s.Location {
			for _, l := range loc.Line {
				if l.Function != nil {
					frames = append(frames, l.Function.Name)
				}
			}
		}
		sums[classify(frames)] += v
	}
	if total == 0 {
		return nil, 0, fmt.Errorf("no CPU sample")
	}
	out := make(map[string]float64, len(sums))
	for k, v := range sums {
		out[k] = float64(v) / float64(total)
	}
	return out, float64(total) / 1e9, nil
}

// classify names the area of one stack, its frames leaf first.
func classify(frames []string) string {
	for _, a := range areas[:innermost] {
		for _, f := range frames {
			if names(a, f) {
				return a.name
			}
		}
	}
	for _, f := range frames {
		for _, a := range areas[innermost:] {
			if names(a, f) {
				return a.name
			}
		}
	}
	return other
}

func names(a area, fn string) bool {
	for _, s := range a.funcs {
		if strings.Contains(fn, s) {
			return true
		}
	}
	return false
}

func report(w io.Writer, files []string, shares []map[string]float64, totals []float64) {
	fmt.Fprintf(w, "%-34s", "area, % of CPU")
	for i := range files {
		fmt.Fprintf(w, " %8d", i+1)
	}
	fmt.Fprintln(w)
	for _, a := range append(areas, area{name: other}) {
		fmt.Fprintf(w, "%-34s", a.name)
		for _, s := range shares {
			fmt.Fprintf(w, " %8.1f", 100*s[a.name])
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintf(w, "%-34s", "CPU sampled, s")
	for _, t := range totals {
		fmt.Fprintf(w, " %8.2f", t)
	}
	fmt.Fprintln(w)
	for i, f := range files {
		fmt.Fprintf(w, "%d: %s\n", i+1, f)
	}
}
