package cli

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/storage"
	"github.com/open-policy-agent/opa/v1/tester"

	"github.com/boualleiguie/macrack-operator/internal/policy/vectors"
)

const testUsage = `Run a policies folder's Rego unit tests, and every shared vector through
both engines (Rego and the CEL twins) loaded from that folder.

Usage:
  macrackctl policy test [dir] [flags]

dir defaults to policies. The Rego tests are the test_ rules of dir's .rego
files (rego v1), run by OPA's test runner as 'opa test dir' would; data
files are not loaded, since the rules read only their input. A vector
passes when Rego answers the codes it expects and, where a CEL twin
concerns the request, CEL answers the same. Every case is printed by name
with PASS, FAIL or SKIP; a folder without Rego tests, or a run without
vectors, fails too, so that a mistyped path cannot pass.

Flags:
      --vectors DIR        the shared vectors (default test/policy)
  -o, --output FORMAT      table, json or junit (default table)

Exit codes: 0 every test and vector passed, 1 one failed, 2 usage error or
malformed vectors, 3 the policies did not load or compile.
See 'macrackctl policy --help' for the output formats.
`

// regoTestTimeout bounds one Rego test, as opa test does by default.
const regoTestTimeout = 5 * time.Second

func runPolicyTest(ctx context.Context, e env, args []string) error {
	const cmd = "policy test"
	var vectorsDir string
	fs := newFlagSet(cmd)
	fs.StringVar(&vectorsDir, "vectors", "test/policy", "")
	output := outputFlag(fs)
	pos, err := parseFlags(fs, cmd, args, e.stdout, testUsage)
	if err != nil {
		return err
	}
	dir := "policies"
	switch len(pos) {
	case 0:
	case 1:
		dir = pos[0]
	default:
		return usagef(cmd, "one policies directory expected, got %q", pos)
	}
	if err := checkDir(cmd, "policies", dir); err != nil {
		return err
	}
	if err := checkDir(cmd, "vectors", vectorsDir); err != nil {
		return err
	}
	cases, err := vectors.Load(os.DirFS(vectorsDir))
	if err != nil {
		return fmt.Errorf("%w: vectors in %s: %w", errInput, vectorsDir, err)
	}
	eng, err := loadEngine(ctx, cmd, dir)
	if err != nil {
		return err
	}
	regoResults, err := runRegoTests(ctx, dir)
	if err != nil {
		return err
	}

	report := TestReport{APIVersion: reportAPIVersion, Kind: "PolicyTestReport", Revision: eng.Revision(), Cases: []TestCase{}}
	for _, r := range regoResults {
		report.Cases = append(report.Cases, regoCase(r))
	}
	if len(regoResults) == 0 {
		report.Cases = append(report.Cases, TestCase{Suite: suiteRego, Name: "(no Rego tests)", Result: resultFail,
			Failure: fmt.Sprintf("%s holds no test_ rule; a policies folder without tests is not tested", dir)})
	}
	for _, r := range vectors.Run(ctx, eng, cases) {
		report.Cases = append(report.Cases, vectorCase(r))
	}
	if len(cases) == 0 {
		report.Cases = append(report.Cases, TestCase{Suite: suiteVector, Name: "(no vectors)", Result: resultFail,
			Failure: fmt.Sprintf("%s holds no vector", vectorsDir)})
	}
	for _, c := range report.Cases {
		report.Summary.Total++
		switch c.Result {
		case resultPass:
			report.Summary.Passed++
		case resultSkip:
			report.Summary.Skipped++
		default:
			report.Summary.Failed++
		}
	}
	report.Passed = report.Summary.Failed == 0

	switch *output {
	case formatJSON:
		err = writeJSON(e.stdout, report)
	case formatJUnit:
		err = writeTestJUnit(e.stdout, report)
	default:
		writeTestTable(e.stdout, report)
	}
	if err != nil {
		return err
	}
	if !report.Passed {
		return fmt.Errorf("%w: %d of %d cases failed", errDenied, report.Summary.Failed, report.Summary.Total)
	}
	return nil
}

// runRegoTests runs dir's Rego tests with OPA's runner, as `opa test dir`
// does, and returns the results sorted by name (the runner is parallel).
// Rego that does not parse or compile is errPolicies.
func runRegoTests(ctx context.Context, dir string) ([]*tester.Result, error) {
	modules, store, err := tester.LoadWithParserOptions([]string{dir}, regoOnly,
		ast.ParserOptions{RegoVersion: ast.RegoV1, ProcessAnnotation: true})
	if err != nil {
		return nil, fmt.Errorf("%w: loading the Rego in %s: %w", errPolicies, dir, err)
	}
	txn, err := store.NewTransaction(ctx, storage.WriteParams)
	if err != nil {
		return nil, fmt.Errorf("%w: opening the Rego test store: %w", errPolicies, err)
	}
	// The store is in memory and thrown away; nothing is ever committed.
	defer store.Abort(ctx, txn)
	compiler := ast.NewCompiler().
		WithCapabilities(ast.CapabilitiesForThisVersion()).
		WithEnablePrintStatements(true).
		WithUseTypeCheckAnnotations(true).
		WithPathConflictsCheck(storage.NonEmpty(ctx, store, txn))
	runner := tester.NewRunner().
		SetCompiler(compiler).
		SetStore(store).
		SetModules(modules).
		CapturePrintOutput(true).
		SetTimeout(regoTestTimeout)
	ch, err := runner.RunTests(ctx, txn)
	if err != nil {
		return nil, fmt.Errorf("%w: compiling the Rego in %s: %w", errPolicies, dir, err)
	}
	var results []*tester.Result
	for r := range ch {
		results = append(results, r)
	}
	sort.Slice(results, func(i, j int) bool {
		if results[i].Package != results[j].Package {
			return results[i].Package < results[j].Package
		}
		return results[i].Name < results[j].Name
	})
	return results, nil
}

