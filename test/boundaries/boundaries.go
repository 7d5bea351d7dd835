// Package boundaries checks the import rules that keep the host agent a
// client of the Kubernetes API only, the policy package free of controller
// code (DESIGN, "Boundaries"), api/ free of anything under internal/, and
// the controllers that journal free of the audit stream's sinks.
package boundaries

import (
	"bytes"
	"fmt"
	"os/exec"
	"sort"
	"strings"
)

// Rule forbids packages matching Guarded, other than those under Except,
// from depending, directly or not, on any package under Forbidden (relative
// to the module path) or under ForbiddenExternal (full import paths: other
// modules).
type Rule struct {
	Guarded           []string
	Except            []string
	Forbidden         []string
	ForbiddenExternal []string
}

// Rules are the repository's import boundaries.
var Rules = []Rule{
	{
		Guarded:   []string{"cmd/agent", "cmd/vm-helper", "internal/agent", "internal/guest"},
		Forbidden: []string{"internal/reconcile", "internal/admission"},
	},
	{
		// api/ holds types only: controllers, the CLI and other projects
		// import it, and it imports nothing of the operator's.
		Guarded:   []string{"api"},
		Forbidden: []string{"internal"},
	},
	{
		Guarded:   []string{"internal/policy"},
		Forbidden: []string{"internal/reconcile", "internal/admission", "internal/agent"},
	},
	{
		// A workload acts as a tenant: it uses leases and instances through
		// the API, and decides nothing the policies decide.
		Guarded: []string{"internal/reconcile/gitlabrunner", "internal/gitlab"},
		Forbidden: []string{"internal/policy", "internal/inventory", "internal/index", "internal/admission",
			"internal/reconcile/intent", "internal/reconcile/lease", "internal/reconcile/node", "internal/reconcile/placement"},
	},
	{
		// A controller or webhook journals a transition in its object, or
		// offers a refusal to the denials' buffer; the exporter alone turns
		// them into CloudEvents and publishes them. Linking a sink would put
		// the JetStream client, its connection and its retries into every
		// controller.
		Guarded: []string{"internal/reconcile", "internal/admission"},
		Except:  []string{"internal/reconcile/audit"},
		Forbidden: []string{"internal/audit/sink", "internal/audit/event", "internal/audit/billing",
			"internal/reconcile/audit"},
		ForbiddenExternal: []string{"github.com/nats-io", "github.com/cloudevents"},
	},
}

// Violation is one forbidden dependency.
type Violation struct {
	Package, Imports string
}

func (v Violation) String() string { return v.Package + " depends on " + v.Imports }

// Check runs `go list -deps` in the module at dir and returns every violation
// of rules, and the guarded packages it checked.
func Check(dir string, rules []Rule) (violations []Violation, checked []string, err error) {
	module, err := goList(dir, "-m")
	if err != nil {
		return nil, nil, err
	}
	mod := strings.TrimSpace(module)
	for _, r := range rules {
		var patterns []string
		for _, g := range r.Guarded {
			patterns = append(patterns, "./"+g+"/...")
		}
		// -e: a guarded folder that does not exist yet matches nothing.
		out, err := goList(dir, append([]string{"-e", "-f", "{{if not .Error}}{{.ImportPath}}{{end}}"}, patterns...)...)
		if err != nil {
			return nil, nil, err
		}
		for _, pkg := range strings.Fields(out) {
			if under(pkg, mod, r.Except) {
				continue
			}
			checked = append(checked, pkg)
			deps, err := goList(dir, "-deps", "-f", "{{.ImportPath}}", pkg)
			if err != nil {
				return nil, nil, err
			}
			for _, dep := range strings.Fields(deps) {
				if under(dep, mod, r.Forbidden) || under(dep, "", r.ForbiddenExternal) {
					violations = append(violations, Violation{Package: pkg, Imports: dep})
				}
			}
		}
	}
	sort.Strings(checked)
	return violations, checked, nil
}

// under says whether pkg is one of prefixes, or below one, each relative
// to mod (a full import path if mod is empty).
func under(pkg, mod string, prefixes []string) bool {
	for _, p := range prefixes {
		if mod != "" {
			p = mod + "/" + p
		}
		if pkg == p || strings.HasPrefix(pkg, p+"/") {
			return true
		}
	}
	return false
}

func goList(dir string, args ...string) (string, error) {
	cmd := exec.Command("go", append([]string{"list"}, args...)...)
	cmd.Dir = dir
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("go list %s in %s: %w: %s", strings.Join(args, " "), dir, err, stderr.String())
	}
	return stdout.String(), nil
}
