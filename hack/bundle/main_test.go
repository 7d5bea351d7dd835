package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/yaml"
)

const root = "../.."

func testOptions() options {
	return options{root: root, version: "0.1.0", image: "ghcr.io/boualleiguie/macrack-operator:v0.1.0", channels: "candidate", defaultChannel: "candidate"}
}

// generated builds the bundle from the tree's config/ and decodes its CSV.
func generated(t *testing.T) (*inputs, *bundle, clusterServiceVersion) {
	t.Helper()
	in, err := load(root)
	if err != nil {
		t.Fatal(err)
	}
	b, err := build(in, testOptions())
	if err != nil {
		t.Fatal(err)
	}
	raw, ok := b.files["manifests/macrack-operator.v0.1.0.clusterserviceversion.yaml"]
	if !ok {
		t.Fatalf("no CSV among %v", keysOf(b.files))
	}
	var csv clusterServiceVersion
	if err := yaml.UnmarshalStrict(raw, &csv); err != nil {
		t.Fatal(err)
	}
	return in, b, csv
}

func TestTheBundlesRBACIsExactlyConfigRBACsOperatorRoles(t *testing.T) {
	in, b, csv := generated(t)
	var clusterRole []rbacv1.PolicyRule
	var role []rbacv1.PolicyRule
	for _, r := range in.clusterRoles {
		if r.Name == "macrack-operator" {
			clusterRole = r.Rules
		}
	}
	for _, r := range in.roles {
		if r.Name == "macrack-operator" {
			role = r.Rules
		}
	}
	if len(clusterRole) == 0 {
		t.Fatal("config/rbac has no macrack-operator ClusterRole")
	}
	s := csv.Spec.Install.Spec
	if len(s.ClusterPermissions) != 1 || s.ClusterPermissions[0].ServiceAccountName != "macrack-operator" ||
		!reflect.DeepEqual(s.ClusterPermissions[0].Rules, clusterRole) {
		t.Errorf("clusterPermissions are not the macrack-operator ClusterRole's rules: %+v", s.ClusterPermissions)
	}
	if len(role) > 0 && (len(s.Permissions) != 1 || !reflect.DeepEqual(s.Permissions[0].Rules, role)) {
		t.Errorf("permissions are not the macrack-operator Role's rules: %+v", s.Permissions)
	}
	// The operator's roles are OLM's to create; the others ship as written.
	for p := range b.files {
		if strings.Contains(p, "macrack-operator_") || strings.Contains(p, "serviceaccount") {
			t.Errorf("%s: the operator's own roles and ServiceAccount are OLM's to create", p)
		}
	}
	for _, r := range in.clusterRoles {
		p := "manifests/" + r.Name + "_rbac.authorization.k8s.io_v1_clusterrole.yaml"
		if _, shipped := b.files[p]; shipped == (r.Name == "macrack-operator") {
			t.Errorf("ClusterRole %s: shipped %v", r.Name, shipped)
		}
	}
}

func TestEveryCRDAndWebhookIsInTheCSV(t *testing.T) {
	in, b, csv := generated(t)
	owned := map[string]crdDescription{}
	for _, o := range csv.Spec.CustomResourceDefinitions.Owned {
		owned[o.Name] = o
	}
	bases, _ := filepath.Glob(filepath.Join(root, "config", "crd", "bases", "*.yaml"))
	if len(bases) != len(in.crds) || len(owned) != len(in.crds) {
		t.Errorf("%d CRD files, %d loaded, %d owned", len(bases), len(in.crds), len(owned))
	}
	for _, base := range bases {
		raw, _ := os.ReadFile(base)
		if !bytes.Equal(b.files["manifests/"+filepath.Base(base)], raw) {
			t.Errorf("%s is not in the bundle as it is", base)
		}
	}
	for _, f := range in.crds {
		o, ok := owned[f.crd.Name]
		if !ok {
			t.Errorf("CRD %s is not owned", f.crd.Name)
			continue
		}
		schema := f.crd.Spec.Versions[0].Schema.OpenAPIV3Schema
		if o.Kind != f.crd.Spec.Names.Kind || o.Description != prose(schema.Description) || o.DisplayName == "" {
			t.Errorf("%s: %+v", f.crd.Name, o)
		}
		if len(o.SpecDescriptors) != len(schema.Properties["spec"].Properties) || len(o.StatusDescriptors) != len(schema.Properties["status"].Properties) {
			t.Errorf("%s: %d spec and %d status descriptors for %d and %d fields", f.crd.Name, len(o.SpecDescriptors), len(o.StatusDescriptors),
				len(schema.Properties["spec"].Properties), len(schema.Properties["status"].Properties))
		}
		for _, d := range o.StatusDescriptors {
			if d.Path == "conditions" && (len(d.XDescriptors) != 1 || d.XDescriptors[0] != statusConditions) {
				t.Errorf("%s: conditions described as %v", f.crd.Name, d.XDescriptors)
			}
		}
	}
	n := 0
	for _, c := range in.mutating {
		n += len(c.Webhooks)
	}
	for _, c := range in.validating {
		n += len(c.Webhooks)
	}
	if n == 0 || len(csv.Spec.WebhookDefinitions) != n {
		t.Errorf("%d webhooks in config/webhook, %d in the CSV", n, len(csv.Spec.WebhookDefinitions))
	}
	for _, w := range csv.Spec.WebhookDefinitions {
		if w.ContainerPort != 9443 || w.DeploymentName != "macrack-operator" || w.WebhookPath == nil || len(w.Rules) == 0 ||
			(w.Type != "ValidatingAdmissionWebhook" && w.Type != "MutatingAdmissionWebhook") {
			t.Errorf("webhook %+v", w)
		}
	}
}

