package main

import (
	"bytes"
	_ "embed"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"
)

const (
	packageName = "macrack-operator"
	// minKubeVersion: ValidatingAdmissionPolicy v1 is 1.30's, and the
	// MacOSInstance CRD's selectable field status.nodeName, which every host
	// agent's watch selects on, is on by default from 1.31 (beta; GA in 1.32).
	minKubeVersion = "1.31.0"
	repository     = "https://github.com/boualleiguie/macrack-operator"
)

//go:embed description.md
var longDescription string

//go:embed icon.svg
var iconSVG []byte

// bundle is the files of the bundle, by path relative to its root.
type bundle struct {
	files map[string][]byte
}

func build(in *inputs, o options) (*bundle, error) {
	b := &bundle{files: map[string][]byte{}}
	csvName := packageName + ".v" + o.version

	dep := in.deployment.DeepCopy()
	pod := &dep.Spec.Template.Spec
	if len(pod.Containers) != 1 {
		return nil, fmt.Errorf("config/manager's Deployment has %d containers, want one", len(pod.Containers))
	}
	pod.Containers[0].Image = o.image
	sa := pod.ServiceAccountName
	if sa == "" {
		return nil, errors.New("config/manager's Deployment names no serviceAccountName")
	}
	webhookPort, err := containerPort(pod.Containers[0].Ports, "webhook")
	if err != nil {
		return nil, err
	}

	clusterPerms, perms, shipped, shippedBindings, err := operatorRBAC(in, sa, dep.Namespace)
	if err != nil {
		return nil, err
	}
	webhooks, err := webhookDefinitions(in, dep.Name, webhookPort)
	if err != nil {
		return nil, err
	}
	owned, groups, err := ownedCRDs(in)
	if err != nil {
		return nil, err
	}
	examples, err := almExamples(in)
	if err != nil {
		return nil, err
	}
	native, err := nativeAPIs(append(append([]rbacv1.PolicyRule{}, clusterPerms...), perms...), groups)
	if err != nil {
		return nil, err
	}

	strategy := deploymentStrategy{
		Deployments: []deploymentSpec{{Name: dep.Name, Label: dep.Labels, Spec: dep.Spec}},
	}
	if len(clusterPerms) > 0 {
		strategy.ClusterPermissions = []permissions{{ServiceAccountName: sa, Rules: clusterPerms}}
	}
	if len(perms) > 0 {
		strategy.Permissions = []permissions{{ServiceAccountName: sa, Rules: perms}}
	}
	csv := clusterServiceVersion{
		APIVersion: "operators.coreos.com/v1alpha1",
		Kind:       "ClusterServiceVersion",
		Metadata: csvMetadata{
			Name: csvName,
			Annotations: map[string]string{
				"alm-examples":   examples,
				"capabilities":   "Basic Install",
				"categories":     "Developer Tools,Integration & Delivery",
				"containerImage": o.image,
				"description":    "Rents whole Apple Mac minis to tenants: one dedicated chassis per lease for at least 24 hours, at most two macOS VMs on it, the macOS licence enforced at admission.",
				"repository":     repository,
				"support":        "MacRack",
				// The flags' defaults (the operator's identity, the params
				// ConfigMap) name this namespace; the Deployment passes its
				// own namespace to them, so another works too.
				"operatorframework.io/suggested-namespace":      dep.Namespace,
				"operators.operatorframework.io/builder":        "macrack-operator/hack/bundle",
				"operators.operatorframework.io/project_layout": "go.kubebuilder.io/v4",
			},
		},
		Spec: csvSpec{
			DisplayName:    "MacRack",
			Description:    strings.TrimSpace(longDescription) + "\n",
			Version:        o.version,
			Maturity:       "alpha",
			MinKubeVersion: minKubeVersion,
			Keywords:       []string{"mac", "macos", "mac-mini", "apple-silicon", "xcode", "ci", "bare-metal", "leasing", "virtual-machines"},
			Maintainers:    []maintainer{{Name: "boualleiguie", Email: "boualleiguie@users.noreply.github.com"}},
			Provider:       appLink{Name: "MacRack", URL: repository},
			Links: []appLink{
				{Name: "Source", URL: repository},
				{Name: "Platform operators' guide", URL: repository + "/blob/main/docs/platform-operator.md"},
				{Name: "Tenants' guide", URL: repository + "/blob/main/docs/tenant.md"},
				{Name: "Compliance reviewers' guide", URL: repository + "/blob/main/docs/compliance.md"},
			},
			Icon: []icon{{Data: base64.StdEncoding.EncodeToString(iconSVG), MediaType: "image/svg+xml"}},
			// Cluster-wide by nature: a chassis, its Node and its class are
			// cluster-scoped, and tenants lease from every namespace.
			InstallModes: []installMode{
				{Type: "OwnNamespace", Supported: false},
				{Type: "SingleNamespace", Supported: false},
				{Type: "MultiNamespace", Supported: false},
				{Type: "AllNamespaces", Supported: true},
			},
			CustomResourceDefinitions: customResourceDefinitions{Owned: owned},
			NativeAPIs:                native,
			WebhookDefinitions:        webhooks,
			Install:                   namedInstallStrategy{Strategy: "deployment", Spec: strategy},
		},
	}
	if err := b.addYAML("manifests/"+csvName+".clusterserviceversion.yaml", csv); err != nil {
		return nil, err
	}
	for _, c := range in.crds {
		b.files["manifests/"+c.name] = c.raw
	}
	for _, r := range shipped {
		b.files[fmt.Sprintf("manifests/%s_rbac.authorization.k8s.io_v1_clusterrole.yaml", r.Name)] = withTrailingNewline(r.raw)
	}
	// OLM's catalog operator creates a bundle's ClusterRoleBindings as they
	// are (InstallPlan steps of kind ClusterRoleBinding).
	for _, crb := range shippedBindings {
		raw := in.bindingDocs[crb.Name]
		if raw == nil {
			return nil, fmt.Errorf("ClusterRoleBinding %s: no document", crb.Name)
		}
		b.files[fmt.Sprintf("manifests/%s_rbac.authorization.k8s.io_v1_clusterrolebinding.yaml", crb.Name)] = withTrailingNewline(raw)
	}

	channels := strings.Split(o.channels, ",")
	if !contains(channels, o.defaultChannel) {
		return nil, fmt.Errorf("the default channel %q is not one of --channels %q", o.defaultChannel, o.channels)
	}
	annotations := map[string]map[string]string{"annotations": {
		"operators.operatorframework.io.bundle.mediatype.v1":       "registry+v1",
		"operators.operatorframework.io.bundle.manifests.v1":       "manifests/",
		"operators.operatorframework.io.bundle.metadata.v1":        "metadata/",
		"operators.operatorframework.io.bundle.package.v1":         packageName,
		"operators.operatorframework.io.bundle.channels.v1":        o.channels,
		"operators.operatorframework.io.bundle.channel.default.v1": o.defaultChannel,
	}}
	if err := b.addYAML("metadata/annotations.yaml", annotations); err != nil {
		return nil, err
	}
	return b, nil
}

