package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// inputs is what the bundle is made of, as config/ has it.
type inputs struct {
	// crds in config/crd/kustomization.yaml's order; raw is each file's bytes.
	crds []crdFile
	// rbac is every object of config/rbac/kustomization.yaml's resources.
	clusterRoles        []clusterRole
	roles               []rbacv1.Role
	clusterRoleBindings []rbacv1.ClusterRoleBinding
	// bindingDocs keeps each ClusterRoleBinding's document, comments
	// included, by name: one the bundle ships as it is is copied.
	bindingDocs     map[string][]byte
	roleBindings    []rbacv1.RoleBinding
	serviceAccounts []metav1.ObjectMeta
	// webhooks of config/webhook/manifests.yaml.
	mutating   []admissionregistrationv1.MutatingWebhookConfiguration
	validating []admissionregistrationv1.ValidatingWebhookConfiguration
	// deployment is config/manager/manager.yaml's one Deployment.
	deployment appsv1.Deployment
	// samples of config/samples, every folder, in path order.
	samples []sample
}

type crdFile struct {
	name string // the file's base name
	raw  []byte
	crd  apiextensionsv1.CustomResourceDefinition
}

// clusterRole keeps its document's bytes, comments included: a ClusterRole
// the bundle ships as it is (the tenants' and the agents') is copied.
type clusterRole struct {
	rbacv1.ClusterRole
	raw []byte
}

type sample struct {
	path string
	obj  map[string]any
}

func load(root string) (*inputs, error) {
	in := &inputs{}
	if err := in.loadCRDs(root); err != nil {
		return nil, err
	}
	if err := in.loadRBAC(root); err != nil {
		return nil, err
	}
	if err := in.loadWebhooks(filepath.Join(root, "config", "webhook", "manifests.yaml")); err != nil {
		return nil, err
	}
	if err := in.loadManager(root); err != nil {
		return nil, err
	}
	if err := in.loadSamples(filepath.Join(root, "config", "samples")); err != nil {
		return nil, err
	}
	return in, nil
}

// kustomizeResources is the resources list of dir/kustomization.yaml.
func kustomizeResources(dir string) ([]string, error) {
	b, err := os.ReadFile(filepath.Join(dir, "kustomization.yaml"))
	if err != nil {
		return nil, err
	}
	var k struct {
		Resources []string `json:"resources"`
	}
	if err := yaml.Unmarshal(b, &k); err != nil {
		return nil, fmt.Errorf("%s/kustomization.yaml: %w", dir, err)
	}
	return k.Resources, nil
}

func (in *inputs) loadCRDs(root string) error {
	dir := filepath.Join(root, "config", "crd")
	res, err := kustomizeResources(dir)
	if err != nil {
		return err
	}
	listed := map[string]bool{}
	for _, r := range res {
		p := filepath.Join(dir, r)
		raw, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		docs, err := documents(raw)
		if err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		if len(docs) != 1 {
			return fmt.Errorf("%s: %d documents, want one CustomResourceDefinition", p, len(docs))
		}
		var crd apiextensionsv1.CustomResourceDefinition
		if err := yaml.UnmarshalStrict(docs[0], &crd); err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		if crd.Kind != "CustomResourceDefinition" {
			return fmt.Errorf("%s: a %s, want a CustomResourceDefinition", p, crd.Kind)
		}
		listed[filepath.Clean(p)] = true
		in.crds = append(in.crds, crdFile{name: filepath.Base(p), raw: raw, crd: crd})
	}
	// Every generated CRD is in the kustomization, and so in the bundle.
	bases, err := filepath.Glob(filepath.Join(dir, "bases", "*.yaml"))
	if err != nil {
		return err
	}
	for _, b := range bases {
		if !listed[filepath.Clean(b)] {
			return fmt.Errorf("%s is not in config/crd/kustomization.yaml: add it there", b)
		}
	}
	if len(in.crds) == 0 {
		return errors.New("config/crd lists no CRD")
	}
	return nil
}

