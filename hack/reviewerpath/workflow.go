package main

import (
	"errors"
	"fmt"
	"go/version"
	"regexp"
	"sort"
	"strings"

	"sigs.k8s.io/yaml"
)

// The policy steps the sample must hold, by step id, and the command each
// must run. The check executes these and nothing else, so a step it does not
// know is an error rather than something that silently goes unrun.
var policySteps = []struct{ id, command string }{
	{"opa-test", "opa test policies"},
	{"conftest", "conftest test"},
	{"macrackctl", "macrackctl policy check"},
}

const (
	opaModule        = "github.com/open-policy-agent/opa"
	conftestModule   = "github.com/open-policy-agent/conftest"
	macrackctlModule = "github.com/boualleiguie/macrack-operator/cmd/macrackctl"
	setupGo          = "actions/setup-go"
)

type workflow struct {
	Env      map[string]any `json:"env"`
	Defaults defaults       `json:"defaults"`
	Jobs     map[string]job `json:"jobs"`
}

type defaults struct {
	Run struct {
		Shell            string `json:"shell"`
		WorkingDirectory string `json:"working-directory"`
	} `json:"run"`
}

type job struct {
	Env      map[string]any `json:"env"`
	Defaults defaults       `json:"defaults"`
	Steps    []step         `json:"steps"`
}

type step struct {
	ID               string         `json:"id"`
	Name             string         `json:"name"`
	Uses             string         `json:"uses"`
	Run              string         `json:"run"`
	Shell            string         `json:"shell"`
	WorkingDirectory string         `json:"working-directory"`
	With             map[string]any `json:"with"`
	Env              map[string]any `json:"env"`
}

// label names a step in messages the way the Actions log does.
func (s step) label() string {
	switch {
	case s.Name != "":
		return fmt.Sprintf("step %q", s.Name)
	case s.ID != "":
		return fmt.Sprintf("step %s", s.ID)
	default:
		return fmt.Sprintf("step uses %s", s.Uses)
	}
}

// plan is the parsed workflow: its actions, its install steps (checked,
// never run here) and its policy steps (run), each with its environment
// resolved as Actions would (workflow, then job, then step).
type plan struct {
	actions []step
	install []step
	policy  []step
	env     map[string]map[string]string // step label → its environment
	// pinned holds the versions checkPins resolved, by module path ("go" for Go).
	pinned map[string]string
}

