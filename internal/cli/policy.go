package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"time"

	"github.com/boualleiguie/macrack-operator/internal/policy"
	"github.com/boualleiguie/macrack-operator/policies"
)

func policyCommands() []command {
	return []command{
		{name: "test", summary: "run the Rego unit tests and the shared vectors against a policies folder", run: runPolicyTest},
		{name: "check", summary: "decide Kubernetes manifests as the admission webhooks would", run: runPolicyCheck},
		{name: "eval", summary: "decide one policy input document and print the decision", run: runPolicyEval},
	}
}

const policyUsage = `Test, check and evaluate MacRack's policies: the invariants in policies/
(Rego, and CEL twins for the rules the API server enforces).

Usage:
  macrackctl policy <subcommand> [flags]

Subcommands:
%s
Every subcommand takes --output (-o) table, json or junit; the default is
table. Run 'macrackctl policy <subcommand> --help' for its flags.

Exit codes:
  0  every document allowed; every test and vector passed
  1  a policy denied a document or an input; a test or a vector failed
  2  usage error, or unreadable or malformed input: bad flags, a missing
     file, malformed YAML, a document without apiVersion or kind, a kind the
     rules do not know, a malformed input document or vector file
  3  the policies themselves failed to load or compile

Output:
  table  one line per case or document, violations indented below, a summary.
  junit  JUnit XML: <testsuites><testsuite><testcase>, one testcase per Rego
         test, vector or document, with a <failure> for each that did not pass.
  json   one report object. Fields are only ever added; lists are never null.
         Every report has apiVersion "macrackctl/v1", a kind and the policies'
         revision (a content hash).
         policy check: kind PolicyCheckReport, allowed,
           summary {documents, allowed, denied},
           documents [{file, document, line, apiVersion, kind, namespace, name,
                       operation, allowed, rules, codes, violations}]
         policy eval: kind PolicyEvalReport, allowed,
           request {operation, group, version, kind, subResource, namespace,
                    name, username}, rules, codes, violations
         policy test: kind PolicyTestReport, passed,
           summary {total, passed, failed, skipped},
           cases [{suite (rego|vector), name, result (pass|fail|skip),
                   failure, file, line (Rego), vector (vectors): {rule, index,
                   expect, rego, cel}}]; rego and cel are each engine's
           answer {kind (allow|deny|error), codes, detail}, cel null where no
           CEL twin concerns the request; fields that do not apply to a case
           are left out
         violations are [{rule, code, message}]; code is the rule id, or
         policy.error or policy.disagreement when an engine itself refused.
`

func runPolicy(ctx context.Context, e env, args []string) error {
	cmds := policyCommands()
	if len(args) == 0 {
		fmt.Fprintf(e.stderr, policyUsage, commandList(cmds))
		return usagef("policy", "no subcommand given")
	}
	if isHelpFlag(args[0]) || args[0] == "help" {
		if args[0] == "help" && len(args) > 1 {
			return runPolicy(ctx, e, []string{args[1], "--help"})
		}
		fmt.Fprintf(e.stdout, policyUsage, commandList(cmds))
		return errHelp
	}
	for _, c := range cmds {
		if c.name == args[0] {
			return c.run(ctx, e, args[1:])
		}
	}
	return usagef("policy", "unknown subcommand %q", args[0])
}

// loadEngine loads the policies in dir, or the embedded ones when dir is
// empty. A dir that is not there is a usage error (2); policies that do not
// compile are exit 3.
func loadEngine(ctx context.Context, cmd, dir string) (*policy.Engine, error) {
	var fsys fs.FS = policies.FS
	name := "the embedded policies"
	if dir != "" {
		if err := checkDir(cmd, "policies", dir); err != nil {
			return nil, err
		}
		fsys, name = os.DirFS(dir), dir
	}
	// The webhook's 2 s bound keeps admission fast; offline, on a busy CI
	// runner, a slow decision is still the right one.
	eng, err := policy.Load(ctx, fsys, policy.WithTimeout(offlineDecideTimeout))
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", errPolicies, name, err)
	}
	return eng, nil
}

// checkDir refuses a missing directory argument as a usage error, before
// any engine reads it and reports it less plainly.
func checkDir(cmd, what, dir string) error {
	info, err := os.Stat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return usagef(cmd, "%s directory %s does not exist", what, dir)
	case err != nil:
		return fmt.Errorf("%w: %s directory: %w", errInput, what, err)
	case !info.IsDir():
		return usagef(cmd, "%s %s is not a directory", what, dir)
	}
	return nil
}

// displayName is how reports name a source: stdin has no file name.
func displayName(file string) string {
	if file == "-" {
		return "<stdin>"
	}
	return file
}

// readSource reads a file, or stdin for "-".
func readSource(e env, file string) ([]byte, error) {
	var data []byte
	var err error
	if file == "-" {
		data, err = io.ReadAll(e.stdin)
	} else {
		data, err = os.ReadFile(file)
	}
	if err != nil {
		// The PathError repeats the file name ManifestError already gives.
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = fmt.Errorf("cannot %s: %w", pe.Op, pe.Err)
		}
		return nil, &ManifestError{File: displayName(file), Index: -1, Err: err}
	}
	return data, nil
}

// offlineDecideTimeout bounds one offline decision.
const offlineDecideTimeout = 30 * time.Second
