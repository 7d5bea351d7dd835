// Package rbac reads config/rbac and holds the operator and the tenants to
// the narrow roles the design gives them.
package rbac

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/yaml"
)

// allowed is every API group and resource the operator may touch.
var allowed = map[string][]string{
	"fleet.macrack.io":             {"*"},
	"leasing.macrack.io":           {"*"},
	"compute.macrack.io":           {"*"},
	"workloads.macrack.io":         {"*"},
	"":                             {"nodes", "pods", "events", "serviceaccounts", "configmaps"},
	"events.k8s.io":                {"events"},
	"coordination.k8s.io":          {"leases"},
	"admissionregistration.k8s.io": {"validatingadmissionpolicies", "validatingadmissionpolicybindings"},
	// MacRack's FlowSchemas and its webhook's priority level, which an OLM
	// bundle cannot carry.
	"flowcontrol.apiserver.k8s.io": {"flowschemas", "prioritylevelconfigurations"},
	// The agents' kubelet serving certificates: read the requests, approve
	// or deny them, sign them; for MacRack's signer only
	// (TestTheOperatorApprovesAndSignsOnlyItsOwnSigner).
	"certificates.k8s.io": {"certificatesigningrequests", "signers"},
	// runner.secret: the webhook asks whether a GitLabRunner's requester
	// may get its token Secret (TestTheOperatorOnlyCreatesAccessReviews).
	"authorization.k8s.io": {"subjectaccessreviews"},
	// The agents' roles, granted once to their namespace's group while
	// agent.scope is in force (TestTheOperatorBindsOnlyTheAgentsRoles).
	"rbac.authorization.k8s.io": {"clusterrolebindings", "rolebindings", "clusterroles"},
}

func roles(t *testing.T) map[string]rbacv1.ClusterRole {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("..", "..", "config", "rbac", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no RBAC manifests: %v", err)
	}
	out := map[string]rbacv1.ClusterRole{}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, doc := range bytes.Split(data, []byte("\n---")) {
			var r rbacv1.ClusterRole
			if err := yaml.Unmarshal(doc, &r); err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			if r.Kind == "ClusterRole" {
				out[r.Name] = r
			}
		}
	}
	return out
}

// violations lists the rules of role outside allowed.
func violations(role rbacv1.ClusterRole) []string {
	var bad []string
	for _, rule := range role.Rules {
		for _, g := range rule.APIGroups {
			ok, known := allowed[g]
			if !known {
				bad = append(bad, "group "+g)
				continue
			}
			for _, res := range rule.Resources {
				base := strings.Split(res, "/")[0]
				if !contains(ok, "*") && !contains(ok, base) {
					bad = append(bad, g+"/"+res)
				}
			}
		}
		if len(rule.NonResourceURLs) > 0 {
			bad = append(bad, "non-resource URLs")
		}
	}
	return bad
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func TestTheOperatorsRoleIsNarrow(t *testing.T) {
	op, ok := roles(t)["macrack-operator"]
	if !ok {
		t.Fatal("no macrack-operator ClusterRole in config/rbac")
	}
	if len(op.Rules) == 0 {
		t.Fatal("the operator's role is empty")
	}
	for _, v := range violations(op) {
		t.Errorf("the operator's role reaches outside its API: %s", v)
	}
}

func TestTheCheckCatchesAWiderRole(t *testing.T) {
	wide := rbacv1.ClusterRole{Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get"}},
		{APIGroups: []string{"kubevirt.io"}, Resources: []string{"virtualmachines"}, Verbs: []string{"*"}},
	}}
	if got := violations(wide); len(got) != 2 {
		t.Fatalf("want secrets and kubevirt.io caught, got %v", got)
	}
}