func (in *inputs) loadRBAC(root string) error {
	dir := filepath.Join(root, "config", "rbac")
	res, err := kustomizeResources(dir)
	if err != nil {
		return err
	}
	for _, r := range res {
		p := filepath.Join(dir, r)
		err := eachObject(p, func(kind string, doc []byte) error {
			switch kind {
			case "ClusterRole":
				var o rbacv1.ClusterRole
				err := yaml.UnmarshalStrict(doc, &o)
				in.clusterRoles = append(in.clusterRoles, clusterRole{ClusterRole: o, raw: doc})
				return err
			case "Role":
				var o rbacv1.Role
				err := yaml.UnmarshalStrict(doc, &o)
				in.roles = append(in.roles, o)
				return err
			case "ClusterRoleBinding":
				var o rbacv1.ClusterRoleBinding
				err := yaml.UnmarshalStrict(doc, &o)
				in.clusterRoleBindings = append(in.clusterRoleBindings, o)
				if in.bindingDocs == nil {
					in.bindingDocs = map[string][]byte{}
				}
				in.bindingDocs[o.Name] = doc
				return err
			case "RoleBinding":
				var o rbacv1.RoleBinding
				err := yaml.UnmarshalStrict(doc, &o)
				in.roleBindings = append(in.roleBindings, o)
				return err
			case "ServiceAccount":
				var o struct {
					metav1.TypeMeta `json:",inline"`
					Metadata        metav1.ObjectMeta `json:"metadata"`
				}
				err := yaml.UnmarshalStrict(doc, &o)
				in.serviceAccounts = append(in.serviceAccounts, o.Metadata)
				return err
			}
			return fmt.Errorf("a %s: the bundle generator knows ClusterRoles, Roles, their bindings and ServiceAccounts only", kind)
		})
		if err != nil {
			return err
		}
	}
	return nil
}

func (in *inputs) loadWebhooks(path string) error {
	return eachObject(path, func(kind string, doc []byte) error {
		switch kind {
		case "MutatingWebhookConfiguration":
			var o admissionregistrationv1.MutatingWebhookConfiguration
			err := yaml.UnmarshalStrict(doc, &o)
			in.mutating = append(in.mutating, o)
			return err
		case "ValidatingWebhookConfiguration":
			var o admissionregistrationv1.ValidatingWebhookConfiguration
			err := yaml.UnmarshalStrict(doc, &o)
			in.validating = append(in.validating, o)
			return err
		}
		return fmt.Errorf("a %s, want webhook configurations only", kind)
	})
}

func (in *inputs) loadManager(root string) error {
	dir := filepath.Join(root, "config", "manager")
	res, err := kustomizeResources(dir)
	if err != nil {
		return err
	}
	n := 0
	for _, r := range res {
		err := eachObject(filepath.Join(dir, r), func(kind string, doc []byte) error {
			switch kind {
			case "Namespace": // OLM installs into the namespace of the OperatorGroup.
				return nil
			case "Deployment":
				n++
				return yaml.UnmarshalStrict(doc, &in.deployment)
			}
			return fmt.Errorf("a %s: want the Namespace and the Deployment only", kind)
		})
		if err != nil {
			return err
		}
	}
	if n != 1 {
		return fmt.Errorf("config/manager has %d Deployments, want one", n)
	}
	return nil
}

func (in *inputs) loadSamples(dir string) error {
	var paths []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && (strings.HasSuffix(p, ".yaml") || strings.HasSuffix(p, ".yml")) && d.Name() != "kustomization.yaml" {
			paths = append(paths, p)
		}
		return nil
	})
	if err != nil {
		return err
	}
	sort.Strings(paths)
	for _, p := range paths {
		err := eachObject(p, func(_ string, doc []byte) error {
			var obj map[string]any
			if err := yaml.Unmarshal(doc, &obj); err != nil {
				return err
			}
			in.samples = append(in.samples, sample{path: p, obj: obj})
			return nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// eachObject calls fn with the kind and the bytes of each YAML document of
// path, skipping empty ones (comments alone, or a leading ---).
func eachObject(path string, fn func(kind string, doc []byte) error) error {
	raw, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	docs, err := documents(raw)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	for i, doc := range docs {
		var tm metav1.TypeMeta
		if err := yaml.Unmarshal(doc, &tm); err != nil {
			return fmt.Errorf("%s, document %d: %w", path, i+1, err)
		}
		if err := fn(tm.Kind, doc); err != nil {
			return fmt.Errorf("%s, document %d: %w", path, i+1, err)
		}
	}
	return nil
}

// documents splits a multi-document YAML file, leaving out the documents
// that hold no object.
func documents(raw []byte) ([][]byte, error) {
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(raw)))
	var out [][]byte
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		var v any
		if err := yaml.Unmarshal(doc, &v); err != nil {
			return nil, err
		}
		if v != nil {
			out = append(out, doc)
		}
	}
}
