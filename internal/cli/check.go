package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/boualleiguie/macrack-operator/internal/policy"
)

const checkUsage = `Decide Kubernetes manifests as MacRack's admission webhooks would.

Usage:
  macrackctl policy check -f FILE [-f FILE...] [flags]

Each document of each file (multi-document YAML, or JSON) is wrapped into a
policy input: by default a CREATE by user macrackctl, at the current time,
with params.data.agentsNamespace macrack-agents, and decided by every rule
that applies to its kind. Empty documents are skipped; documents are
numbered from 0 in each file. An UPDATE re-applies the document over
itself (oldObject is the document); a DELETE deletes it (oldObject only).

A document of a namespaced kind (a lease, an instance, a GitLabRunner) that
names no namespace is checked in the one -n names, as 'kubectl apply -n NS'
would create it; so is a namespaced object of the inventory that names none.

Rules that read related objects (a lease's class, an instance's lease) find
them in the inventory; without --inventory they see none, as the webhooks
would for objects that do not exist.

Flags:
  -f, --file FILE            a manifest file, a directory of *.yaml, *.yml
                             and *.json files, or - for stdin; repeatable
  -n, --namespace NS         the namespace of namespaced documents and
                             inventory objects that name none (default
                             default, as kubectl's)
      --inventory FILE       a YAML or JSON map of inventory roles, e.g.
                             lease:, nodeClass:, leaseInstances: [...], given
                             to every document
      --now RFC3339          the time rules see (default: now)
      --user NAME            the requesting user (default macrackctl)
      --group NAME           a group of the requesting user; repeatable
      --operation OP         CREATE, UPDATE or DELETE (default CREATE)
      --agents-namespace NS  params.data.agentsNamespace (default macrack-agents)
      --policies DIR         the policies folder (default: the embedded policies)
  -o, --output FORMAT        table, json or junit (default table)

Exit codes: 0 all allowed, 1 a document was denied, 2 usage or input error
(including a kind the rules do not know), 3 the policies did not load.
See 'macrackctl policy --help' for the output formats.
`

type checkOptions struct {
	files           stringList
	inventory       string
	now             string
	user            string
	groups          stringList
	operation       string
	agentsNamespace string
	namespace       string
	policies        string
	output          *format
}