func TestTenantRolesCoverLeasesInstancesAndPodsAndNeverStatus(t *testing.T) {
	all := roles(t)
	for _, name := range []string{"macrack-tenant-edit", "macrack-tenant-view"} {
		r, ok := all[name]
		if !ok {
			t.Fatalf("no %s ClusterRole", name)
		}
		var resources []string
		for _, rule := range r.Rules {
			for _, res := range rule.Resources {
				// The VMs' Pods' access subresources (issues 32 and 33), and no
				// other: exec (create) and port-forward (create, get) for
				// editors, logs (get) for both.
				access := rule.APIGroups[0] == "" && (res == "pods/log" && slices.Equal(rule.Verbs, []string{"get"}) ||
					res == "pods/exec" && name == "macrack-tenant-edit" && slices.Equal(rule.Verbs, []string{"create"}) ||
					res == "pods/portforward" && name == "macrack-tenant-edit" && slices.Equal(rule.Verbs, []string{"create", "get"}))
				if (strings.Contains(res, "/") && !access) || res == "*" {
					t.Errorf("%s grants %s %v; tenants never write status or other subresources", name, res, rule.Verbs)
				}
				if res == "pods" && !slices.Equal(rule.Verbs, []string{"get", "list", "watch"}) {
					t.Errorf("%s may %v pods; tenants only read them (the operator makes them)", name, rule.Verbs)
				}
				resources = append(resources, res)
			}
		}
		if !contains(resources, "macnodeleases") || !contains(resources, "macosinstances") || !contains(resources, "pods") || !contains(resources, "pods/log") {
			t.Errorf("%s must cover leases, instances, and their Pods and logs, has %v", name, resources)
		}
		if edit := name == "macrack-tenant-edit"; contains(resources, "pods/exec") != edit || contains(resources, "pods/portforward") != edit {
			t.Errorf("%s: exec and port-forward are the editors' (and theirs only), has %v", name, resources)
		}
	}
	for _, rule := range all["macrack-tenant-view"].Rules {
		for _, v := range rule.Verbs {
			if v != "get" && v != "list" && v != "watch" {
				t.Errorf("macrack-tenant-view may %s", v)
			}
		}
	}
}

// TestTheOperatorReadsSecretsOnlyInItsNamespace: the MacOSImages' pull
// Secrets are read through a Role of macrack-system, get only, bound to
// the operator's ServiceAccount; no ClusterRole of the operator names
// secrets (TestTheOperatorsRoleIsNarrow).
func TestTheOperatorReadsSecretsOnlyInItsNamespace(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("..", "..", "config", "rbac", "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var role *rbacv1.Role
	bound := false
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, doc := range bytes.Split(data, []byte("\n---")) {
			var meta struct {
				Kind     string `json:"kind"`
				Metadata struct {
					Name, Namespace string
				} `json:"metadata"`
			}
			if err := yaml.Unmarshal(doc, &meta); err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			switch {
			case meta.Kind == "Role" && meta.Metadata.Name == "macrack-operator":
				role = &rbacv1.Role{}
				if err := yaml.Unmarshal(doc, role); err != nil {
					t.Fatal(err)
				}
			case meta.Kind == "RoleBinding" && meta.Metadata.Name == "macrack-operator":
				var rb rbacv1.RoleBinding
				if err := yaml.Unmarshal(doc, &rb); err != nil {
					t.Fatal(err)
				}
				bound = rb.Namespace == "macrack-system" && rb.RoleRef.Kind == "Role" && rb.RoleRef.Name == "macrack-operator" &&
					len(rb.Subjects) == 1 && rb.Subjects[0].Name == "macrack-operator" && rb.Subjects[0].Namespace == "macrack-system"
			}
		}
	}
	if role == nil || role.Namespace != "macrack-system" {
		t.Fatalf("want the operator's Role in macrack-system, got %+v", role)
	}
	if len(role.Rules) != 1 || fmt.Sprint(role.Rules[0].Resources) != "[secrets]" || fmt.Sprint(role.Rules[0].Verbs) != "[get]" {
		t.Fatalf("the operator's Role must grant get on secrets and nothing else, got %+v", role.Rules)
	}
	if !bound {
		t.Fatal("no RoleBinding of the operator's Role to its ServiceAccount in macrack-system")
	}
}