func parseWorkflow(data []byte) (*plan, error) {
	var w workflow
	if err := yaml.Unmarshal(data, &w); err != nil {
		return nil, fmt.Errorf("not a workflow: %w", err)
	}
	if len(w.Jobs) != 1 {
		return nil, fmt.Errorf("has %d jobs, want the one job this check knows how to run", len(w.Jobs))
	}
	var j job
	for _, only := range w.Jobs {
		j = only
	}
	// The policy steps are run with bash -eo pipefail, which is what
	// `shell: bash` means on Actions; the default shell differs (no pipefail).
	shell := w.Defaults.Run.Shell
	if j.Defaults.Run.Shell != "" {
		shell = j.Defaults.Run.Shell
	}
	if w.Defaults.Run.WorkingDirectory != "" || j.Defaults.Run.WorkingDirectory != "" {
		return nil, errors.New("sets defaults.run.working-directory, which this check does not emulate")
	}
	wenv, err := stringEnv("env", w.Env)
	if err != nil {
		return nil, err
	}
	jenv, err := stringEnv("the job's env", j.Env)
	if err != nil {
		return nil, err
	}

	p := &plan{env: map[string]map[string]string{}}
	seen := map[string]bool{}
	for _, s := range j.Steps {
		senv, err := stringEnv(s.label()+" env", s.Env)
		if err != nil {
			return nil, err
		}
		env := merge(wenv, jenv, senv)
		switch {
		case s.Uses != "" && s.Run != "":
			return nil, fmt.Errorf("%s has both uses and run", s.label())
		case s.Uses != "":
			p.actions = append(p.actions, s)
			p.env[s.label()] = env
			continue
		}
		if s.WorkingDirectory != "" {
			return nil, fmt.Errorf("%s sets working-directory, which this check does not emulate", s.label())
		}
		if sh := or(s.Shell, shell); sh != "bash" {
			return nil, fmt.Errorf("%s runs with shell %q; this check runs bash, so the workflow must say shell: bash", s.label(), sh)
		}
		p.env[s.label()] = env
		if strings.Contains(s.Run, "go install") {
			p.install = append(p.install, s)
			continue
		}
		known := false
		for _, ps := range policySteps {
			if s.ID == ps.id {
				known = true
				if !strings.Contains(s.Run, ps.command) {
					return nil, fmt.Errorf("%s (id %s) does not run %q", s.label(), s.ID, ps.command)
				}
			}
		}
		if !known {
			return nil, fmt.Errorf("%s (id %q) is neither an install step (go install) nor a policy step this check runs (ids %s)",
				s.label(), s.ID, policyIDs())
		}
		if seen[s.ID] {
			return nil, fmt.Errorf("two steps have id %s", s.ID)
		}
		seen[s.ID] = true
		// The check hands run: to bash as written; an expression would be
		// run unexpanded, so it is refused instead.
		if strings.Contains(s.Run, "${{") {
			return nil, fmt.Errorf("%s uses a ${{ }} expression in run:; use the shell's $VARIABLE", s.label())
		}
		if len(p.install) == 0 {
			return nil, fmt.Errorf("%s comes before the install step", s.label())
		}
		p.policy = append(p.policy, s)
	}
	for _, ps := range policySteps {
		if !seen[ps.id] {
			return nil, fmt.Errorf("has no step with id %s running %q", ps.id, ps.command)
		}
	}
	return p, nil
}

func policyIDs() string {
	var ids []string
	for _, ps := range policySteps {
		ids = append(ids, ps.id)
	}
	return strings.Join(ids, ", ")
}

// stringEnv refuses non-string values: YAML reads 1.20 as the number 1.2,
// which Actions would then pass on as "1.2".
func stringEnv(where string, m map[string]any) (map[string]string, error) {
	out := map[string]string{}
	for k, v := range m {
		s, ok := v.(string)
		if !ok {
			return nil, fmt.Errorf("%s: %s is %v, not a string; quote it", where, k, v)
		}
		out[k] = s
	}
	return out, nil
}

func merge(envs ...map[string]string) map[string]string {
	out := map[string]string{}
	for _, e := range envs {
		for k, v := range e {
			out[k] = v
		}
	}
	return out
}

