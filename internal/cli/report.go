package cli

import (
	"encoding/json"
	"encoding/xml"
	"fmt"
	"io"
	"strings"

	"github.com/boualleiguie/macrack-operator/internal/policy"
)

// The JSON reports (--output json). They are a contract with compliance CI:
// fields are only ever added, never renamed or removed, and lists are []
// rather than null. Every report starts with apiVersion and kind, so that a
// consumer can tell them apart.
//
//	PolicyCheckReport  {apiVersion, kind, revision, allowed, summary{documents, allowed, denied}, documents[]}
//	  documents[]      {file, document, line, apiVersion, kind, namespace, name, operation, allowed, rules[], codes[], violations[]}
//	PolicyEvalReport   {apiVersion, kind, revision, allowed, request{operation, group, version, kind, subResource, namespace, name, username}, rules[], codes[], violations[]}
//	PolicyTestReport   {apiVersion, kind, revision, passed, summary{total, passed, failed, skipped}, cases[]}
//	  cases[]          {suite: rego|vector, name, result: pass|fail|skip, failure?, file?, line?, vector?}
//	  vector           {rule, index, expect[], rego, cel}; rego and cel are {kind, codes[], detail[]} or null
//	violations[]       {rule, code, message}
//
// Fields marked ? are left out where they do not apply. revision is the
// content hash of the policies that decided (policy.Engine.Revision).
const reportAPIVersion = "macrackctl/v1"

// ViolationReport is one reason a document or input is refused.
type ViolationReport struct {
	// Rule is the rule id, e.g. lease.floor.
	Rule string `json:"rule"`
	// Code is what to match on: the rule id, or policy.error and
	// policy.disagreement when the engine itself refuses.
	Code    string `json:"code"`
	Message string `json:"message"`
}

func violationReports(vs []policy.Violation) []ViolationReport {
	out := make([]ViolationReport, 0, len(vs))
	for _, v := range vs {
		out = append(out, ViolationReport{Rule: v.Rule, Code: v.Code, Message: v.Message})
	}
	return out
}

// CheckReport is `policy check --output json`.
type CheckReport struct {
	APIVersion string            `json:"apiVersion"`
	Kind       string            `json:"kind"`
	Revision   string            `json:"revision"`
	Allowed    bool              `json:"allowed"`
	Summary    CheckSummary      `json:"summary"`
	Documents  []CheckedDocument `json:"documents"`
}

// CheckSummary counts the documents.
type CheckSummary struct {
	Documents int `json:"documents"`
	Allowed   int `json:"allowed"`
	Denied    int `json:"denied"`
}

// CheckedDocument is one document's decision.
type CheckedDocument struct {
	File string `json:"file"`
	// Document is the index of the document in its file, from 0.
	Document int `json:"document"`
	// Line is the document's first line in its file, from 1.
	Line       int               `json:"line"`
	APIVersion string            `json:"apiVersion"`
	Kind       string            `json:"kind"`
	Namespace  string            `json:"namespace"`
	Name       string            `json:"name"`
	Operation  string            `json:"operation"`
	Allowed    bool              `json:"allowed"`
	Rules      []string          `json:"rules"`
	Codes      []string          `json:"codes"`
	Violations []ViolationReport `json:"violations"`
}

// EvalReport is `policy eval --output json`.
type EvalReport struct {
	APIVersion string            `json:"apiVersion"`
	Kind       string            `json:"kind"`
	Revision   string            `json:"revision"`
	Allowed    bool              `json:"allowed"`
	Request    RequestReport     `json:"request"`
	Rules      []string          `json:"rules"`
	Codes      []string          `json:"codes"`
	Violations []ViolationReport `json:"violations"`
}

// RequestReport names the request that was decided, after the engine
// completed it (name and namespace from the object).
type RequestReport struct {
	Operation   string `json:"operation"`
	Group       string `json:"group"`
	Version     string `json:"version"`
	Kind        string `json:"kind"`
	SubResource string `json:"subResource"`
	Namespace   string `json:"namespace"`
	Name        string `json:"name"`
	Username    string `json:"username"`
}

// TestReport is `policy test --output json`.
type TestReport struct {
	APIVersion string      `json:"apiVersion"`
	Kind       string      `json:"kind"`
	Revision   string      `json:"revision"`
	Passed     bool        `json:"passed"`
	Summary    TestSummary `json:"summary"`
	Cases      []TestCase  `json:"cases"`
}

// TestSummary counts the cases of both suites.
type TestSummary struct {
	Total   int `json:"total"`
	Passed  int `json:"passed"`
	Failed  int `json:"failed"`
	Skipped int `json:"skipped"`
}

// The suites and results of a TestCase.
const (
	suiteRego   = "rego"
	suiteVector = "vector"

	resultPass = "pass"
	resultFail = "fail"
	resultSkip = "skip"
)

// TestCase is one Rego unit test or one shared vector.
type TestCase struct {
	// Suite is rego (a test_ rule in dir) or vector (test/policy/*.yaml).
	Suite string `json:"suite"`
	// Name is package.test_name for Rego, rule/vector name for vectors.
	Name   string `json:"name"`
	Result string `json:"result"`
	// Failure says why, when Result is fail.
	Failure string `json:"failure,omitempty"`
	// File and Line locate a Rego test; a vector has only its File.
	File string `json:"file,omitempty"`
	Line int    `json:"line,omitempty"`
	// Vector details a vector case; absent for Rego tests.
	Vector *VectorDetail `json:"vector,omitempty"`

	seconds float64
}

