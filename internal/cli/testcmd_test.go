package cli

import (
	"encoding/json"
	"encoding/xml"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// driftedCEL is a copy of the policies whose lease.floor CEL twin accepts
// 23h while its Rego still refuses it.
func driftedCEL(t *testing.T) string {
	dir := copyTree(t, policiesDir)
	editFile(t, filepath.Join(dir, "lease", "floor.cel.yaml"), ">= duration('24h')", ">= duration('23h')")
	return dir
}

func TestPolicyTest(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		// dir makes the policies folder for the case.
		dir     func(t *testing.T) string
		vectors func(t *testing.T) string
		want    expectation
	}{
		{name: "the repository's policies and vectors pass, each listed by name",
			want: expectation{code: 0, stdout: []string{
				"PASS  vector  lease.floor/a 23h lease is refused",
				"PASS  rego    macrack.lease.floor_test.test_24h_is_the_floor",
				"Rego tests: ", "0 failed", "PASS: ",
			}, absent: []string{"FAIL"}}},
		{name: "a CEL twin changed to accept 23h fails the vector that says a 23h lease is refused",
			dir: driftedCEL,
			want: expectation{code: 1, stdout: []string{
				"FAIL  vector  lease.floor/a 23h lease is refused",
				"CEL answers allow, Rego answers deny(lease.floor)",
				// The Rego alone is unchanged: its unit tests still pass.
				"PASS  rego    macrack.lease.floor_test.test_24h_is_the_floor",
				"FAIL: ",
			}}},
		{name: "a Rego rule changed to accept 23h fails its own unit tests by name",
			dir: func(t *testing.T) string {
				dir := copyTree(t, policiesDir)
				editFile(t, filepath.Join(dir, "lease", "floor.rego"), "floor_ns := 86400000000000", "floor_ns := 82800000000000")
				return dir
			},
			want: expectation{code: 1, stdout: []string{
				"FAIL  rego    macrack.lease.floor_test.test_24h_is_the_floor",
				"floor_test.rego:",
				"FAIL  vector  lease.floor/a 23h lease is refused",
			}}},
		{name: "Rego that does not parse exits 3",
			dir: func(t *testing.T) string {
				dir := copyTree(t, policiesDir)
				editFile(t, filepath.Join(dir, "lease", "floor_test.rego"), "test_24h_is_the_floor if {", "test_24h_is_the_floor if {{")
				return dir
			},
			want: expectation{code: 3, stderr: []string{"policies failed to load", "floor_test.rego"}, absent: noStackTrace}},
		{name: "a CEL twin that does not compile exits 3",
			dir: func(t *testing.T) string {
				dir := copyTree(t, policiesDir)
				editFile(t, filepath.Join(dir, "lease", "floor.cel.yaml"), ">= duration('24h')", ">= duration('24h'")
				return dir
			},
			want: expectation{code: 3, stderr: []string{"policies failed to load", "floor.cel.yaml"}, absent: noStackTrace}},
		{name: "a folder without Rego tests fails rather than passing on nothing",
			dir: func(t *testing.T) string {
				dir := copyTree(t, policiesDir)
				matches, err := filepath.Glob(filepath.Join(dir, "*", "*_test.rego"))
				if err != nil || len(matches) == 0 {
					t.Fatalf("no tests to remove: %v", err)
				}
				for _, m := range matches {
					if err := os.Remove(m); err != nil {
						t.Fatal(err)
					}
				}
				return dir
			},
			want: expectation{code: 1, stdout: []string{"FAIL  rego    (no Rego tests)", "PASS  vector  lease.floor/a 23h lease is refused"}}},
		{name: "a vectors folder without vectors fails rather than passing on nothing",
			vectors: func(t *testing.T) string { return t.TempDir() },
			want:    expectation{code: 1, stdout: []string{"FAIL  vector  (no vectors)"}}},
		{name: "a malformed vector file exits 2 naming it",
			vectors: func(t *testing.T) string {
				dir := t.TempDir()
				if err := os.WriteFile(filepath.Join(dir, "broken.yaml"), []byte("rule: lease.floor\nvectors: [\n"), 0o644); err != nil {
					t.Fatal(err)
				}
				return dir
			},
			want: expectation{code: 2, stderr: []string{"broken.yaml"}, absent: noStackTrace}},
		{name: "a policies folder that does not exist is a usage error",
			dir:  func(t *testing.T) string { return filepath.Join(t.TempDir(), "nowhere") },
			want: expectation{code: 2, stderr: []string{"does not exist", "macrackctl policy test --help"}}},
		{name: "a vectors folder that does not exist is a usage error",
			vectors: func(t *testing.T) string { return filepath.Join(t.TempDir(), "nowhere") },
			want:    expectation{code: 2, stderr: []string{"vectors directory", "does not exist"}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir, vec := policiesDir, vectorsDir
			if tc.dir != nil {
				dir = tc.dir(t)
			}
			if tc.vectors != nil {
				vec = tc.vectors(t)
			}
			// The folder comes after a flag on purpose: flags may precede
			// or follow it.
			tc.want.check(t, runCLI(t, "", "policy", "test", "--vectors", vec, dir))
		})
	}
}

