package cli

import (
	"encoding/json"
	"encoding/xml"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const nowFlag = "--now=2026-06-01T12:00:00Z"

var instanceSample = filepath.Join(samplesDir, "instance", "compute_v1alpha1_macosinstance.yaml")

func TestPolicyCheck(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		args  []string
		stdin string
		want  expectation
	}{
		// lease.floor, with its positive control.
		{name: "a lease with a 23h minimumDuration is denied by lease.floor",
			args: []string{"-f", "testdata/lease-23h.yaml"},
			want: expectation{code: 1, stdout: []string{"DENY", "lease.floor", "minimumDuration 23h is below the 24h floor"}}},
		{name: "a lease with a 24h minimumDuration is allowed",
			args: []string{"-f", "testdata/lease-24h.yaml"},
			want: expectation{code: 0, stdout: []string{"ALLOW", "rules audit.finalizer, instance.cap, lease.floor, lease.release"}, absent: []string{"DENY"}}},

		// node.commercial, with its positive control.
		{name: "a MacNodeClass with a 931Gi disk is denied by node.commercial",
			args: []string{"-f", "testdata/class-931Gi.yaml"},
			want: expectation{code: 1, stdout: []string{"DENY", "node.commercial", "931Gi"}}},
		{name: "a MacNodeClass with a 1T disk is allowed",
			args: []string{"-f", "testdata/class-1T.yaml"},
			want: expectation{code: 0, stdout: []string{"ALLOW", "rules node.commercial"}, absent: []string{"DENY"}}},

		// instance.tenant needs the inventory: without it the lease is unknown.
		{name: "the MacOSInstance sample without an inventory is denied by instance.tenant",
			args: []string{"-f", instanceSample},
			want: expectation{code: 1, stdout: []string{"DENY", "instance.tenant", "lease build-mini not found"}}},
		{name: "the MacOSInstance sample is allowed with an inventory holding its Bound lease",
			args: []string{"-f", instanceSample, "--inventory", "testdata/inventory-bound-lease.yaml"},
			want: expectation{code: 0, stdout: []string{"ALLOW", "instance.tenant"}, absent: []string{"DENY"}}},
		{name: "the MacOSInstance sample is denied with an inventory holding its lease still Pending",
			args: []string{"-f", instanceSample, "--inventory", "testdata/inventory-pending-lease.yaml"},
			want: expectation{code: 1, stdout: []string{"instance.tenant", "is Pending, not Bound"}}},

		// Several documents: each is decided and numbered.
		{name: "one denied document among allowed ones denies the run and is named by its index",
			args: []string{"-f", "testdata/mixed.yaml"},
			want: expectation{code: 1, stdout: []string{"ALLOW  testdata/mixed.yaml document 0", "DENY   testdata/mixed.yaml document 1", "ALLOW  testdata/mixed.yaml document 2", "3 documents: 2 allowed, 1 denied"}}},
		{name: "several allowed files are allowed together",
			args: []string{"-f", "testdata/lease-24h.yaml", "-f", "testdata/class-1T.yaml"},
			want: expectation{code: 0, stdout: []string{"2 documents: 2 allowed, 0 denied"}}},
		{name: "manifests on stdin are read with -f -",
			args: []string{"-f", "-"}, stdin: readFixture(t, "lease-23h.yaml"),
			want: expectation{code: 1, stdout: []string{"<stdin> document 0", "lease.floor"}}},
		{name: "the same manifest on stdin, allowed, is a positive control for stdin",
			args: []string{"-f", "-"}, stdin: readFixture(t, "lease-24h.yaml"),
			want: expectation{code: 0, stdout: []string{"<stdin> document 0", "ALLOW"}}},
		{name: "a JSON manifest is read like YAML",
			args: []string{"-f", "-"}, stdin: `{"apiVersion": "fleet.macrack.io/v1alpha1", "kind": "MacNodeClass", "metadata": {"name": "c"}, "spec": {"chip": "M4", "memory": "16Gi", "disk": "931Gi", "networkGbps": 10, "vmCapacity": 2}}`,
			want: expectation{code: 1, stdout: []string{"node.commercial"}}},
		{name: "deleting a lease is not lease.floor's concern, even at 23h",
			args: []string{"-f", "testdata/lease-23h.yaml", "--operation", "delete"},
			want: expectation{code: 0, stdout: []string{"ALLOW"}}},
		{name: "a kind one rule concerns is allowed and names that rule alone",
			args: []string{"-f", filepath.Join(samplesDir, "images", "fleet_v1alpha1_macosimage.yaml")},
			want: expectation{code: 0, stdout: []string{"ALLOW", "(rules audit.finalizer)"}, absent: []string{"lease.floor", "no rule applies"}}},

		// Unreadable or malformed input: exit 2, the file and document named.
		{name: "malformed YAML exits 2 naming the file and the document, without a stack trace",
			args: []string{"-f", "testdata/malformed.yaml"},
			want: expectation{code: 2, stderr: []string{"testdata/malformed.yaml: document 2 (line 19)", "malformed YAML", "line 23"}, absent: noStackTrace}},
		{name: "an unknown kind exits 2 naming the file and the document",
			args: []string{"-f", "testdata/unknown-kind.yaml"},
			want: expectation{code: 2, stderr: []string{"testdata/unknown-kind.yaml: document 1", "unknown kind ConfigMap"}, absent: noStackTrace}},
		{name: "a document without a kind exits 2 naming the file and the document",
			args: []string{"-f", "testdata/no-kind.yaml"},
			want: expectation{code: 2, stderr: []string{"testdata/no-kind.yaml: document 1", "has no kind"}, absent: noStackTrace}},
		{name: "every bad file is reported, not just the first, and nothing is decided",
			args: []string{"-f", "testdata/malformed.yaml", "-f", "testdata/unknown-kind.yaml", "-f", "testdata/lease-23h.yaml"},
			want: expectation{code: 2, stderr: []string{"malformed.yaml: document 2", "unknown-kind.yaml: document 1"}, absent: []string{"DENY"}}},
		{name: "a missing file exits 2 naming it",
			args: []string{"-f", "testdata/no-such-file.yaml"},
			want: expectation{code: 2, stderr: []string{"testdata/no-such-file.yaml: cannot open: no such file or directory"}}},
		{name: "a missing inventory exits 2 naming it",
			args: []string{"-f", "testdata/lease-24h.yaml", "--inventory", "testdata/no-such-inventory.yaml"},
			want: expectation{code: 2, stderr: []string{"no-such-inventory.yaml"}}},
		{name: "an inventory that is a list, not a map, exits 2",
			args: []string{"-f", "testdata/lease-24h.yaml", "--inventory", "-"}, stdin: "- a\n- b\n",
			want: expectation{code: 2, stderr: []string{"<stdin>: document 0", "is a list, not an object"}}},

		// Usage errors: exit 2, pointing at --help.
		{name: "no -f is a usage error",
			args: nil,
			want: expectation{code: 2, stderr: []string{"no manifests given", "macrackctl policy check --help"}}},
		{name: "a positional argument is a usage error that suggests -f",
			args: []string{"testdata/lease-24h.yaml"},
			want: expectation{code: 2, stderr: []string{"name manifests with -f"}}},
		{name: "an unknown flag is a usage error",
			args: []string{"-f", "testdata/lease-24h.yaml", "--frobnicate"},
			want: expectation{code: 2, stderr: []string{"flag provided but not defined: -frobnicate"}}},
		{name: "an unknown operation is a usage error",
			args: []string{"-f", "testdata/lease-24h.yaml", "--operation", "CONNECT"},
			want: expectation{code: 2, stderr: []string{`--operation "CONNECT"`}}},
		{name: "an unknown output format is a usage error",
			args: []string{"-f", "testdata/lease-24h.yaml", "--output", "yaml"},
			want: expectation{code: 2, stderr: []string{`"yaml" is not table, json or junit`}}},
		{name: "a --now that is not RFC 3339 is a usage error",
			args: []string{"-f", "testdata/lease-24h.yaml", "--now", "tomorrow"},
			want: expectation{code: 2, stderr: []string{`--now "tomorrow"`}}},
		{name: "a --policies folder that does not exist is a usage error",
			args: []string{"-f", "testdata/lease-24h.yaml", "--policies", "testdata/no-such-policies"},
			want: expectation{code: 2, stderr: []string{"policies directory testdata/no-such-policies does not exist"}}},
		{name: "the policies folder of the repository decides as the embedded one does",
			args: []string{"-f", "testdata/lease-23h.yaml", "--policies", policiesDir},
			want: expectation{code: 1, stdout: []string{"lease.floor"}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			args := append([]string{"policy", "check", nowFlag}, tc.args...)
			tc.want.check(t, runCLI(t, tc.stdin, args...))
		})
	}
}

