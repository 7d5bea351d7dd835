// Command bundlecheck validates MacRack's OLM bundle with the operator
// framework's own validators (github.com/operator-framework/api, pinned in
// this module's go.mod), as `operator-sdk bundle validate` with the
// OperatorHub and good-practices suites does, and fails on any error or
// warning, printing each:
//
//   - the default bundle validators: the ClusterServiceVersion, every CRD,
//     and the bundle as a whole (owned CRDs present, ServiceAccounts, size);
//   - OperatorHubV2Validator, StandardCapabilitiesValidator and
//     StandardCategoriesValidator (OperatorHub.io's requirements);
//   - GoodPracticesValidator (resource requests, channel names, CRD
//     descriptions, no RBAC to create CRDs, the CSV's name).
//
// Beside them it checks what those leave out: metadata/annotations.yaml
// (the registry+v1 media type, the manifests/ and metadata/ folders, the
// package, the channels and a default channel among them), and a strict
// decode of the CSV into the framework's types, so that a misspelt field
// fails rather than vanishing.
//
// A negative control runs last: the same validators on a copy of the CSV
// without its icon, its minKubeVersion and one CRD description must warn,
// or the check itself is broken.
//
// It is its own module, so that the framework's dependencies stay out of
// the project's go.mod; the modules both use are at the project's versions
// (hack/check-aligned-modules.sh), so the packages they share compile once.
//
// Usage: bundlecheck [--package macrack-operator] BUNDLE_DIR
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/operator-framework/api/pkg/manifests"
	"github.com/operator-framework/api/pkg/operators/v1alpha1"
	"github.com/operator-framework/api/pkg/validation"
	valerrors "github.com/operator-framework/api/pkg/validation/errors"
	interfaces "github.com/operator-framework/api/pkg/validation/interfaces"
	"sigs.k8s.io/yaml"
)

func main() {
	pkg := flag.String("package", "macrack-operator", "the package name annotations.yaml must give")
	flag.Parse()
	if flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: bundlecheck [--package NAME] BUNDLE_DIR")
		os.Exit(2)
	}
	if err := run(flag.Arg(0), *pkg); err != nil {
		fmt.Fprintln(os.Stderr, "bundlecheck:", err)
		os.Exit(1)
	}
}

// validators are the suites run on the bundle, by name.
var validators = []struct {
	name string
	v    interfaces.Validator
}{
	{"ClusterServiceVersionValidator", validation.ClusterServiceVersionValidator},
	{"CustomResourceDefinitionValidator", validation.CustomResourceDefinitionValidator},
	{"BundleValidator", validation.BundleValidator},
	{"OperatorHubV2Validator", validation.OperatorHubV2Validator},
	{"StandardCapabilitiesValidator", validation.StandardCapabilitiesValidator},
	{"StandardCategoriesValidator", validation.StandardCategoriesValidator},
	{"GoodPracticesValidator", validation.GoodPracticesValidator},
}

func run(dir, pkg string) error {
	var problems []string
	problems = append(problems, checkAnnotations(dir, pkg)...)
	problems = append(problems, checkStrictCSV(dir)...)

	bundle, err := manifests.GetBundleFromDir(dir)
	if err != nil {
		return fmt.Errorf("loading %s: %w", dir, err)
	}
	var errs, warns int
	for _, v := range validators {
		e, w := report(v.name, v.v.Validate(bundle.ObjectsToValidate()...))
		errs += e
		warns += w
	}
	fmt.Printf("bundlecheck: %s (%s): %d objects; %d validators: %d errors, %d warnings\n",
		dir, bundle.CSV.GetName(), len(bundle.ObjectsToValidate()), len(validators), errs, warns)
	for _, p := range problems {
		fmt.Println("ERROR [bundlecheck]", p)
	}
	if err := negativeControl(dir); err != nil {
		problems = append(problems, err.Error())
		fmt.Println("ERROR [negative control]", err)
	}
	if errs+warns+len(problems) > 0 {
		return fmt.Errorf("%d errors, %d warnings, %d other problems", errs, warns, len(problems))
	}
	fmt.Println("bundlecheck: 0 errors, 0 warnings")
	return nil
}

// report prints every error and warning of one validator and counts them.
func report(name string, results []valerrors.ManifestResult) (errs, warns int) {
	for _, r := range results {
		for _, e := range r.Errors {
			fmt.Printf("ERROR [%s] %s: %s\n", name, r.Name, e.Error())
			errs++
		}
		for _, w := range r.Warnings {
			fmt.Printf("WARN  [%s] %s: %s\n", name, r.Name, w.Error())
			warns++
		}
	}
	return errs, warns
}