func TestPolicyTestJSONReport(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		dir    func(t *testing.T) string
		code   int
		result string
	}{
		{"the JSON report of the repository's policies passes the 23h vector", func(*testing.T) string { return policiesDir }, 0, resultPass},
		{"the JSON report of a drifted CEL twin fails the 23h vector", driftedCEL, 1, resultFail},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := runCLI(t, "", "policy", "test", tc.dir(t), "--vectors", vectorsDir, "--output", "json")
			if r.code != tc.code {
				t.Fatalf("exit %d, want %d; stderr %s", r.code, tc.code, r.stderr)
			}
			var rep TestReport
			if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
				t.Fatalf("the report is not JSON: %v\n%s", err, r.stdout)
			}
			if rep.Kind != "PolicyTestReport" || rep.Passed != (tc.code == 0) || rep.Summary.Total != len(rep.Cases) ||
				rep.Summary.Passed+rep.Summary.Failed+rep.Summary.Skipped != rep.Summary.Total {
				t.Errorf("envelope or summary: kind %q passed %v summary %+v, %d cases", rep.Kind, rep.Passed, rep.Summary, len(rep.Cases))
			}
			var found *TestCase
			suites := map[string]int{}
			for i, c := range rep.Cases {
				suites[c.Suite]++
				if c.Suite == suiteVector && c.Name == "lease.floor/a 23h lease is refused" {
					found = &rep.Cases[i]
				}
			}
			if suites[suiteRego] == 0 || suites[suiteVector] == 0 {
				t.Errorf("cases by suite %v; want both rego and vector", suites)
			}
			if found == nil {
				t.Fatal("the 23h vector is not in the report")
			}
			v := found.Vector
			if found.Result != tc.result || found.File != "lease_floor.yaml" || v == nil || v.Rule != "lease.floor" ||
				v.Rego == nil || v.CEL == nil || v.Rego.Kind != "deny" || len(v.Expect) != 1 || v.Expect[0] != "lease.floor" {
				t.Fatalf("the 23h vector: %+v %+v", *found, v)
			}
			wantCEL := "deny"
			if tc.result == resultFail {
				wantCEL = "allow"
			}
			if v.CEL.Kind != wantCEL || (found.Failure != "") != (tc.result == resultFail) {
				t.Errorf("the vector's CEL answer %+v (want %s), failure %q", v.CEL, wantCEL, found.Failure)
			}
		})
	}
}

func TestPolicyTestJUnitReport(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		dir     func(t *testing.T) string
		failure bool
	}{
		{"the JUnit report of the repository's policies has no failure", func(*testing.T) string { return policiesDir }, false},
		{"the JUnit report of a drifted CEL twin has a failure for the 23h vector", driftedCEL, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := runCLI(t, "", "policy", "test", tc.dir(t), "--vectors", vectorsDir, "-o", "junit")
			var rep junitTestSuites
			if err := xml.Unmarshal([]byte(r.stdout), &rep); err != nil {
				t.Fatalf("the report is not XML: %v\n%s", err, r.stdout)
			}
			if len(rep.Suites) != 2 || rep.Suites[0].Name != "rego" || rep.Suites[1].Name != "vectors" || rep.Suites[0].Tests == 0 {
				t.Fatalf("want the rego and vectors suites, got %d suites", len(rep.Suites))
			}
			var found *junitTestCase
			for i, c := range rep.Suites[1].Cases {
				if c.Classname == "lease.floor" && c.Name == "a 23h lease is refused" {
					found = &rep.Suites[1].Cases[i]
				}
			}
			if found == nil {
				t.Fatal("the 23h vector is not a testcase")
			}
			if (found.Failure != nil) != tc.failure || (rep.Failures > 0) != tc.failure {
				t.Errorf("failure %+v, %d failures in all; want a failure: %v", found.Failure, rep.Failures, tc.failure)
			}
			if tc.failure && !strings.Contains(found.Failure.Message, "CEL answers allow") {
				t.Errorf("the failure does not say why: %+v", found.Failure)
			}
		})
	}
}