func readFixture(t *testing.T, name string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

func TestEverySampleButTheInstanceIsAllowed(t *testing.T) {
	t.Parallel()
	// `kubectl apply -f config/samples` applies the top folder; the
	// instance waits in its own folder until the lease is Bound, and the
	// production image in its own, as make run makes its sim golden.
	others, err := filepath.Glob(filepath.Join(samplesDir, "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if len(others) != 3 {
		t.Fatalf("want the three top-level samples, got %q", others)
	}
	others = append(others, filepath.Join(samplesDir, "images", "fleet_v1alpha1_macosimage.yaml"))
	for _, s := range others {
		t.Run(filepath.Base(s)+" is allowed", func(t *testing.T) {
			t.Parallel()
			expectation{code: 0, stdout: []string{"ALLOW"}, absent: []string{"DENY"}}.check(t, runCLI(t, "", "policy", "check", nowFlag, "-f", s))
		})
	}
	t.Run("all of them at once, by directory minus the instance, are allowed", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		for _, s := range others {
			data, err := os.ReadFile(s)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, filepath.Base(s)), data, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		expectation{code: 0, stdout: []string{"4 documents: 4 allowed"}}.check(t, runCLI(t, "", "policy", "check", nowFlag, "-f", dir))
	})
	t.Run("the whole top-level samples directory is allowed", func(t *testing.T) {
		t.Parallel()
		expectation{code: 0, stdout: []string{"3 documents: 3 allowed"}}.check(t, runCLI(t, "", "policy", "check", nowFlag, "-f", samplesDir))
	})
}

func TestPolicyCheckJSONReport(t *testing.T) {
	t.Parallel()
	r := runCLI(t, "", "policy", "check", nowFlag, "-f", "testdata/mixed.yaml", "--output", "json")
	if r.code != 1 {
		t.Fatalf("exit %d, want 1; stderr %s", r.code, r.stderr)
	}
	var rep CheckReport
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
		t.Fatalf("the report is not JSON: %v\n%s", err, r.stdout)
	}
	if rep.APIVersion != "macrackctl/v1" || rep.Kind != "PolicyCheckReport" || rep.Revision == "" || rep.Allowed {
		t.Errorf("envelope %q %q revision %q allowed %v", rep.APIVersion, rep.Kind, rep.Revision, rep.Allowed)
	}
	if rep.Summary != (CheckSummary{Documents: 3, Allowed: 2, Denied: 1}) || len(rep.Documents) != 3 {
		t.Fatalf("summary %+v, %d documents", rep.Summary, len(rep.Documents))
	}
	denied, allowed := rep.Documents[1], rep.Documents[0]
	if denied.Allowed || !slices.Equal(denied.Codes, []string{"lease.floor"}) || denied.Document != 1 || denied.Name != "short" ||
		len(denied.Violations) != 1 || denied.Violations[0].Rule != "lease.floor" || !strings.Contains(denied.Violations[0].Message, "23h") {
		t.Errorf("the denied document: %+v", denied)
	}
	// Positive control: the allowed document has empty lists, not null.
	if !allowed.Allowed || allowed.Violations == nil || len(allowed.Violations) != 0 || allowed.Codes == nil || len(allowed.Rules) == 0 {
		t.Errorf("the allowed document: %+v", allowed)
	}
	if !strings.Contains(r.stdout, `"violations": []`) {
		t.Errorf("an allowed document's violations are not []:\n%s", r.stdout)
	}
}