// regoOnly keeps .rego files: the CEL twins are YAML, which OPA's loader
// would otherwise load as data.
func regoOnly(_ string, info fs.FileInfo, _ int) bool {
	return !info.IsDir() && !strings.HasSuffix(info.Name(), ".rego")
}

func regoCase(r *tester.Result) TestCase {
	c := TestCase{
		Suite:   suiteRego,
		Name:    strings.TrimPrefix(r.Package, "data.") + "." + r.Name,
		Result:  resultPass,
		seconds: r.Duration.Seconds(),
	}
	if r.Location != nil {
		c.File, c.Line = r.Location.File, r.Location.Row
	}
	switch {
	case r.Skip:
		c.Result = resultSkip
	case r.Error != nil:
		c.Result, c.Failure = resultFail, "error: "+r.Error.Error()
	case r.Fail:
		c.Result, c.Failure = resultFail, "failed"
		if r.FailedAt != nil {
			c.Failure += " at " + r.FailedAt.String()
			if r.FailedAt.Location != nil {
				c.Failure += fmt.Sprintf(" (%s:%d)", r.FailedAt.Location.File, r.FailedAt.Location.Row)
			}
		}
	}
	if c.Result == resultFail && len(r.Output) > 0 {
		c.Failure += "\nprinted:\n" + strings.TrimRight(string(r.Output), "\n")
	}
	return c
}

func vectorCase(r vectors.Result) TestCase {
	c := TestCase{
		Suite: suiteVector, Name: r.Case.ID(), Result: resultPass, File: r.Case.File,
		Vector: &VectorDetail{Rule: r.Case.Rule, Index: r.Case.Index, Expect: nonNil(r.Case.Expect)},
	}
	if r.Rego.Kind != "" {
		c.Vector.Rego = answerReport(r.Rego)
	}
	if r.CELApplies {
		c.Vector.CEL = answerReport(r.CEL)
	}
	if r.Failure != "" {
		c.Result, c.Failure = resultFail, r.Failure
	}
	return c
}

func writeTestTable(w io.Writer, r TestReport) {
	counts := map[string]*TestSummary{suiteRego: {}, suiteVector: {}}
	for _, c := range r.Cases {
		s := counts[c.Suite]
		s.Total++
		status := "PASS"
		switch c.Result {
		case resultPass:
			s.Passed++
		case resultSkip:
			s.Skipped++
			status = "SKIP"
		default:
			s.Failed++
			status = "FAIL"
		}
		fmt.Fprintf(w, "%-4s  %-6s  %s\n", status, c.Suite, c.Name)
		if c.Result == resultFail {
			where := c.File
			if c.Vector != nil {
				where = fmt.Sprintf("%s, vector %d", c.File, c.Vector.Index)
			} else if c.Line > 0 {
				where = fmt.Sprintf("%s:%d", c.File, c.Line)
			}
			if where != "" {
				where += ": "
			}
			fmt.Fprintf(w, "        %s%s\n", where, strings.ReplaceAll(c.Failure, "\n", "\n        "))
		}
	}
	rego, vec := counts[suiteRego], counts[suiteVector]
	fmt.Fprintf(w, "\nRego tests: %d passed, %d failed, %d skipped\n", rego.Passed, rego.Failed, rego.Skipped)
	fmt.Fprintf(w, "Vectors:    %d passed, %d failed\n", vec.Passed, vec.Failed)
	if r.Passed {
		fmt.Fprintf(w, "PASS: %d cases passed (policies revision %s)\n", r.Summary.Passed, r.Revision)
	} else {
		fmt.Fprintf(w, "FAIL: %d of %d cases failed (policies revision %s)\n", r.Summary.Failed, r.Summary.Total, r.Revision)
	}
}

func writeTestJUnit(w io.Writer, r TestReport) error {
	var rego, vec []junitTestCase
	for _, c := range r.Cases {
		jc := junitTestCase{File: c.File, Time: seconds(c.seconds), seconds: c.seconds}
		switch c.Suite {
		case suiteRego:
			pkg, name := c.Name, c.Name
			if i := strings.LastIndex(c.Name, "."); i >= 0 {
				pkg, name = c.Name[:i], c.Name[i+1:]
			}
			jc.Classname, jc.Name = pkg, name
		default:
			jc.Classname, jc.Name = "vectors", c.Name
			if c.Vector != nil {
				jc.Classname, jc.Name = c.Vector.Rule, strings.TrimPrefix(c.Name, c.Vector.Rule+"/")
			}
		}
		switch c.Result {
		case resultFail:
			first, _, _ := strings.Cut(c.Failure, "\n")
			jc.Failure = &junitFailure{Message: first, Type: "TestFailed", Text: c.Failure}
		case resultSkip:
			jc.Skipped = &junitSkipped{Message: "skipped (todo_ test)"}
		}
		if c.Suite == suiteRego {
			rego = append(rego, jc)
		} else {
			vec = append(vec, jc)
		}
	}
	props := []junitProperty{{Name: "revision", Value: r.Revision}}
	return writeJUnit(w, "macrackctl policy test",
		newJUnitSuite("rego", props, rego),
		newJUnitSuite("vectors", props, vec))
}
