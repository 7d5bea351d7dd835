package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"testing"
)

// The reviewer's path of docs/compliance.md runs from a fresh clone against
// examples/: these tests hold the examples to what the page says of them.
var (
	examplesDir   = filepath.Join(repoRoot, "examples")
	compliantDir  = filepath.Join(examplesDir, "manifests")
	violatingDir  = filepath.Join(examplesDir, "violating")
	inventoryFile = filepath.Join(examplesDir, "inventory.yaml")
	// violatesLine is each violating example's first line, naming its rule.
	violatesLine = regexp.MustCompile(`(?m)^# Violates ([a-z]+\.[a-z-]+): `)
)

// checkJSON runs policy check with -o json and decodes its report.
func checkJSON(t *testing.T, args ...string) (int, CheckReport) {
	t.Helper()
	r := runCLI(t, "", append([]string{"policy", "check", nowFlag, "-o", "json"}, args...)...)
	var report CheckReport
	if r.code == 0 || r.code == 1 {
		if err := json.Unmarshal([]byte(r.stdout), &report); err != nil {
			t.Fatalf("exit %d, report is not JSON: %v\nstdout:\n%s\nstderr:\n%s", r.code, err, r.stdout, r.stderr)
		}
	} else {
		t.Fatalf("exit %d, want 0 or 1\nstderr:\n%s", r.code, r.stderr)
	}
	return r.code, report
}

func TestTheCompliantExamplesPassInTheTenantsNamespace(t *testing.T) {
	t.Parallel()
	files, err := manifestFiles(compliantDir)
	if err != nil {
		t.Fatal(err)
	}
	code, report := checkJSON(t, "-n", "my-team", "-f", compliantDir, "--inventory", inventoryFile)
	if code != 0 || !report.Allowed || report.Summary.Documents != len(files) || report.Summary.Allowed != len(files) {
		t.Fatalf("exit %d, %+v; want all %d documents allowed", code, report.Summary, len(files))
	}
	var kinds []string
	for _, d := range report.Documents {
		kinds = append(kinds, d.Kind)
		if d.Kind != "MacNodeClass" && d.Namespace != "my-team" {
			t.Errorf("%s %s was checked in namespace %q, want my-team (from -n)", d.Kind, d.Name, d.Namespace)
		}
	}
	for _, k := range []string{"MacNodeLease", "MacOSInstance", "GitLabRunner", "MacNodeClass"} {
		if !slices.Contains(kinds, k) {
			t.Errorf("examples/manifests has no %s (has %v)", k, kinds)
		}
	}

	// The inventory is what lets the instance and the runner pass: without
	// it, the rules that read the cluster refuse them, as the webhooks
	// would refuse an instance of a lease that does not exist.
	code, report = checkJSON(t, "-n", "my-team", "-f", compliantDir)
	if code != 1 {
		t.Fatalf("without --inventory: exit %d, want 1", code)
	}
	var codes []string
	for _, d := range report.Documents {
		codes = append(codes, d.Codes...)
	}
	for _, want := range []string{"instance.tenant", "instance.image", "runner.secret"} {
		if !slices.Contains(codes, want) {
			t.Errorf("without --inventory, no document was denied by %s (codes %v)", want, codes)
		}
	}

	// The inventory describes my-team: checked in the default namespace,
	// the runner names a Secret the access review did not answer for.
	code, report = checkJSON(t, "-f", compliantDir, "--inventory", inventoryFile)
	if code != 1 {
		t.Fatalf("in namespace default: exit %d, want 1", code)
	}
	for _, d := range report.Documents {
		if d.Kind == "GitLabRunner" && !slices.Equal(d.Codes, []string{"runner.secret"}) {
			t.Errorf("in namespace default the runner has codes %v, want [runner.secret]", d.Codes)
		}
	}
}

func TestEachViolatingExampleIsDeniedByItsRuleAlone(t *testing.T) {
	t.Parallel()
	files, err := manifestFiles(violatingDir)
	if err != nil {
		t.Fatal(err)
	}
	var rules []string
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		m := violatesLine.FindSubmatch(data)
		if m == nil {
			t.Errorf("%s does not say which rule it violates (# Violates <rule>: why)", f)
			continue
		}
		rule := string(m[1])
		rules = append(rules, rule)
		t.Run(filepath.Base(f)+" is denied by "+rule, func(t *testing.T) {
			t.Parallel()
			code, report := checkJSON(t, "-n", "my-team", "-f", f, "--inventory", inventoryFile)
			if code != 1 || len(report.Documents) != 1 {
				t.Fatalf("exit %d, %d documents; want 1 and one document", code, len(report.Documents))
			}
			d := report.Documents[0]
			if !slices.Equal(d.Codes, []string{rule}) {
				t.Fatalf("codes %v, want exactly [%s]", d.Codes, rule)
			}
			for _, v := range d.Violations {
				if len(v.Message) < len(rule) || v.Message[:len(rule)] != rule {
					t.Errorf("message %q does not start with %s", v.Message, rule)
				}
			}
		})
	}
	sort.Strings(rules)
	for _, want := range []string{"instance.cap", "instance.image", "instance.tenant", "lease.floor", "node.commercial", "quota.never-circumvent", "runner.secret"} {
		if !slices.Contains(rules, want) {
			t.Errorf("no violating example names %s (they name %v)", want, rules)
		}
	}
}

func TestTheSamplesPassAsDocumented(t *testing.T) {
	t.Parallel()
	dirs := []string{samplesDir, filepath.Join(samplesDir, "instance"), filepath.Join(samplesDir, "workloads"), filepath.Join(samplesDir, "images")}
	args := []string{"-n", "my-team", "--inventory", inventoryFile}
	n := 0
	for _, d := range dirs {
		files, err := manifestFiles(d)
		if err != nil {
			t.Fatal(err)
		}
		n += len(files)
		args = append(args, "-f", d)
	}
	code, report := checkJSON(t, args...)
	if code != 0 || report.Summary.Allowed != n || n < 6 {
		t.Fatalf("exit %d, %+v; want all %d samples allowed:\n%+v", code, report.Summary, n, report.Documents)
	}

	// Without the inventory the instance's lease is unknown, and the
	// message names the namespace it was checked in, never a blank one.
	expectation{code: 1, stdout: []string{"instance.tenant  lease build-mini not found in namespace default"}}.check(t,
		runCLI(t, "", "policy", "check", nowFlag, "-f", instanceSample))
}