func (b *bundle) addYAML(path string, v any) error {
	out, err := yaml.Marshal(v)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	b.files[path] = out
	return nil
}

// write replaces dir's manifests/ and metadata/ with the bundle's files.
func (b *bundle) write(dir string) error {
	for _, sub := range []string{"manifests", "metadata"} {
		if err := os.RemoveAll(filepath.Join(dir, sub)); err != nil {
			return err
		}
		if err := os.MkdirAll(filepath.Join(dir, sub), 0o755); err != nil {
			return err
		}
	}
	for p, data := range b.files {
		if err := os.WriteFile(filepath.Join(dir, filepath.FromSlash(p)), data, 0o644); err != nil {
			return err
		}
	}
	return nil
}

func containerPort(ports []corev1.ContainerPort, name string) (int32, error) {
	for _, p := range ports {
		if p.Name == name {
			return p.ContainerPort, nil
		}
	}
	return 0, fmt.Errorf("config/manager's container has no port named %q", name)
}

// operatorRBAC splits config/rbac into the CSV's clusterPermissions and
// permissions (the rules of the roles bound to the operator's ServiceAccount)
// and the ClusterRoles the bundle ships as they are (bound by nobody here: by
// tenants' administrators, or by `macrackctl node enroll` for each agent),
// with the one kind of ClusterRoleBinding it ships as it is: groups bound to
// a shipped ClusterRole that only reads (the catalogue every tenant reads).
// Anything the bundle cannot express is an error rather than a silent drop.
func operatorRBAC(in *inputs, sa, namespace string) (cluster, namespaced []rbacv1.PolicyRule, shipped []clusterRole, shippedBindings []rbacv1.ClusterRoleBinding, err error) {
	isOperator := func(subjects []rbacv1.Subject) (bool, error) {
		op := false
		for _, s := range subjects {
			if s.Kind == rbacv1.ServiceAccountKind && s.Name == sa && s.Namespace == namespace {
				op = true
			} else {
				return false, fmt.Errorf("binds %s %s/%s: a bundle binds the operator's ServiceAccount %s/%s only", s.Kind, s.Namespace, s.Name, namespace, sa)
			}
		}
		return op, nil
	}
	clusterRoles := map[string]clusterRole{}
	for _, r := range in.clusterRoles {
		clusterRoles[r.Name] = r
	}
	roles := map[string]rbacv1.Role{}
	for _, r := range in.roles {
		roles[r.Namespace+"/"+r.Name] = r
	}
	usedCluster, usedRoles := map[string]bool{}, map[string]bool{}
	for _, crb := range in.clusterRoleBindings {
		if r, ok := clusterRoles[crb.RoleRef.Name]; ok && crb.RoleRef.Kind == "ClusterRole" && groupsOnly(crb.Subjects) && readOnly(r.Rules) {
			shippedBindings = append(shippedBindings, crb)
			continue
		}
		op, err := isOperator(crb.Subjects)
		if err != nil || !op {
			return nil, nil, nil, nil, fmt.Errorf("config/rbac ClusterRoleBinding %s: %w", crb.Name, orNoSubject(err))
		}
		r, ok := clusterRoles[crb.RoleRef.Name]
		if crb.RoleRef.Kind != "ClusterRole" || !ok {
			return nil, nil, nil, nil, fmt.Errorf("config/rbac ClusterRoleBinding %s: its ClusterRole %s is not in config/rbac", crb.Name, crb.RoleRef.Name)
		}
		usedCluster[r.Name] = true
		cluster = append(cluster, r.Rules...)
	}
	for _, rb := range in.roleBindings {
		op, err := isOperator(rb.Subjects)
		if err != nil || !op {
			return nil, nil, nil, nil, fmt.Errorf("config/rbac RoleBinding %s/%s: %w", rb.Namespace, rb.Name, orNoSubject(err))
		}
		if rb.Namespace != namespace {
			return nil, nil, nil, nil, fmt.Errorf("config/rbac RoleBinding %s/%s: outside the operator's namespace %s, which OLM cannot grant", rb.Namespace, rb.Name, namespace)
		}
		switch rb.RoleRef.Kind {
		case "Role":
			r, ok := roles[rb.Namespace+"/"+rb.RoleRef.Name]
			if !ok {
				return nil, nil, nil, nil, fmt.Errorf("config/rbac RoleBinding %s/%s: its Role %s is not in config/rbac", rb.Namespace, rb.Name, rb.RoleRef.Name)
			}
			usedRoles[rb.Namespace+"/"+r.Name] = true
			namespaced = append(namespaced, r.Rules...)
		case "ClusterRole":
			r, ok := clusterRoles[rb.RoleRef.Name]
			if !ok {
				return nil, nil, nil, nil, fmt.Errorf("config/rbac RoleBinding %s/%s: its ClusterRole %s is not in config/rbac", rb.Namespace, rb.Name, rb.RoleRef.Name)
			}
			usedCluster[r.Name] = true
			namespaced = append(namespaced, r.Rules...)
		}
	}
	for key := range roles {
		if !usedRoles[key] {
			return nil, nil, nil, nil, fmt.Errorf("config/rbac Role %s is bound to nobody; a bundle cannot ship it", key)
		}
	}
	for _, r := range in.clusterRoles {
		if !usedCluster[r.Name] {
			shipped = append(shipped, r)
		}
	}
	for _, s := range in.serviceAccounts {
		if s.Name != sa || s.Namespace != namespace {
			return nil, nil, nil, nil, fmt.Errorf("config/rbac ServiceAccount %s/%s: OLM creates the operator's %s only", s.Namespace, s.Name, sa)
		}
	}
	if len(cluster) == 0 {
		return nil, nil, nil, nil, fmt.Errorf("no ClusterRole in config/rbac is bound to %s/%s", namespace, sa)
	}
	return cluster, namespaced, shipped, shippedBindings, nil
}