func TestPolicyCheckJUnitReport(t *testing.T) {
	t.Parallel()
	r := runCLI(t, "", "policy", "check", nowFlag, "-f", "testdata/mixed.yaml", "-o", "junit")
	if r.code != 1 {
		t.Fatalf("exit %d, want 1; stderr %s", r.code, r.stderr)
	}
	var rep junitTestSuites
	if err := xml.Unmarshal([]byte(r.stdout), &rep); err != nil {
		t.Fatalf("the report is not XML: %v\n%s", err, r.stdout)
	}
	if len(rep.Suites) != 1 || len(rep.Suites[0].Cases) != 3 || rep.Tests != 3 || rep.Failures != 1 || rep.Suites[0].Failures != 1 {
		t.Fatalf("want one suite of 3 cases with 1 failure:\n%s", r.stdout)
	}
	cases := rep.Suites[0].Cases
	if f := cases[1].Failure; f == nil || !strings.Contains(f.Message, "lease.floor") || !strings.Contains(f.Text, "23h") {
		t.Errorf("the denied document's testcase has no lease.floor failure: %+v", cases[1])
	}
	if !strings.Contains(cases[1].Name, "document 1") || cases[1].Classname != "testdata/mixed.yaml" {
		t.Errorf("the testcase does not name the file and document: %+v", cases[1])
	}
	// Positive control: the allowed documents have no failure element.
	if cases[0].Failure != nil || cases[2].Failure != nil {
		t.Errorf("an allowed document has a failure: %+v, %+v", cases[0], cases[2])
	}
	if !strings.HasPrefix(r.stdout, "<?xml") {
		t.Errorf("no XML declaration:\n%s", r.stdout)
	}
}