// VectorDetail is what a vector expected and what the engines answered.
type VectorDetail struct {
	Rule string `json:"rule"`
	// Index is the vector's place in its file, from 0.
	Index  int      `json:"index"`
	Expect []string `json:"expect"`
	// Rego is null when the input could not be evaluated; CEL is null where
	// no CEL twin concerns the request.
	Rego *AnswerReport `json:"rego"`
	CEL  *AnswerReport `json:"cel"`
}

// AnswerReport is one engine's answer: allow, deny (with codes) or error.
type AnswerReport struct {
	Kind   string   `json:"kind"`
	Codes  []string `json:"codes"`
	Detail []string `json:"detail"`
}

func answerReport(a policy.Answer) *AnswerReport {
	return &AnswerReport{Kind: string(a.Kind), Codes: nonNil(a.Codes), Detail: nonNil(a.Detail)}
}

func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return fmt.Errorf("writing the JSON report: %w", err)
	}
	return nil
}

// JUnit XML, as CI systems ingest it: testsuites > testsuite > testcase,
// with a failure (or skipped) element in a case that did not pass.
type junitTestSuites struct {
	XMLName  xml.Name         `xml:"testsuites"`
	Name     string           `xml:"name,attr"`
	Tests    int              `xml:"tests,attr"`
	Failures int              `xml:"failures,attr"`
	Errors   int              `xml:"errors,attr"`
	Skipped  int              `xml:"skipped,attr"`
	Time     string           `xml:"time,attr"`
	Suites   []junitTestSuite `xml:"testsuite"`
}

type junitTestSuite struct {
	Name       string          `xml:"name,attr"`
	Tests      int             `xml:"tests,attr"`
	Failures   int             `xml:"failures,attr"`
	Errors     int             `xml:"errors,attr"`
	Skipped    int             `xml:"skipped,attr"`
	Time       string          `xml:"time,attr"`
	Properties []junitProperty `xml:"properties>property,omitempty"`
	Cases      []junitTestCase `xml:"testcase"`
}

type junitProperty struct {
	Name  string `xml:"name,attr"`
	Value string `xml:"value,attr"`
}

type junitTestCase struct {
	Name      string        `xml:"name,attr"`
	Classname string        `xml:"classname,attr"`
	Time      string        `xml:"time,attr"`
	File      string        `xml:"file,attr,omitempty"`
	Failure   *junitFailure `xml:"failure,omitempty"`
	Skipped   *junitSkipped `xml:"skipped,omitempty"`
	SystemOut string        `xml:"system-out,omitempty"`
	seconds   float64
}

type junitFailure struct {
	Message string `xml:"message,attr"`
	Type    string `xml:"type,attr"`
	Text    string `xml:",chardata"`
}

type junitSkipped struct {
	Message string `xml:"message,attr,omitempty"`
}

func seconds(s float64) string { return fmt.Sprintf("%.3f", s) }

// newJUnitSuite counts the cases, so that the attributes cannot drift from
// the elements.
func newJUnitSuite(name string, props []junitProperty, cases []junitTestCase) junitTestSuite {
	s := junitTestSuite{Name: name, Properties: props, Cases: nonNil(cases)}
	total := 0.0
	for _, c := range cases {
		s.Tests++
		total += c.seconds
		switch {
		case c.Failure != nil:
			s.Failures++
		case c.Skipped != nil:
			s.Skipped++
		}
	}
	s.Time = seconds(total)
	return s
}

func writeJUnit(w io.Writer, name string, suites ...junitTestSuite) error {
	root := junitTestSuites{Name: name, Suites: suites}
	total := 0.0
	for _, s := range suites {
		root.Tests += s.Tests
		root.Failures += s.Failures
		root.Errors += s.Errors
		root.Skipped += s.Skipped
		for _, c := range s.Cases {
			total += c.seconds
		}
	}
	root.Time = seconds(total)
	out, err := xml.MarshalIndent(root, "", "  ")
	if err != nil {
		return fmt.Errorf("writing the JUnit report: %w", err)
	}
	if _, err := io.WriteString(w, xml.Header+string(out)+"\n"); err != nil {
		return fmt.Errorf("writing the JUnit report: %w", err)
	}
	return nil
}

// violationText renders violations one a line, for tables and JUnit.
func violationText(vs []policy.Violation, indent string) string {
	var b strings.Builder
	for _, v := range vs {
		b.WriteString(indent)
		b.WriteString(violationLine(v))
		b.WriteString("\n")
	}
	return b.String()
}

// violationLine is "code message", with the rule when it differs (an engine
// error names the rule it failed on) and without the message's own
// "code: " prefix, which would only repeat it.
func violationLine(v policy.Violation) string {
	head := v.Code
	if v.Rule != "" && v.Rule != v.Code {
		head += " (rule " + v.Rule + ")"
	}
	return head + "  " + strings.TrimPrefix(v.Message, v.Code+": ")
}