func orNoSubject(err error) error {
	if err != nil {
		return err
	}
	return errors.New("no subject")
}

// webhookDefinitions turns each webhook of config/webhook into the CSV's
// form. OLM adds the Service, the CA bundle and the namespace selector of
// the OperatorGroup; a field it cannot carry is an error.
func webhookDefinitions(in *inputs, deployment string, port int32) ([]webhookDescription, error) {
	var out []webhookDescription
	common := func(name string, svc *admissionregistrationv1.ServiceReference, ns *metav1.LabelSelector, mc []admissionregistrationv1.MatchCondition) (*string, error) {
		switch {
		case svc == nil:
			return nil, fmt.Errorf("webhook %s: no service in its clientConfig; a bundle's webhooks are served by the operator's Deployment", name)
		case svc.Path == nil:
			return nil, fmt.Errorf("webhook %s: no service path", name)
		case ns != nil && (len(ns.MatchLabels) > 0 || len(ns.MatchExpressions) > 0):
			return nil, fmt.Errorf("webhook %s: a namespaceSelector, which OLM sets from the OperatorGroup", name)
		case len(mc) > 0:
			return nil, fmt.Errorf("webhook %s: matchConditions, which a CSV cannot carry", name)
		}
		return ptr.To(*svc.Path), nil
	}
	for _, cfg := range in.mutating {
		for _, w := range cfg.Webhooks {
			p, err := common(w.Name, w.ClientConfig.Service, w.NamespaceSelector, w.MatchConditions)
			if err != nil {
				return nil, err
			}
			out = append(out, webhookDescription{
				GenerateName: w.Name, Type: "MutatingAdmissionWebhook", DeploymentName: deployment, ContainerPort: port,
				AdmissionReviewVersions: w.AdmissionReviewVersions, Rules: w.Rules, FailurePolicy: w.FailurePolicy,
				MatchPolicy: orDefault(w.MatchPolicy, admissionregistrationv1.Equivalent), ObjectSelector: w.ObjectSelector,
				SideEffects: w.SideEffects, TimeoutSeconds: orDefault(w.TimeoutSeconds, 10), ReinvocationPolicy: w.ReinvocationPolicy,
				WebhookPath: p,
			})
		}
	}
	for _, cfg := range in.validating {
		for _, w := range cfg.Webhooks {
			p, err := common(w.Name, w.ClientConfig.Service, w.NamespaceSelector, w.MatchConditions)
			if err != nil {
				return nil, err
			}
			out = append(out, webhookDescription{
				GenerateName: w.Name, Type: "ValidatingAdmissionWebhook", DeploymentName: deployment, ContainerPort: port,
				AdmissionReviewVersions: w.AdmissionReviewVersions, Rules: w.Rules, FailurePolicy: w.FailurePolicy,
				MatchPolicy: orDefault(w.MatchPolicy, admissionregistrationv1.Equivalent), ObjectSelector: w.ObjectSelector,
				SideEffects: w.SideEffects, TimeoutSeconds: orDefault(w.TimeoutSeconds, 10),
				WebhookPath: p,
			})
		}
	}
	for _, w := range out {
		if w.FailurePolicy == nil || w.SideEffects == nil || len(w.AdmissionReviewVersions) == 0 {
			return nil, fmt.Errorf("webhook %s: failurePolicy, sideEffects and admissionReviewVersions must be set", w.GenerateName)
		}
	}
	return out, nil
}