// TestTheOperatorApprovesAndSignsOnlyItsOwnSigner: the operator may
// approve and sign for macrack.io/kubelet-serving and no other signer (a
// kubernetes.io/kube-apiserver-client certificate would be a cluster
// credential), and may not create, patch or delete requests.
func TestTheOperatorApprovesAndSignsOnlyItsOwnSigner(t *testing.T) {
	op := roles(t)["macrack-operator"]
	var approves, signs bool
	for _, rule := range op.Rules {
		if !contains(rule.APIGroups, "certificates.k8s.io") {
			continue
		}
		for _, res := range rule.Resources {
			switch res {
			case "signers":
				if len(rule.ResourceNames) != 1 || rule.ResourceNames[0] != "macrack.io/kubelet-serving" {
					t.Errorf("the operator may %v signers %v; only macrack.io/kubelet-serving", rule.Verbs, rule.ResourceNames)
				}
				approves = approves || contains(rule.Verbs, "approve")
				signs = signs || contains(rule.Verbs, "sign")
			case "certificatesigningrequests":
				if !slices.Equal(rule.Verbs, []string{"get", "list", "watch"}) {
					t.Errorf("the operator may %v certificatesigningrequests; only read them", rule.Verbs)
				}
			case "certificatesigningrequests/approval", "certificatesigningrequests/status":
				if !slices.Equal(rule.Verbs, []string{"update"}) {
					t.Errorf("the operator may %v %s; only update", rule.Verbs, res)
				}
			default:
				t.Errorf("the operator reaches certificates.k8s.io/%s", res)
			}
		}
	}
	if !approves || !signs {
		t.Errorf("the operator may not approve (%v) or sign (%v) for macrack.io/kubelet-serving", approves, signs)
	}
}

// TestTheOperatorImpersonatesOnlyTheRunnerIdentity: the GitLabRunner
// controller acts as each namespace's macrack-gitlab-runner ServiceAccount,
// so the operator may impersonate that one name, and no user, group or other
// ServiceAccount: a tenant cannot make it act as anyone else.
func TestTheOperatorImpersonatesOnlyTheRunnerIdentity(t *testing.T) {
	op := roles(t)["macrack-operator"]
	var found bool
	for _, rule := range op.Rules {
		if !contains(rule.Verbs, "impersonate") && !contains(rule.Verbs, "*") {
			continue
		}
		if len(rule.Resources) != 1 || rule.Resources[0] != "serviceaccounts" || len(rule.APIGroups) != 1 || rule.APIGroups[0] != "" {
			t.Errorf("the operator may impersonate %v in %v; only core serviceaccounts", rule.Resources, rule.APIGroups)
		}
		if len(rule.ResourceNames) != 1 || rule.ResourceNames[0] != "macrack-gitlab-runner" {
			t.Errorf("the operator may impersonate ServiceAccounts %v; only macrack-gitlab-runner", rule.ResourceNames)
		}
		found = true
	}
	if !found {
		t.Error("the operator may not impersonate macrack-gitlab-runner: GitLabRunners cannot act as their tenants")
	}
}

// TestTheRunnerRoleGrantsNothingATenantLacks: the role a tenant binds to
// its runner identity is within macrack-tenant-edit, so binding it gives
// the operator nothing the tenant could not do itself.
func TestTheRunnerRoleGrantsNothingATenantLacks(t *testing.T) {
	all := roles(t)
	edit, runner := all["macrack-tenant-edit"], all["macrack-gitlab-runner"]
	if len(runner.Rules) == 0 {
		t.Fatal("no macrack-gitlab-runner ClusterRole")
	}
	for _, rule := range runner.Rules {
		for _, g := range rule.APIGroups {
			for _, res := range rule.Resources {
				for _, v := range rule.Verbs {
					if !grants(edit, g, res, v) {
						t.Errorf("macrack-gitlab-runner may %s %s/%s, which macrack-tenant-edit may not", v, g, res)
					}
				}
			}
		}
	}
}

func grants(role rbacv1.ClusterRole, group, resource, verb string) bool {
	for _, rule := range role.Rules {
		if contains(rule.APIGroups, group) && contains(rule.Resources, resource) && (contains(rule.Verbs, verb) || contains(rule.Verbs, "*")) {
			return true
		}
	}
	return false
}

