// Command gkbench times Gatekeeper v3.23.1's constraint framework (Rego and CEL drivers)
// deciding MacRack's lease.floor on the same review RuleDecoded uses: a
// MacNodeLease CREATE of 24h, dressed as the API server stores it. It is
// its own module, outside make test: hack/bench-gatekeeper.sh runs it
// beside the project's own benchmark (BENCHMARKS.md, "Policy engine").
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"time"

	"github.com/open-policy-agent/frameworks/constraint/pkg/apis/templates/v1beta1"
	constraintclient "github.com/open-policy-agent/frameworks/constraint/pkg/client"
	"github.com/open-policy-agent/frameworks/constraint/pkg/client/drivers/rego"
	"github.com/open-policy-agent/frameworks/constraint/pkg/client/reviews"
	"github.com/open-policy-agent/frameworks/constraint/pkg/core/templates"
	"github.com/open-policy-agent/frameworks/constraint/pkg/types"
	"github.com/open-policy-agent/gatekeeper/v3/pkg/drivers/k8scel"
	"github.com/open-policy-agent/gatekeeper/v3/pkg/target"
	"github.com/open-policy-agent/gatekeeper/v3/pkg/util"
	admissionv1 "k8s.io/api/admission/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/yaml"
)

func main() {
	policies := flag.String("policies", "", "MacRack's policies/ folder")
	engine := flag.String("engine", "rego", "rego or cel")
	n := flag.Int("n", 5000, "reviews")
	flag.Parse()
	ctx := context.Background()
	c, err := client(*engine)
	must(err)
	tmpl := template(*policies, *engine)
	_, err = c.AddTemplate(ctx, tmpl)
	must(err)
	constraint := &unstructured.Unstructured{}
	constraint.SetGroupVersionKind(schema.GroupVersionKind{Group: "constraints.gatekeeper.sh", Version: "v1beta1", Kind: "MacrackLeaseFloor"})
	constraint.SetName("lease-floor")
	_, err = c.AddConstraint(ctx, constraint)
	must(err)

	lease := realistic(map[string]any{
		"apiVersion": "leasing.macrack.io/v1alpha1", "kind": "MacNodeLease",
		"metadata": map[string]any{"name": "build-mini", "namespace": "tenant-a"},
		"spec":     map[string]any{"nodeClassName": "m4-16g-1t", "minimumDuration": "24h"},
	})
	raw, _ := json.Marshal(lease)
	req := &admissionv1.AdmissionRequest{
		UID:       "1",
		Kind:      metav1.GroupVersionKind{Group: "leasing.macrack.io", Version: "v1alpha1", Kind: "MacNodeLease"},
		Resource:  metav1.GroupVersionResource{Group: "leasing.macrack.io", Version: "v1alpha1", Resource: "macnodeleases"},
		Name:      "build-mini",
		Namespace: "tenant-a",
		Operation: admissionv1.Create,
		UserInfo:  authenticationv1.UserInfo{Username: "alice", Groups: []string{"tenant-a-devs", "system:authenticated"}},
		Object:    k8sruntime.RawExtension{Raw: raw},
	}
	review := func() *target.AugmentedReview {
		return &target.AugmentedReview{AdmissionRequest: req, IsAdmission: true}
	}
	// A denied review first, so that a template that never fires is caught.
	bad := *req
	badLease := realistic(map[string]any{
		"apiVersion": "leasing.macrack.io/v1alpha1", "kind": "MacNodeLease",
		"metadata": map[string]any{"name": "build-mini", "namespace": "tenant-a"},
		"spec":     map[string]any{"nodeClassName": "m4-16g-1t", "minimumDuration": "23h"},
	})
	bad.Object.Raw, _ = json.Marshal(badLease)
	resp, err := c.Review(ctx, &target.AugmentedReview{AdmissionRequest: &bad, IsAdmission: true}, reviews.EnforcementPoint(util.WebhookEnforcementPoint))
	must(err)
	if got := violations(resp); got != 1 {
		fmt.Fprintln(os.Stderr, resp.TraceDump())
		panic(fmt.Sprintf("the 23h lease: want 1 violation, got %d", got))
	}
	samples := make([]time.Duration, 0, *n)
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	allocs := ms.Mallocs
	for i := 0; i < *n+500; i++ {
		if i == 500 {
			runtime.ReadMemStats(&ms)
			allocs = ms.Mallocs
		}
		start := time.Now()
		resp, err := c.Review(ctx, review(), reviews.EnforcementPoint(util.WebhookEnforcementPoint))
		d := time.Since(start)
		if err != nil || violations(resp) != 0 {
			panic(fmt.Sprintf("the 24h lease: %v %d", err, violations(resp)))
		}
		if i >= 500 {
			samples = append(samples, d)
		}
	}
	runtime.ReadMemStats(&ms)
	slices.Sort(samples)
	at := func(q float64) float64 { return float64(samples[int(q*float64(len(samples)-1))].Nanoseconds()) / 1000 }
	fmt.Printf("gatekeeper-%s %.1f p50-µs %.1f p99-µs %d allocs/op\n", *engine, at(0.5), at(0.99), (ms.Mallocs-allocs)/uint64(*n))
}