func or(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

var (
	exprRef  = regexp.MustCompile(`^\$\{\{\s*env\.([A-Za-z_][A-Za-z0-9_]*)\s*\}\}$`)
	shellRef = regexp.MustCompile(`^\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?$`)
	install  = regexp.MustCompile(`go install\s+(\S+)`)
	fullSHA  = regexp.MustCompile(`^[0-9a-f]{40}$`)
	semver   = regexp.MustCompile(`^v[0-9]+\.[0-9]+\.[0-9]+$`)
	goPatch  = regexp.MustCompile(`^1\.[0-9]+\.[0-9]+$`)
)

// resolve expands a version written as a literal, $VAR, ${VAR} or
// ${{ env.VAR }} against a step's environment.
func resolve(v string, env map[string]string) (string, error) {
	v = strings.Trim(v, `"'`)
	m := exprRef.FindStringSubmatch(v)
	if m == nil {
		m = shellRef.FindStringSubmatch(v)
	}
	if m == nil {
		if strings.ContainsAny(v, "${}") {
			return "", fmt.Errorf("%q is neither a literal nor one variable", v)
		}
		return v, nil
	}
	val, ok := env[m[1]]
	if !ok {
		return "", fmt.Errorf("%s is not defined in the workflow's env", m[1])
	}
	return val, nil
}

// pins are the versions the workflow must use: the Makefile's and go.mod's.
type pins struct {
	opa, conftest string
	goMod         []byte
	// resolveRef says whether a macrackctl ref names a commit or tag of
	// this repository, so that the pin is known to exist.
	resolveRef func(ref string) error
}

// checkPins reports every pin that is missing or differs, at once.
func checkPins(p *plan, want pins) error {
	p.pinned = map[string]string{}
	var errs []error
	fail := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }

	goSet := false
	for _, a := range p.actions {
		name, ref, _ := strings.Cut(a.Uses, "@")
		if !fullSHA.MatchString(ref) {
			fail("%s: %s is not pinned to a full commit SHA", a.label(), a.Uses)
		}
		if name != setupGo {
			continue
		}
		raw, _ := a.With["go-version"].(string)
		v, err := resolve(raw, p.env[a.label()])
		switch {
		case raw == "":
			fail("%s: no go-version", a.label())
		case err != nil:
			fail("%s: go-version: %v", a.label(), err)
		default:
			if err := checkGo(v, want.goMod); err != nil {
				fail("%s: %v", a.label(), err)
			}
			p.pinned["go"] = v
			goSet = true
		}
	}
	if !goSet {
		fail("no %s step pins the Go version", setupGo)
	}

	expect := map[string]func(string) error{
		opaModule:      equal("OPA_VERSION in the Makefile", want.opa),
		conftestModule: equal("CONFTEST_VERSION in the Makefile", want.conftest),
		macrackctlModule: func(v string) error {
			if !fullSHA.MatchString(v) && !semver.MatchString(v) {
				return fmt.Errorf("%q is neither a release tag vX.Y.Z nor a full commit SHA", v)
			}
			if want.resolveRef != nil {
				return want.resolveRef(v)
			}
			return nil
		},
	}
	installed := map[string]int{}
	for _, s := range p.install {
		for _, m := range install.FindAllStringSubmatch(s.Run, -1) {
			mod, raw, ok := strings.Cut(m[1], "@")
			check := expect[mod]
			switch {
			case !ok:
				fail("%s: go install %s has no @version", s.label(), m[1])
				continue
			case check == nil:
				fail("%s: go install %s: not a tool this check knows the pin of", s.label(), mod)
				continue
			}
			installed[mod]++
			v, err := resolve(raw, p.env[s.label()])
			if err == nil {
				err = check(v)
			}
			p.pinned[mod] = v
			if err != nil {
				fail("%s: go install %s@%s: %v", s.label(), mod, raw, err)
			}
		}
	}
	mods := make([]string, 0, len(expect))
	for mod := range expect {
		mods = append(mods, mod)
	}
	sort.Strings(mods)
	for _, mod := range mods {
		if installed[mod] != 1 {
			fail("%s is installed %d times, want once", mod, installed[mod])
		}
	}
	return errors.Join(errs...)
}

func equal(what, want string) func(string) error {
	return func(got string) error {
		if got != want {
			return fmt.Errorf("pinned to %s, but %s is %s", got, what, want)
		}
		return nil
	}
}

// checkGo wants the workflow's Go to be go.mod's toolchain line if it has
// one, else a patch release of the go line's language version no older
// than the go line: exactly the toolchains GOTOOLCHAIN=local accepts.
func checkGo(v string, goMod []byte) error {
	if !goPatch.MatchString(v) {
		return fmt.Errorf("go-version %q is not a release such as 1.26.8", v)
	}
	var goLine, toolchain string
	for _, line := range strings.Split(string(goMod), "\n") {
		f := strings.Fields(line)
		if len(f) == 2 && f[0] == "go" {
			goLine = "go" + f[1]
		}
		if len(f) == 2 && f[0] == "toolchain" {
			toolchain = f[1]
		}
	}
	gv := "go" + v
	switch {
	case goLine == "":
		return errors.New("go.mod has no go line")
	case toolchain != "" && gv != toolchain:
		return fmt.Errorf("go-version %s, but go.mod's toolchain is %s", v, toolchain)
	case version.Lang(gv) != version.Lang(goLine) || version.Compare(gv, goLine) < 0:
		return fmt.Errorf("go-version %s is not a %s release at or after go.mod's %s", v, version.Lang(goLine), goLine)
	}
	return nil
}