// TestAnAgentRequestsCertificatesButDecidesNone: an agent creates and
// watches its serving certificate requests, and may neither change a
// request, approve, deny or sign one, nor act as any signer.
func TestAnAgentRequestsCertificatesButDecidesNone(t *testing.T) {
	agent, ok := roles(t)["macrack-agent"]
	if !ok {
		t.Fatal("no macrack-agent ClusterRole")
	}
	var creates bool
	for _, rule := range agent.Rules {
		if !contains(rule.APIGroups, "certificates.k8s.io") {
			continue
		}
		for _, res := range rule.Resources {
			if res != "certificatesigningrequests" {
				t.Errorf("an agent may %v certificates.k8s.io/%s", rule.Verbs, res)
				continue
			}
			if !slices.Equal(rule.Verbs, []string{"create", "get", "list", "watch"}) {
				t.Errorf("an agent may %v certificatesigningrequests; only create and read them", rule.Verbs)
			}
			creates = contains(rule.Verbs, "create")
		}
	}
	if !creates {
		t.Error("an agent may not request its kubelet serving certificate")
	}
}

// The webhook asks the API server whether a GitLabRunner's requester may
// get the token Secret it names (runner.secret): it creates
// SubjectAccessReviews, and does nothing else with authorization.
func TestTheOperatorOnlyCreatesAccessReviews(t *testing.T) {
	op := roles(t)["macrack-operator"]
	found := false
	for _, rule := range op.Rules {
		if !slices.Contains(rule.APIGroups, "authorization.k8s.io") {
			continue
		}
		if !slices.Equal(rule.Resources, []string{"subjectaccessreviews"}) || !slices.Equal(rule.Verbs, []string{"create"}) || len(rule.ResourceNames) > 0 {
			t.Errorf("authorization.k8s.io rule %+v, want create on subjectaccessreviews only", rule)
		}
		found = true
	}
	if !found {
		t.Error("the operator may not create SubjectAccessReviews: runner.secret would refuse every GitLabRunner")
	}
}

// grantsName is grants for a request on the object name ("" for a request
// that names none: list, watch, create): a rule with resourceNames allows
// only those names, and never a request without one.
func grantsName(role rbacv1.ClusterRole, group, resource, verb, name string) bool {
	for _, rule := range role.Rules {
		if !contains(rule.APIGroups, group) || !contains(rule.Resources, resource) || !(contains(rule.Verbs, verb) || contains(rule.Verbs, "*")) {
			continue
		}
		if len(rule.ResourceNames) == 0 || name != "" && contains(rule.ResourceNames, name) {
			return true
		}
	}
	return false
}

// request is one API request a tenant's guide makes, or must be refused.
type request struct{ group, resource, verb, name string }

