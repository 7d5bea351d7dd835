package cli

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/boualleiguie/macrack-operator/internal/policy"
	"github.com/boualleiguie/macrack-operator/internal/policy/vectors"
)

const evalUsage = `Decide one policy input document and print the decision.

Usage:
  macrackctl policy eval [-i FILE|-] [flags]

The input document (YAML or JSON) has the shape the rules read, as in the
vectors of test/policy:

  object:     the object being written (absent on DELETE)
  oldObject:  the stored object (absent on CREATE)
  request:    {operation, kind: {group, version, kind}, subResource, name,
               namespace, userInfo: {username, groups}}
  params:     {data: {agentsNamespace, operatorUsername}}
  now:        an RFC 3339 time (default: now)
  inventory:  related objects by role, e.g. lease, nodeClass, leaseInstances

Flags:
  -i, --input FILE      the input document, or - for stdin (default -)
      --policies DIR    the policies folder (default: the embedded policies)
  -o, --output FORMAT   table, json or junit (default table)

Exit codes: 0 allowed, 1 denied, 2 usage error or a malformed input
document, 3 the policies did not load.
See 'macrackctl policy --help' for the output formats.
`

func runPolicyEval(ctx context.Context, e env, args []string) error {
	const cmd = "policy eval"
	var input, policiesDir string
	fs := newFlagSet(cmd)
	fs.StringVar(&input, "i", "-", "")
	fs.StringVar(&input, "input", "-", "")
	fs.StringVar(&policiesDir, "policies", "", "")
	output := outputFlag(fs)
	pos, err := parseFlags(fs, cmd, args, e.stdout, evalUsage)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usagef(cmd, "unexpected argument %q; name the input with -i", pos[0])
	}
	data, err := readSource(e, input)
	if err != nil {
		return err
	}
	raw, err := readMap(displayName(input), data)
	if err != nil {
		return err
	}
	in, err := vectors.ParseInput(raw)
	if err != nil {
		return &ManifestError{File: displayName(input), Index: -1, Err: err}
	}
	if in.Now.IsZero() {
		in.Now = e.now()
	}
	eng, err := loadEngine(ctx, cmd, policiesDir)
	if err != nil {
		return err
	}
	dec, err := eng.Decide(ctx, in)
	if err != nil {
		if _, isManifest := raw["apiVersion"]; isManifest && raw["request"] == nil {
			err = fmt.Errorf("%w (this looks like a manifest; 'policy check -f' decides manifests)", err)
		}
		return &ManifestError{File: displayName(input), Index: -1, Err: err}
	}

	req := requestReport(in)
	report := EvalReport{
		APIVersion: reportAPIVersion, Kind: "PolicyEvalReport", Revision: dec.Revision,
		Allowed: dec.Allowed(), Request: req,
		Rules: nonNil(dec.Rules), Codes: nonNil(dec.Codes()), Violations: violationReports(dec.Violations),
	}
	switch *output {
	case formatJSON:
		err = writeJSON(e.stdout, report)
	case formatJUnit:
		err = writeEvalJUnit(e.stdout, input, report, dec)
	default:
		writeEvalTable(e.stdout, report, dec)
	}
	if err != nil {
		return err
	}
	if !dec.Allowed() {
		return fmt.Errorf("%w: %s", errDenied, strings.Join(dec.Codes(), ", "))
	}
	return nil
}

// requestReport names the request as the engine completed it: name and
// namespace come from the object when the request leaves them out.
func requestReport(in policy.Input) RequestReport {
	r := in.Request
	name, namespace := r.Name, r.Namespace
	obj := in.Object
	if obj == nil {
		obj = in.OldObject
	}
	meta, _ := obj["metadata"].(map[string]any)
	if name == "" {
		name, _ = meta["name"].(string)
	}
	if namespace == "" {
		namespace, _ = meta["namespace"].(string)
	}
	return RequestReport{
		Operation: r.Operation, Group: r.Kind.Group, Version: r.Kind.Version, Kind: r.Kind.Kind,
		SubResource: r.SubResource, Namespace: namespace, Name: name, Username: r.UserInfo.Username,
	}
}

func (r RequestReport) describe() string {
	var b strings.Builder
	b.WriteString(r.Operation + " " + r.Kind)
	if r.SubResource != "" {
		b.WriteString("/" + r.SubResource)
	}
	b.WriteString(" ")
	if r.Namespace != "" {
		b.WriteString(r.Namespace + "/")
	}
	b.WriteString(r.Name)
	if r.Username != "" {
		b.WriteString(" by " + r.Username)
	}
	return b.String()
}

func writeEvalTable(w io.Writer, r EvalReport, dec policy.Decision) {
	status := "ALLOW"
	if !r.Allowed {
		status = "DENY"
	}
	fmt.Fprintf(w, "%-5s  %s\n", status, r.Request.describe())
	io.WriteString(w, violationText(dec.Violations, "         "))
	codes, rules := "none", "none apply"
	if len(r.Codes) > 0 {
		codes = strings.Join(r.Codes, ", ")
	}
	if len(r.Rules) > 0 {
		rules = strings.Join(r.Rules, ", ")
	}
	fmt.Fprintf(w, "\ncodes: %s\nrules evaluated: %s\npolicies revision: %s\n", codes, rules, r.Revision)
}

func writeEvalJUnit(w io.Writer, input string, r EvalReport, dec policy.Decision) error {
	c := junitTestCase{Name: r.Request.describe(), Classname: displayName(input), Time: seconds(0)}
	if input != "-" {
		c.File = input
	}
	if !r.Allowed {
		c.Failure = &junitFailure{Message: "denied by " + strings.Join(r.Codes, ", "), Type: "PolicyDenied", Text: violationText(dec.Violations, "")}
	}
	props := []junitProperty{{Name: "revision", Value: r.Revision}}
	return writeJUnit(w, "macrackctl policy eval", newJUnitSuite("policy eval", props, []junitTestCase{c}))
}