func TestPolicyCheckWithBrokenPoliciesExits3(t *testing.T) {
	t.Parallel()
	broken := copyTree(t, policiesDir)
	editFile(t, filepath.Join(broken, "lease", "floor.rego"), "package macrack.lease.floor", "package macrack.lease.floor\n\nthis is not rego {")
	expectation{code: 3, stderr: []string{"policies failed to load", "floor.rego"}, absent: noStackTrace}.
		check(t, runCLI(t, "", "policy", "check", nowFlag, "-f", "testdata/lease-24h.yaml", "--policies", broken))
	// Positive control: an intact copy loads and allows.
	intact := copyTree(t, policiesDir)
	expectation{code: 0}.check(t, runCLI(t, "", "policy", "check", nowFlag, "-f", "testdata/lease-24h.yaml", "--policies", intact))
}

func TestPolicyCheckNamespace(t *testing.T) {
	t.Parallel()
	other := filepath.Join(violatingDir, "instance-other-namespace.yaml")
	cases := []struct {
		name string
		args []string
		want expectation
	}{
		{name: "a namespaced document without a namespace is checked in -n's",
			args: []string{"-n", "team-b", "-f", filepath.Join(samplesDir, "leasing_v1alpha1_macnodelease.yaml")},
			want: expectation{code: 0, stdout: []string{"MacNodeLease team-b/build-mini"}}},
		{name: "without -n it is checked in default, as kubectl would create it",
			args: []string{"-f", instanceSample},
			want: expectation{code: 1, stdout: []string{"MacOSInstance default/ci-runner-1", "not found in namespace default"}}},
		{name: "a document that names its namespace keeps it",
			args: []string{"-n", "my-team", "-f", other, "--inventory", inventoryFile},
			want: expectation{code: 1, stdout: []string{"MacOSInstance other-team/borrowed", "an instance in namespace other-team cannot use lease my-team/build-mini"}}},
		{name: "an inventory object without a namespace is in -n's too",
			args: []string{"--namespace", "team-b", "-f", instanceSample, "--inventory", "testdata/inventory-bound-lease.yaml"},
			want: expectation{code: 0, stdout: []string{"ALLOW", "team-b/ci-runner-1"}, absent: []string{"DENY"}}},
		{name: "a cluster-scoped document gets no namespace",
			args: []string{"-n", "team-b", "-f", "testdata/class-1T.yaml"},
			want: expectation{code: 0, stdout: []string{"ALLOW"}, absent: []string{"team-b/"}}},
		{name: "a namespace that is not a DNS label is a usage error",
			args: []string{"-n", "Team_B", "-f", "testdata/lease-24h.yaml"},
			want: expectation{code: 2, stderr: []string{`--namespace "Team_B" is not a namespace name`}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.want.check(t, runCLI(t, "", append([]string{"policy", "check", nowFlag}, tc.args...)...))
		})
	}
}