// annotationsFile is metadata/annotations.yaml.
type annotationsFile struct {
	Annotations map[string]string `json:"annotations"`
}

// checkAnnotations holds metadata/annotations.yaml to registry+v1: OLM and
// opm read the bundle's layout from these (and a bundle image's labels
// repeat them).
func checkAnnotations(dir, pkg string) []string {
	path := filepath.Join(dir, "metadata", "annotations.yaml")
	raw, err := os.ReadFile(path)
	if err != nil {
		return []string{err.Error()}
	}
	var f annotationsFile
	if err := yaml.UnmarshalStrict(raw, &f); err != nil {
		return []string{fmt.Sprintf("%s: %v", path, err)}
	}
	const prefix = "operators.operatorframework.io.bundle."
	want := map[string]string{
		prefix + "mediatype.v1": "registry+v1",
		prefix + "manifests.v1": "manifests/",
		prefix + "metadata.v1":  "metadata/",
		prefix + "package.v1":   pkg,
	}
	var out []string
	for k, v := range want {
		if got := f.Annotations[k]; got != v {
			out = append(out, fmt.Sprintf("%s: %s is %q, want %q", path, k, got, v))
		}
	}
	channels := strings.Split(f.Annotations[prefix+"channels.v1"], ",")
	for _, c := range channels {
		if strings.TrimSpace(c) == "" {
			out = append(out, fmt.Sprintf("%s: %schannels.v1 %q has an empty channel", path, prefix, f.Annotations[prefix+"channels.v1"]))
		}
	}
	def := f.Annotations[prefix+"channel.default.v1"]
	found := false
	for _, c := range channels {
		found = found || c == def
	}
	if !found {
		out = append(out, fmt.Sprintf("%s: the default channel %q is not among the channels %q", path, def, channels))
	}
	for k := range f.Annotations {
		if !strings.HasPrefix(k, prefix) {
			out = append(out, fmt.Sprintf("%s: %s is not a bundle annotation", path, k))
		}
	}
	for _, sub := range []string{"manifests", "metadata"} {
		if fi, err := os.Stat(filepath.Join(dir, sub)); err != nil || !fi.IsDir() {
			out = append(out, fmt.Sprintf("%s: no %s/ folder", dir, sub))
		}
	}
	sort.Strings(out)
	return out
}

// checkStrictCSV decodes the bundle's one CSV into the framework's types
// and refuses unknown fields.
func checkStrictCSV(dir string) []string {
	paths, err := filepath.Glob(filepath.Join(dir, "manifests", "*.clusterserviceversion.yaml"))
	if err != nil {
		return []string{err.Error()}
	}
	if len(paths) != 1 {
		return []string{fmt.Sprintf("%s/manifests: %d ClusterServiceVersions, want one", dir, len(paths))}
	}
	raw, err := os.ReadFile(paths[0])
	if err != nil {
		return []string{err.Error()}
	}
	var csv v1alpha1.ClusterServiceVersion
	if err := yaml.UnmarshalStrict(raw, &csv); err != nil {
		return []string{fmt.Sprintf("%s: %v", paths[0], err)}
	}
	return nil
}

// negativeControl loads the bundle again, strips what OperatorHub and the
// good practices want, and expects the validators to warn about each.
func negativeControl(dir string) error {
	bundle, err := manifests.GetBundleFromDir(dir)
	if err != nil {
		return err
	}
	bundle.CSV.Spec.Icon = nil
	bundle.CSV.Spec.MinKubeVersion = ""
	if len(bundle.CSV.Spec.CustomResourceDefinitions.Owned) > 0 {
		bundle.CSV.Spec.CustomResourceDefinitions.Owned[0].Description = ""
	}
	var msgs []string
	for _, v := range validators {
		for _, r := range v.v.Validate(bundle.ObjectsToValidate()...) {
			for _, w := range r.Warnings {
				msgs = append(msgs, w.Error())
			}
		}
	}
	all := strings.Join(msgs, "\n")
	for _, want := range []string{"csv.Spec.Icon not specified", "minKubeVersion is not informed", "has an empty description"} {
		if !strings.Contains(all, want) {
			return fmt.Errorf("a CSV stripped of its icon, minKubeVersion and a CRD description drew no warning %q: the validators are not running", want)
		}
	}
	return nil
}
