package cli

import (
	"encoding/json"
	"encoding/xml"
	"slices"
	"strings"
	"testing"
)

func TestPolicyEval(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		args  []string
		stdin string
		want  expectation
	}{
		{name: "an input creating a 23h lease is denied by lease.floor",
			args: []string{"-i", "testdata/eval-lease-23h.yaml"},
			want: expectation{code: 1, stdout: []string{"DENY", "CREATE MacNodeLease tenant-a/build-mini by alice", "lease.floor", "codes: lease.floor", "rules evaluated: audit.finalizer, instance.cap, lease.floor, lease.release", "policies revision: "}}},
		{name: "an input creating a 24h lease is allowed",
			args: []string{"-i", "testdata/eval-lease-24h.yaml"},
			want: expectation{code: 0, stdout: []string{"ALLOW", "codes: none", "rules evaluated: audit.finalizer, instance.cap, lease.floor, lease.release"}, absent: []string{"DENY"}}},
		{name: "an input without now is decided at the current time",
			args: []string{"-i", "testdata/eval-lease-24h-no-now.yaml"},
			want: expectation{code: 0, stdout: []string{"ALLOW"}, absent: []string{"now is not set"}}},
		{name: "the input is read from stdin by default",
			stdin: readFixture(t, "eval-lease-23h.yaml"),
			want:  expectation{code: 1, stdout: []string{"lease.floor"}}},
		{name: "the allowed input on stdin is a positive control for stdin",
			args: []string{"-i", "-"}, stdin: readFixture(t, "eval-lease-24h.yaml"),
			want: expectation{code: 0, stdout: []string{"ALLOW"}}},
		{name: "a bare manifest is not an input document and exits 2 with a hint",
			args: []string{"-i", "testdata/lease-24h.yaml"},
			want: expectation{code: 2, stderr: []string{"testdata/lease-24h.yaml", "request.operation", "policy check -f"}, absent: noStackTrace}},
		{name: "an input whose now is not a time exits 2",
			args: []string{"-i", "-"}, stdin: strings.Replace(readFixture(t, "eval-lease-24h.yaml"), `"2026-06-01T12:00:00Z"`, "yesterday", 1),
			want: expectation{code: 2, stderr: []string{`now "yesterday"`}}},
		{name: "an input of a kind no rule knows exits 2 naming the kind",
			args: []string{"-i", "-"}, stdin: strings.Replace(readFixture(t, "eval-lease-24h.yaml"), "kind: MacNodeLease}", "kind: Frobnicator}", 1),
			want: expectation{code: 2, stderr: []string{"leasing.macrack.io/Frobnicator"}}},
		{name: "malformed YAML on stdin exits 2 naming stdin",
			args: []string{"-i", "-"}, stdin: "request: {operation: CREATE\nobject: [",
			want: expectation{code: 2, stderr: []string{"<stdin>: document 0", "malformed YAML"}, absent: noStackTrace}},
		{name: "two documents are one too many",
			args: []string{"-i", "-"}, stdin: readFixture(t, "eval-lease-24h.yaml") + "---\n" + readFixture(t, "eval-lease-24h.yaml"),
			want: expectation{code: 2, stderr: []string{"<stdin>: document 1", "only one document is expected"}}},
		{name: "a missing input file exits 2",
			args: []string{"-i", "testdata/no-such-input.yaml"},
			want: expectation{code: 2, stderr: []string{"testdata/no-such-input.yaml"}}},
		{name: "a positional argument is a usage error that suggests -i",
			args: []string{"testdata/eval-lease-24h.yaml"},
			want: expectation{code: 2, stderr: []string{"name the input with -i"}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.want.check(t, runCLI(t, tc.stdin, append([]string{"policy", "eval"}, tc.args...)...))
		})
	}
}

func TestPolicyEvalJSONReport(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		fixture string
		code    int
		allowed bool
		codes   []string
	}{
		{"the JSON report of a denied input lists lease.floor", "eval-lease-23h.yaml", 1, false, []string{"lease.floor"}},
		{"the JSON report of an allowed input lists no code", "eval-lease-24h.yaml", 0, true, []string{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := runCLI(t, "", "policy", "eval", "-i", "testdata/"+tc.fixture, "--output", "json")
			if r.code != tc.code {
				t.Fatalf("exit %d, want %d; stderr %s", r.code, tc.code, r.stderr)
			}
			var rep EvalReport
			if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
				t.Fatalf("the report is not JSON: %v\n%s", err, r.stdout)
			}
			if rep.Kind != "PolicyEvalReport" || rep.Allowed != tc.allowed || !slices.Equal(rep.Codes, tc.codes) || rep.Revision == "" {
				t.Errorf("report %+v; want allowed %v codes %q", rep, tc.allowed, tc.codes)
			}
			want := RequestReport{Operation: "CREATE", Group: "leasing.macrack.io", Version: "v1alpha1", Kind: "MacNodeLease", Namespace: "tenant-a", Name: "build-mini", Username: "alice"}
			if rep.Request != want {
				t.Errorf("request %+v, want %+v", rep.Request, want)
			}
			if !slices.Contains(rep.Rules, "lease.floor") {
				t.Errorf("rules %q lack lease.floor", rep.Rules)
			}
		})
	}
}

func TestPolicyEvalJUnitReport(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		fixture string
		failure bool
	}{
		{"the JUnit report of a denied input has a failure", "eval-lease-23h.yaml", true},
		{"the JUnit report of an allowed input has none", "eval-lease-24h.yaml", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := runCLI(t, "", "policy", "eval", "-i", "testdata/"+tc.fixture, "-o", "junit")
			var rep junitTestSuites
			if err := xml.Unmarshal([]byte(r.stdout), &rep); err != nil {
				t.Fatalf("the report is not XML: %v\n%s", err, r.stdout)
			}
			if len(rep.Suites) != 1 || len(rep.Suites[0].Cases) != 1 {
				t.Fatalf("want one testcase:\n%s", r.stdout)
			}
			if got := rep.Suites[0].Cases[0].Failure != nil; got != tc.failure {
				t.Errorf("failure element present %v, want %v:\n%s", got, tc.failure, r.stdout)
			}
		})
	}
}