func runPolicyCheck(ctx context.Context, e env, args []string) error {
	const cmd = "policy check"
	var o checkOptions
	fs := newFlagSet(cmd)
	fs.Var(&o.files, "f", "")
	fs.Var(&o.files, "file", "")
	fs.StringVar(&o.inventory, "inventory", "", "")
	fs.StringVar(&o.now, "now", "", "")
	fs.StringVar(&o.user, "user", "macrackctl", "")
	fs.Var(&o.groups, "group", "")
	fs.StringVar(&o.operation, "operation", "CREATE", "")
	fs.StringVar(&o.agentsNamespace, "agents-namespace", "macrack-agents", "")
	fs.StringVar(&o.namespace, "n", "default", "")
	fs.StringVar(&o.namespace, "namespace", "default", "")
	fs.StringVar(&o.policies, "policies", "", "")
	o.output = outputFlag(fs)
	pos, err := parseFlags(fs, cmd, args, e.stdout, checkUsage)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usagef(cmd, "unexpected argument %q; name manifests with -f", pos[0])
	}
	if len(o.files) == 0 {
		return usagef(cmd, "no manifests given; name them with -f FILE")
	}
	o.operation = strings.ToUpper(o.operation)
	switch o.operation {
	case "CREATE", "UPDATE", "DELETE":
	default:
		return usagef(cmd, "--operation %q is not CREATE, UPDATE or DELETE", o.operation)
	}
	now := e.now()
	if o.now != "" {
		if now, err = time.Parse(time.RFC3339, o.now); err != nil {
			return usagef(cmd, "--now %q is not an RFC 3339 time such as 2026-06-01T12:00:00Z", o.now)
		}
	}
	if o.user == "" {
		return usagef(cmd, "--user is empty")
	}
	if errs := validation.IsDNS1123Label(o.namespace); len(errs) > 0 {
		return usagef(cmd, "--namespace %q is not a namespace name: %s", o.namespace, strings.Join(errs, "; "))
	}
	if o.inventory == "-" && slices.Contains(o.files, "-") {
		return usagef(cmd, "stdin cannot hold both the manifests and the inventory")
	}

	docs, err := readAllManifests(e, cmd, o.files)
	if err != nil {
		return err
	}
	var inventory map[string]any
	if o.inventory != "" {
		data, err := readSource(e, o.inventory)
		if err != nil {
			return err
		}
		if inventory, err = readMap(displayName(o.inventory), data); err != nil {
			return err
		}
		defaultInventoryNamespace(inventory, o.namespace)
	}
	for _, d := range docs {
		defaultNamespace(d.Object, o.namespace)
	}
	eng, err := loadEngine(ctx, cmd, o.policies)
	if err != nil {
		return err
	}

	report := CheckReport{APIVersion: reportAPIVersion, Kind: "PolicyCheckReport", Revision: eng.Revision(), Documents: []CheckedDocument{}}
	decisions := make([]policy.Decision, len(docs))
	var errs []error
	for i, d := range docs {
		in := policy.Input{
			Request: policy.Request{
				Operation: o.operation,
				Kind:      d.GVK,
				UserInfo:  policy.UserInfo{Username: o.user, Groups: o.groups},
			},
			Params:    policy.Params{AgentsNamespace: o.agentsNamespace},
			Now:       now,
			Inventory: inventory,
		}
		switch o.operation {
		case "CREATE":
			in.Object = d.Object
		case "UPDATE":
			in.Object, in.OldObject = d.Object, d.Object
		case "DELETE":
			in.OldObject = d.Object
		}
		dec, err := eng.Decide(ctx, in)
		if err != nil {
			errs = append(errs, &ManifestError{File: d.File, Index: d.Index, Line: d.Line, Err: err})
			continue
		}
		decisions[i] = dec
		meta, _ := d.Object["metadata"].(map[string]any)
		name, _ := meta["name"].(string)
		namespace, _ := meta["namespace"].(string)
		report.Documents = append(report.Documents, CheckedDocument{
			File: d.File, Document: d.Index, Line: d.Line,
			APIVersion: d.GVK.GroupVersion().String(), Kind: d.GVK.Kind,
			Namespace: namespace, Name: name, Operation: o.operation,
			Allowed: dec.Allowed(), Rules: nonNil(dec.Rules), Codes: nonNil(dec.Codes()),
			Violations: violationReports(dec.Violations),
		})
		report.Summary.Documents++
		if dec.Allowed() {
			report.Summary.Allowed++
		} else {
			report.Summary.Denied++
		}
	}
	if len(errs) > 0 {
		return errorList(errs)
	}
	report.Allowed = report.Summary.Denied == 0

	switch *o.output {
	case formatJSON:
		err = writeJSON(e.stdout, report)
	case formatJUnit:
		err = writeCheckJUnit(e.stdout, report, docs, decisions)
	default:
		writeCheckTable(e.stdout, report, docs, decisions)
	}
	if err != nil {
		return err
	}
	if !report.Allowed {
		return fmt.Errorf("%w: %d of %d documents", errDenied, report.Summary.Denied, report.Summary.Documents)
	}
	return nil
}

// defaultNamespace puts obj, if it is of a namespaced kind and names no
// namespace, in ns: the API server creates it in the request's namespace,
// and rules such as instance.tenant compare it with its lease's.
func defaultNamespace(obj map[string]any, ns string) {
	apiVersion, _ := obj["apiVersion"].(string)
	kind, _ := obj["kind"].(string)
	gv, err := schema.ParseGroupVersion(apiVersion)
	if err != nil || kind == "" {
		return
	}
	if namespaced, _ := policy.Namespaced(gv.WithKind(kind).GroupKind()); !namespaced {
		return
	}
	meta, ok := obj["metadata"].(map[string]any)
	if !ok {
		meta = map[string]any{}
		obj["metadata"] = meta
	}
	if cur, _ := meta["namespace"].(string); cur == "" {
		meta["namespace"] = ns
	}
}