func violations(resp *types.Responses) int {
	n := 0
	for _, r := range resp.ByTarget {
		n += len(r.Results)
	}
	return n
}

func client(engine string) (*constraintclient.Client, error) {
	args := []constraintclient.Opt{
		constraintclient.Targets(&target.K8sValidationTarget{}),
		constraintclient.EnforcementPoints(util.WebhookEnforcementPoint),
	}
	switch engine {
	case "rego":
		d, err := rego.New()
		if err != nil {
			return nil, err
		}
		args = append(args, constraintclient.Driver(d))
	case "cel":
		d, err := k8scel.New()
		if err != nil {
			return nil, err
		}
		args = append(args, constraintclient.Driver(d))
	}
	return constraintclient.NewClient(args...)
}

var (
	pkgLine  = regexp.MustCompile(`(?m)^package macrack\.`)
	dataRefs = regexp.MustCompile(`data\.macrack\.`)
)

// template is lease.floor as a ConstraintTemplate: for Rego, the rule and
// policies/lib as the template's libs (under lib.), called with MacRack's
// input built from Gatekeeper's review; for CEL, the twin's variables and
// validations.
func template(policies, engine string) *templates.ConstraintTemplate {
	ct := &templates.ConstraintTemplate{}
	ct.SetName("macrackleasefloor")
	ct.Spec.CRD.Spec.Names.Kind = "MacrackLeaseFloor"
	tgt := templates.Target{Target: target.Name}
	switch engine {
	case "rego":
		var libs []string
		for _, f := range []string{"lib/lib.rego", "lease/floor.rego"} {
			b, err := os.ReadFile(filepath.Join(policies, f))
			must(err)
			src := dataRefs.ReplaceAllString(pkgLine.ReplaceAllString(string(b), "package lib.macrack."), "data.lib.macrack.")
			libs = append(libs, src)
		}
		tgt.Rego = `package macrackleasefloor
import data.lib.macrack.lease.floor

violation contains {"msg": v.message} if {
	some v in floor.violations with input as {
		"request": input.review,
		"object": object.get(input.review, "object", null),
		"oldObject": object.get(input.review, "oldObject", null),
		"params": {"data": {}},
		"now": "2026-06-01T12:00:00Z",
		"inventory": {},
	}
}
`
		libsAny := make([]any, len(libs))
		for i, l := range libs {
			libsAny[i] = l
		}
		tgt.Code = []templates.Code{{Engine: "Rego", Source: &templates.Anything{Value: map[string]any{"rego": tgt.Rego, "libs": libsAny, "version": "v1"}}}}
	case "cel":
		b, err := os.ReadFile(filepath.Join(policies, "lease/floor.cel.yaml"))
		must(err)
		var twin struct {
			Variables   []map[string]any `json:"variables"`
			Validations []map[string]any `json:"validations"`
		}
		must(yaml.Unmarshal(b, &twin))
		for _, v := range twin.Validations {
			delete(v, "code")
		}
		source := map[string]any{"variables": twin.Variables, "validations": twin.Validations}
		js, _ := json.Marshal(source)
		var src map[string]any
		must(json.Unmarshal(js, &src))
		tgt.Code = []templates.Code{{Engine: "K8sNativeValidation", Source: &templates.Anything{Value: src}}}
	}
	ct.Spec.Targets = []templates.Target{tgt}
	_ = v1beta1.SchemeGroupVersion
	return ct
}

// realistic dresses obj as the API server stores it, as
// internal/policy/vectors' benchmarks do.
func realistic(obj map[string]any) map[string]any {
	b, _ := json.Marshal(obj)
	var out map[string]any
	_ = json.Unmarshal(b, &out)
	meta := out["metadata"].(map[string]any)
	meta["annotations"] = map[string]any{"kubectl.kubernetes.io/last-applied-configuration": string(b)}
	meta["resourceVersion"] = "123456"
	meta["generation"] = 3
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
		managed = append(managed, map[string]any{"manager": m, "operation": "Update", "apiVersion": out["apiVersion"],
			"time": "2026-06-01T12:00:00Z", "fieldsType": "FieldsV1", "fieldsV1": fields})
	}
	meta["managedFields"] = managed
	return out
}

func must(err error) {
	if err != nil {
		panic(err)
	}
}