// TestTenantEditGrantsWhatTheGuideDoesAndNoMore holds macrack-tenant-edit
// to docs/tenant.md: every request the guide makes as the tenant (which
// test/envtest/docs runs), and none of those it must refuse. The cluster
// binds the role in one namespace only (RoleBinding), so "other
// namespaces" is the binding's (test/envtest/docs tries them).
func TestTenantEditGrantsWhatTheGuideDoesAndNoMore(t *testing.T) {
	edit := roles(t)["macrack-tenant-edit"]
	for _, r := range []request{
		{"leasing.macrack.io", "macnodeleases", "create", ""},
		{"leasing.macrack.io", "macnodeleases", "delete", "build-mini"},
		{"compute.macrack.io", "macosinstances", "patch", "ci-runner-1"},
		{"workloads.macrack.io", "gitlabrunners", "create", ""},
		{"", "pods/exec", "create", "ci-runner-1"},
		{"", "pods/portforward", "create", "ci-runner-1"},
		{"", "pods/log", "get", "ci-runner-1"},
		{"", "events", "list", ""},
		{"events.k8s.io", "events", "watch", ""},
		// GitLabRunner, step 1 and 2.
		{"", "serviceaccounts", "create", ""},
		{"rbac.authorization.k8s.io", "rolebindings", "create", ""},
		{"rbac.authorization.k8s.io", "roles", "create", ""},
		{"", "secrets", "create", ""},
		{"", "secrets", "get", "gitlab-runner-token"},
	} {
		if !grantsName(edit, r.group, r.resource, r.verb, r.name) {
			t.Errorf("macrack-tenant-edit may not %s %s/%s %s, which docs/tenant.md does", r.verb, r.group, r.resource, r.name)
		}
	}
	for _, r := range []request{
		{"", "nodes", "list", ""},
		{"", "nodes/proxy", "create", "c02sim000001"},
		{"fleet.macrack.io", "macnodes", "list", ""},
		{"fleet.macrack.io", "macnodes", "get", "c02sim000001"},
		{"fleet.macrack.io", "macnodeclasses", "create", ""},
		{"leasing.macrack.io", "macnodeleases/status", "update", "build-mini"},
		{"compute.macrack.io", "macosinstances/status", "patch", "ci-runner-1"},
		{"", "pods", "create", ""},
		{"", "pods/eviction", "create", "ci-runner-1"},
		{"", "secrets", "list", ""},
		{"", "secrets", "get", "other-teams-token"},
		{"", "secrets", "update", "gitlab-runner-token"},
		{"", "serviceaccounts/token", "create", "macrack-gitlab-runner"},
		{"rbac.authorization.k8s.io", "roles", "escalate", "gitlab-runner-token"},
		{"rbac.authorization.k8s.io", "clusterroles", "bind", "admin"},
		{"rbac.authorization.k8s.io", "rolebindings", "delete", "macrack-tenant-edit"},
		{"rbac.authorization.k8s.io", "rolebindings", "update", "macrack-tenant-edit"},
		{"rbac.authorization.k8s.io", "clusterrolebindings", "create", ""},
		{"", "users", "impersonate", "admin"},
		{"", "serviceaccounts", "impersonate", "macrack-gitlab-runner"},
	} {
		if grantsName(edit, r.group, r.resource, r.verb, r.name) {
			t.Errorf("macrack-tenant-edit may %s %s/%s %s", r.verb, r.group, r.resource, r.name)
		}
	}
	// The control: the check sees a grant by name, and a wider one.
	wide := rbacv1.ClusterRole{Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get", "list"}}}}
	if !grantsName(wide, "", "secrets", "list", "") || !grantsName(wide, "", "secrets", "get", "other-teams-token") {
		t.Error("the check misses a role that reads every Secret")
	}
	named := rbacv1.ClusterRole{Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"secrets"}, ResourceNames: []string{"a"}, Verbs: []string{"get"}}}}
	if !grantsName(named, "", "secrets", "get", "a") || grantsName(named, "", "secrets", "get", "b") || grantsName(named, "", "secrets", "get", "") {
		t.Error("the check reads resourceNames wrong")
	}
}

// TestEveryoneReadsTheCatalogueAndOnlyIt: the one binding config/rbac
// makes to people is macrack-catalog-reader's, to every authenticated
// user, and it reads classes and images, which name no tenant.
func TestEveryoneReadsTheCatalogueAndOnlyIt(t *testing.T) {
	reader, ok := roles(t)["macrack-catalog-reader"]
	if !ok {
		t.Fatal("no macrack-catalog-reader ClusterRole")
	}
	for _, rule := range reader.Rules {
		for _, v := range rule.Verbs {
			if v != "get" && v != "list" && v != "watch" {
				t.Errorf("the catalogue role may %s", v)
			}
		}
		if !slices.Equal(rule.APIGroups, []string{"fleet.macrack.io"}) {
			t.Errorf("the catalogue role reaches %v", rule.APIGroups)
		}
		for _, res := range rule.Resources {
			if res != "macnodeclasses" && res != "macosimages" {
				t.Errorf("the catalogue role reads %s", res)
			}
		}
	}
	if !grantsName(reader, "fleet.macrack.io", "macnodeclasses", "list", "") || !grantsName(reader, "fleet.macrack.io", "macosimages", "watch", "") {
		t.Error("the catalogue role does not read the classes and the images")
	}
	var bindings []rbacv1.ClusterRoleBinding
	files, _ := filepath.Glob(filepath.Join("..", "..", "config", "rbac", "*.yaml"))
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, doc := range bytes.Split(data, []byte("\n---")) {
			var b rbacv1.ClusterRoleBinding
			if err := yaml.Unmarshal(doc, &b); err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			if b.Kind == "ClusterRoleBinding" {
				bindings = append(bindings, b)
			}
		}
	}
	people := 0
	for _, b := range bindings {
		for _, s := range b.Subjects {
			if s.Kind == rbacv1.ServiceAccountKind {
				continue
			}
			people++
			if b.RoleRef.Name != "macrack-catalog-reader" || s.Kind != rbacv1.GroupKind || s.Name != "system:authenticated" {
				t.Errorf("ClusterRoleBinding %s binds %s %s to %s", b.Name, s.Kind, s.Name, b.RoleRef.Name)
			}
		}
	}
	if people != 1 {
		t.Errorf("want one binding of people (the catalogue's), got %d", people)
	}
}