// orDefault is *p, or the API server's default when p is nil: the CSV says
// what the webhook gets.
func orDefault[T any](p *T, def T) *T {
	if p != nil {
		return p
	}
	return &def
}

// ownedCRDs describes every CRD and version the bundle carries, and returns
// the API groups they make up.
func ownedCRDs(in *inputs) ([]crdDescription, map[string]bool, error) {
	var out []crdDescription
	groups := map[string]bool{}
	for _, f := range in.crds {
		crd := f.crd
		groups[crd.Spec.Group] = true
		for _, v := range crd.Spec.Versions {
			if !v.Served {
				continue
			}
			if v.Schema == nil || v.Schema.OpenAPIV3Schema == nil {
				return nil, nil, fmt.Errorf("%s %s: no schema", crd.Name, v.Name)
			}
			s := v.Schema.OpenAPIV3Schema
			desc := prose(s.Description)
			if desc == "" {
				return nil, nil, fmt.Errorf("%s %s: the schema has no description; document the type in api/", crd.Name, v.Name)
			}
			d := crdDescription{
				Name: crd.Name, Version: v.Name, Kind: crd.Spec.Names.Kind,
				DisplayName: kindDisplayName(crd.Spec.Names.Kind), Description: desc,
			}
			if spec, ok := s.Properties["spec"]; ok {
				d.SpecDescriptors = specDescriptors(spec)
			}
			if status, ok := s.Properties["status"]; ok {
				d.StatusDescriptors = statusDescriptors(status)
			}
			out = append(out, d)
		}
	}
	return out, groups, nil
}