func TestTheCSVDeploysConfigManagersDeploymentWithTheImage(t *testing.T) {
	in, _, csv := generated(t)
	ds := csv.Spec.Install.Spec.Deployments
	if csv.Spec.Install.Strategy != "deployment" || len(ds) != 1 || ds[0].Name != in.deployment.Name {
		t.Fatalf("install %+v", csv.Spec.Install)
	}
	spec := ds[0].Spec
	c := spec.Template.Spec.Containers[0]
	if spec.Replicas == nil || *spec.Replicas != 2 || !contains(c.Args, "--leader-elect") || c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() {
		t.Errorf("the Deployment lost its replicas, --leader-elect or requests: %+v", spec)
	}
	if c.Image != testOptions().image || csv.Metadata.Annotations["containerImage"] != c.Image {
		t.Errorf("image %s, containerImage %s, want %s", c.Image, csv.Metadata.Annotations["containerImage"], testOptions().image)
	}
	want := in.deployment.Spec.DeepCopy()
	want.Template.Spec.Containers[0].Image = c.Image
	if !reflect.DeepEqual(&spec, want) {
		t.Errorf("the CSV's Deployment differs from config/manager's beyond the image")
	}
}

// config/manager/manager.yaml (the kustomize install) and the committed
// bundle name one image: the release's tag.
func TestTheManagerAndTheCommittedBundleNameOneImage(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(root, "bundle", "manifests", "macrack-operator.v0.1.0.clusterserviceversion.yaml"))
	if err != nil {
		t.Fatalf("the committed bundle: %v (run make bundle)", err)
	}
	var csv clusterServiceVersion
	if err := yaml.Unmarshal(raw, &csv); err != nil {
		t.Fatal(err)
	}
	var dep appsv1.Deployment
	err = eachObject(filepath.Join(root, "config", "manager", "manager.yaml"), func(kind string, doc []byte) error {
		if kind == "Deployment" {
			return yaml.Unmarshal(doc, &dep)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	img := dep.Spec.Template.Spec.Containers[0].Image
	if img != csv.Metadata.Annotations["containerImage"] || strings.HasSuffix(img, ":latest") {
		t.Errorf("config/manager deploys %s, the bundle %s", img, csv.Metadata.Annotations["containerImage"])
	}
}

func TestAlmExamplesShowTheDedicatedChassisModel(t *testing.T) {
	_, _, csv := generated(t)
	var examples []struct {
		Kind string `json:"kind"`
	}
	if err := json.Unmarshal([]byte(csv.Metadata.Annotations["alm-examples"]), &examples); err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, e := range examples {
		kinds = append(kinds, e.Kind)
	}
	got := strings.Join(kinds, ",")
	for _, k := range []string{"MacNodeClass", "MacNodeLease", "MacOSInstance"} {
		if !strings.Contains(got, k) {
			t.Errorf("alm-examples %s: no %s", got, k)
		}
	}
	if strings.Index(got, "MacNodeClass") > strings.Index(got, "MacNodeLease") || strings.Index(got, "MacNodeLease") > strings.Index(got, "MacOSInstance") {
		t.Errorf("alm-examples in the order %s: want a class, then a lease, then an instance", got)
	}
}

func TestTheCSVSaysWhatOLMCannotCarry(t *testing.T) {
	_, _, csv := generated(t)
	d := csv.Spec.Description
	for _, want := range []string{"at least 24 hours", "At most two macOS VMs per chassis", "no shared VM pool", "cannot carry ValidatingAdmissionPolicies", "no KubeVirt, no CDI"} {
		if !strings.Contains(d, want) {
			t.Errorf("the description does not say %q", want)
		}
	}
	modes := map[string]bool{}
	for _, m := range csv.Spec.InstallModes {
		modes[m.Type] = m.Supported
	}
	if !reflect.DeepEqual(modes, map[string]bool{"AllNamespaces": true, "OwnNamespace": false, "SingleNamespace": false, "MultiNamespace": false}) {
		t.Errorf("install modes %v", modes)
	}
	for _, gvk := range csv.Spec.NativeAPIs {
		if strings.Contains(gvk.Group, "kubevirt") || strings.Contains(gvk.Group, "cdi") {
			t.Errorf("a required API beyond Kubernetes': %v", gvk)
		}
	}
}

func TestTheBundleIsTheSameOnEveryRun(t *testing.T) {
	_, a, _ := generated(t)
	_, b, _ := generated(t)
	if !reflect.DeepEqual(a.files, b.files) {
		t.Error("two runs wrote two bundles")
	}
}

func TestABindingTheBundleCannotCarryIsRefused(t *testing.T) {
	in, err := load(root)
	if err != nil {
		t.Fatal(err)
	}
	in.clusterRoleBindings = append(in.clusterRoleBindings, rbacv1.ClusterRoleBinding{
		RoleRef:  rbacv1.RoleRef{Kind: "ClusterRole", Name: "macrack-agent"},
		Subjects: []rbacv1.Subject{{Kind: "Group", Name: "system:serviceaccounts:macrack-agents"}},
	})
	if _, err := build(in, testOptions()); err == nil || !strings.Contains(err.Error(), "binds Group") {
		t.Errorf("a binding to the agents' group: %v", err)
	}
}

func TestDisplayNames(t *testing.T) {
	for in, want := range map[string]string{
		"nodeClassName":   "Node Class Name",
		"vmCapacity":      "VM Capacity",
		"plainHTTP":       "Plain HTTP",
		"cpu":             "CPU",
		"networkGbps":     "Network Gbps",
		"earliestRelease": "Earliest Release",
	} {
		if got := fieldDisplayName(in); got != want {
			t.Errorf("fieldDisplayName(%q) = %q, want %q", in, got, want)
		}
	}
	for in, want := range map[string]string{"MacOSInstance": "macOS Instance", "MacNodeLease": "Mac Node Lease", "MacOSImage": "macOS Image"} {
		if got := kindDisplayName(in); got != want {
			t.Errorf("kindDisplayName(%q) = %q, want %q", in, got, want)
		}
	}
}

func keysOf(m map[string][]byte) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// The catalogue's one binding, every authenticated user to a role that only
// reads, ships as it is; the same group bound to a role that writes does
// not (TestABindingTheBundleCannotCarryIsRefused).
func TestTheCatalogueBindingShipsAsItIs(t *testing.T) {
	_, b, _ := generated(t)
	raw, ok := b.files["manifests/macrack-catalog-reader_rbac.authorization.k8s.io_v1_clusterrolebinding.yaml"]
	if !ok {
		t.Fatalf("the bundle has no macrack-catalog-reader ClusterRoleBinding: %v", keysOf(b.files))
	}
	var crb rbacv1.ClusterRoleBinding
	if err := yaml.Unmarshal(raw, &crb); err != nil {
		t.Fatal(err)
	}
	if crb.RoleRef.Name != "macrack-catalog-reader" || len(crb.Subjects) != 1 ||
		crb.Subjects[0].Kind != rbacv1.GroupKind || crb.Subjects[0].Name != "system:authenticated" {
		t.Fatalf("binding %+v", crb)
	}
	if _, ok := b.files["manifests/macrack-catalog-reader_rbac.authorization.k8s.io_v1_clusterrole.yaml"]; !ok {
		t.Fatal("the bundle binds macrack-catalog-reader but does not ship it")
	}
}