// TestTheEditRoleGainsNoRBAC: on clusters that aggregate, the built-in edit
// role gains macrack-aggregate-to-edit, which is macrack-tenant-edit
// without what edit leaves to admin (Roles and RoleBindings) or already
// holds (Secrets, ServiceAccounts, Events). A label that put
// macrack-tenant-edit itself into edit would let every editor of every
// namespace delegate.
func TestTheEditRoleGainsNoRBAC(t *testing.T) {
	all := roles(t)
	agg, edit := all["macrack-aggregate-to-edit"], all["macrack-tenant-edit"]
	if agg.Labels["rbac.authorization.k8s.io/aggregate-to-edit"] != "true" {
		t.Fatal("macrack-aggregate-to-edit does not aggregate to edit")
	}
	for name, r := range all {
		if r.Labels["rbac.authorization.k8s.io/aggregate-to-edit"] == "true" && name != "macrack-aggregate-to-edit" {
			t.Errorf("%s aggregates to edit", name)
		}
	}
	leftToEdit := map[string]bool{"events": true, "serviceaccounts": true, "secrets": true}
	for _, rule := range edit.Rules {
		for _, g := range rule.APIGroups {
			for _, res := range rule.Resources {
				for _, v := range rule.Verbs {
					in := grants(agg, g, res, v)
					switch {
					case g == "rbac.authorization.k8s.io" && in:
						t.Errorf("edit would gain %s %s", v, res)
					case g != "rbac.authorization.k8s.io" && !leftToEdit[res] && !in:
						t.Errorf("edit would lack %s %s/%s, which macrack-tenant-edit has", v, g, res)
					}
				}
			}
		}
	}
	for _, rule := range agg.Rules {
		for _, g := range rule.APIGroups {
			for _, res := range rule.Resources {
				for _, v := range rule.Verbs {
					if !grants(edit, g, res, v) {
						t.Errorf("edit would gain %s %s/%s, which macrack-tenant-edit lacks", v, g, res)
					}
				}
			}
		}
	}
}

// TestTheOperatorBindsOnlyTheAgentsRoles: the operator writes the agents'
// group bindings, so it may create bindings; the API server lets it bind
// only roles it holds or may `bind`, and it may `bind` the four agents'
// roles only, and never escalate or write a role.
func TestTheOperatorBindsOnlyTheAgentsRoles(t *testing.T) {
	agents := []string{"macrack-agent", "macrack-agent-events", "macrack-agent-heartbeat", "macrack-agent-token"}
	bind := false
	for _, rule := range roles(t)["macrack-operator"].Rules {
		if !contains(rule.APIGroups, "rbac.authorization.k8s.io") {
			continue
		}
		for _, res := range rule.Resources {
			if res != "clusterroles" && res != "roles" {
				continue
			}
			if len(rule.Verbs) != 1 || rule.Verbs[0] != "bind" {
				t.Errorf("the operator may %v %s; only bind", rule.Verbs, res)
			}
			got := slices.Clone(rule.ResourceNames)
			slices.Sort(got)
			if res != "clusterroles" || !slices.Equal(got, agents) {
				t.Errorf("the operator may bind %s %v; only the ClusterRoles %v", res, rule.ResourceNames, agents)
			}
			bind = true
		}
	}
	if !bind {
		t.Error("the operator may bind no agents' role: the API server would refuse its group bindings")
	}
}