// almExamples is the samples as a JSON array, in the CRDs' order (the
// order of config/crd/kustomization.yaml: a class, a chassis, a golden, a
// lease, an instance), so that a reader sees the dedicated-chassis model.
// Every owned kind has a sample, and every sample is of an owned kind.
func almExamples(in *inputs) (string, error) {
	rank := map[string]int{}
	for i, f := range in.crds {
		for _, v := range f.crd.Spec.Versions {
			if v.Served {
				rank[f.crd.Spec.Group+"/"+v.Name+"/"+f.crd.Spec.Names.Kind] = i
			}
		}
	}
	type ex struct {
		rank int
		path string
		obj  map[string]any
	}
	var exs []ex
	seen := map[string]bool{}
	for _, s := range in.samples {
		api, _ := s.obj["apiVersion"].(string)
		kind, _ := s.obj["kind"].(string)
		key := api + "/" + kind
		r, ok := rank[key]
		if !ok {
			return "", fmt.Errorf("%s: a %s %s, which the bundle does not own", s.path, api, kind)
		}
		seen[key] = true
		exs = append(exs, ex{r, s.path, s.obj})
	}
	var missing []string
	for key := range rank {
		if !seen[key] {
			missing = append(missing, key)
		}
	}
	if len(missing) > 0 {
		sort.Strings(missing)
		return "", fmt.Errorf("config/samples has no sample of %s; the CSV's alm-examples needs one of every kind", strings.Join(missing, ", "))
	}
	sort.SliceStable(exs, func(i, j int) bool {
		if exs[i].rank != exs[j].rank {
			return exs[i].rank < exs[j].rank
		}
		return exs[i].path < exs[j].path
	})
	objs := make([]map[string]any, len(exs))
	for i, e := range exs {
		objs[i] = e.obj
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(objs); err != nil {
		return "", err
	}
	return strings.TrimSpace(buf.String()), nil
}

// nativeKinds maps the Kubernetes resources the operator's roles name to the
// kinds OLM must find served before it installs (spec.nativeAPIs). A rule on
// a resource missing here fails `make bundle`: add it.
var nativeKinds = map[string]metav1.GroupVersionKind{
	"/configmaps":                {Group: "", Version: "v1", Kind: "ConfigMap"},
	"/events":                    {Group: "", Version: "v1", Kind: "Event"},
	"/nodes":                     {Group: "", Version: "v1", Kind: "Node"},
	"/pods":                      {Group: "", Version: "v1", Kind: "Pod"},
	"/secrets":                   {Group: "", Version: "v1", Kind: "Secret"},
	"/serviceaccounts":           {Group: "", Version: "v1", Kind: "ServiceAccount"},
	"events.k8s.io/events":       {Group: "events.k8s.io", Version: "v1", Kind: "Event"},
	"coordination.k8s.io/leases": {Group: "coordination.k8s.io", Version: "v1", Kind: "Lease"},
	"admissionregistration.k8s.io/validatingadmissionpolicies":       {Group: "admissionregistration.k8s.io", Version: "v1", Kind: "ValidatingAdmissionPolicy"},
	"admissionregistration.k8s.io/validatingadmissionpolicybindings": {Group: "admissionregistration.k8s.io", Version: "v1", Kind: "ValidatingAdmissionPolicyBinding"},
	"flowcontrol.apiserver.k8s.io/flowschemas":                       {Group: "flowcontrol.apiserver.k8s.io", Version: "v1", Kind: "FlowSchema"},
	"flowcontrol.apiserver.k8s.io/prioritylevelconfigurations":       {Group: "flowcontrol.apiserver.k8s.io", Version: "v1", Kind: "PriorityLevelConfiguration"},
	"certificates.k8s.io/certificatesigningrequests":                 {Group: "certificates.k8s.io", Version: "v1", Kind: "CertificateSigningRequest"},
	// signers is no served resource, only what approve and sign are
	// authorized on: it needs the CertificateSigningRequest API.
	"certificates.k8s.io/signers":               {Group: "certificates.k8s.io", Version: "v1", Kind: "CertificateSigningRequest"},
	"authorization.k8s.io/subjectaccessreviews": {Group: "authorization.k8s.io", Version: "v1", Kind: "SubjectAccessReview"},
	// The agents' group bindings (admission.AgentRoleBinder).
	"rbac.authorization.k8s.io/clusterrolebindings": {Group: "rbac.authorization.k8s.io", Version: "v1", Kind: "ClusterRoleBinding"},
	"rbac.authorization.k8s.io/rolebindings":        {Group: "rbac.authorization.k8s.io", Version: "v1", Kind: "RoleBinding"},
	"rbac.authorization.k8s.io/clusterroles":        {Group: "rbac.authorization.k8s.io", Version: "v1", Kind: "ClusterRole"},
}

func nativeAPIs(rules []rbacv1.PolicyRule, own map[string]bool) ([]metav1.GroupVersionKind, error) {
	set := map[metav1.GroupVersionKind]bool{}
	for _, r := range rules {
		for _, g := range r.APIGroups {
			if own[g] {
				continue
			}
			for _, res := range r.Resources {
				base, _, _ := strings.Cut(res, "/")
				gvk, ok := nativeKinds[g+"/"+base]
				if !ok {
					return nil, fmt.Errorf("the operator's role names %q resource %q: add its kind to nativeKinds in hack/bundle", g, base)
				}
				set[gvk] = true
			}
		}
	}
	out := make([]metav1.GroupVersionKind, 0, len(set))
	for gvk := range set {
		out = append(out, gvk)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Group != out[j].Group {
			return out[i].Group < out[j].Group
		}
		return out[i].Kind < out[j].Kind
	})
	return out, nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func withTrailingNewline(b []byte) []byte {
	b = bytes.TrimLeft(b, "\n")
	if !bytes.HasSuffix(b, []byte("\n")) {
		b = append(b, '\n')
	}
	return b
}

// groupsOnly says whether a binding names groups, and nothing else.
func groupsOnly(subjects []rbacv1.Subject) bool {
	for _, s := range subjects {
		if s.Kind != rbacv1.GroupKind {
			return false
		}
	}
	return len(subjects) > 0
}

// readOnly says whether rules only get, list and watch resources.
func readOnly(rules []rbacv1.PolicyRule) bool {
	for _, r := range rules {
		if len(r.NonResourceURLs) > 0 {
			return false
		}
		for _, v := range r.Verbs {
			if v != "get" && v != "list" && v != "watch" {
				return false
			}
		}
	}
	return len(rules) > 0
}