// defaultInventoryNamespace does what defaultNamespace does to each object
// of the inventory, a role's object or the objects of a role's list, so
// that an inventory written without namespaces describes the namespace the
// manifests are checked in. Values that are not objects (an access review's
// answer) are left as written.
func defaultInventoryNamespace(inventory map[string]any, ns string) {
	for _, v := range inventory {
		switch v := v.(type) {
		case map[string]any:
			defaultNamespace(v, ns)
		case []any:
			for _, e := range v {
				if obj, ok := e.(map[string]any); ok {
					defaultNamespace(obj, ns)
				}
			}
		}
	}
}

// readAllManifests reads every file, expanding directories, and refuses
// documents of kinds the rules do not know. It reports every bad file and
// document at once, so that one CI run lists them all.
func readAllManifests(e env, cmd string, files []string) ([]Document, error) {
	var paths []string
	stdin := false
	for _, f := range files {
		if f == "-" {
			if stdin {
				return nil, usagef(cmd, "stdin (-f -) is named twice")
			}
			stdin = true
			paths = append(paths, f)
			continue
		}
		if info, err := os.Stat(f); err == nil && info.IsDir() {
			found, err := manifestFiles(f)
			if err != nil {
				return nil, err
			}
			paths = append(paths, found...)
			continue
		}
		paths = append(paths, f)
	}
	var docs []Document
	var errs []error
	for _, p := range paths {
		data, err := readSource(e, p)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		found, err := ReadManifests(displayName(p), data)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, d := range found {
			if !policy.KnownKind(d.GVK.GroupKind()) {
				errs = append(errs, &ManifestError{File: d.File, Index: d.Index, Line: d.Line, Err: fmt.Errorf(
					"unknown kind %s (apiVersion %s): no MacRack rule concerns it", d.GVK.Kind, d.GVK.GroupVersion())})
				continue
			}
			docs = append(docs, d)
		}
	}
	if len(errs) > 0 {
		return nil, errorList(errs)
	}
	return docs, nil
}

// manifestFiles lists a directory's manifests, not recursively, in a
// stable order.
func manifestFiles(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, &ManifestError{File: dir, Index: -1, Err: err}
	}
	var out []string
	for _, ent := range entries {
		switch strings.ToLower(filepath.Ext(ent.Name())) {
		case ".yaml", ".yml", ".json":
			if !ent.IsDir() {
				out = append(out, filepath.Join(dir, ent.Name()))
			}
		}
	}
	if len(out) == 0 {
		return nil, &ManifestError{File: dir, Index: -1, Err: errors.New("the directory holds no *.yaml, *.yml or *.json file")}
	}
	sort.Strings(out)
	return out, nil
}

func writeCheckTable(w io.Writer, r CheckReport, docs []Document, decisions []policy.Decision) {
	for i, d := range docs {
		dec := decisions[i]
		status, rules := "ALLOW", "no rule applies"
		if !dec.Allowed() {
			status = "DENY"
		}
		if len(dec.Rules) > 0 {
			rules = "rules " + strings.Join(dec.Rules, ", ")
		}
		fmt.Fprintf(w, "%-5s  %s %s  (%s)\n", status, d.File, d.Describe(), rules)
		io.WriteString(w, violationText(dec.Violations, "         "))
	}
	verdict := "all allowed"
	if !r.Allowed {
		verdict = "DENIED"
	}
	fmt.Fprintf(w, "\n%s: %d allowed, %d denied; %s (policies revision %s)\n",
		plural(r.Summary.Documents, "document"), r.Summary.Allowed, r.Summary.Denied, verdict, r.Revision)
}

func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

func writeCheckJUnit(w io.Writer, r CheckReport, docs []Document, decisions []policy.Decision) error {
	cases := make([]junitTestCase, 0, len(docs))
	for i, d := range docs {
		dec := decisions[i]
		c := junitTestCase{Name: d.Describe(), Classname: d.File, File: d.File, Time: seconds(0)}
		if !dec.Allowed() {
			c.Failure = &junitFailure{
				Message: "denied by " + strings.Join(dec.Codes(), ", "),
				Type:    "PolicyDenied",
				Text:    violationText(dec.Violations, ""),
			}
		}
		cases = append(cases, c)
	}
	props := []junitProperty{{Name: "revision", Value: r.Revision}}
	return writeJUnit(w, "macrackctl policy check", newJUnitSuite("policy check", props, cases))
}
