package main

import (
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The ClusterServiceVersion (operators.coreos.com/v1alpha1), as far as
// MacRack fills it. The field names and JSON tags are those of
// github.com/operator-framework/api's v1alpha1 types, which the root module
// does not import; hack/bundlecheck decodes the result strictly into the real
// types, so a misspelt field fails `make test`.

type clusterServiceVersion struct {
	APIVersion string      `json:"apiVersion"`
	Kind       string      `json:"kind"`
	Metadata   csvMetadata `json:"metadata"`
	Spec       csvSpec     `json:"spec"`
}

type csvMetadata struct {
	Name        string            `json:"name"`
	Annotations map[string]string `json:"annotations,omitempty"`
	Labels      map[string]string `json:"labels,omitempty"`
}

type csvSpec struct {
	DisplayName               string                    `json:"displayName"`
	Description               string                    `json:"description"`
	Version                   string                    `json:"version"`
	Maturity                  string                    `json:"maturity"`
	MinKubeVersion            string                    `json:"minKubeVersion"`
	Keywords                  []string                  `json:"keywords"`
	Maintainers               []maintainer              `json:"maintainers"`
	Provider                  appLink                   `json:"provider"`
	Links                     []appLink                 `json:"links"`
	Icon                      []icon                    `json:"icon"`
	InstallModes              []installMode             `json:"installModes"`
	CustomResourceDefinitions customResourceDefinitions `json:"customresourcedefinitions"`
	NativeAPIs                []metav1.GroupVersionKind `json:"nativeAPIs,omitempty"`
	WebhookDefinitions        []webhookDescription      `json:"webhookdefinitions,omitempty"`
	Install                   namedInstallStrategy      `json:"install"`
}

type maintainer struct {
	Name  string `json:"name"`
	Email string `json:"email"`
}

type appLink struct {
	Name string `json:"name"`
	URL  string `json:"url,omitempty"`
}

type icon struct {
	Data      string `json:"base64data"`
	MediaType string `json:"mediatype"`
}

type installMode struct {
	Type      string `json:"type"`
	Supported bool   `json:"supported"`
}

type customResourceDefinitions struct {
	Owned []crdDescription `json:"owned"`
}

type crdDescription struct {
	Name              string       `json:"name"`
	Version           string       `json:"version"`
	Kind              string       `json:"kind"`
	DisplayName       string       `json:"displayName"`
	Description       string       `json:"description"`
	SpecDescriptors   []descriptor `json:"specDescriptors,omitempty"`
	StatusDescriptors []descriptor `json:"statusDescriptors,omitempty"`
}

type descriptor struct {
	Path         string   `json:"path"`
	DisplayName  string   `json:"displayName"`
	Description  string   `json:"description,omitempty"`
	XDescriptors []string `json:"x-descriptors,omitempty"`
}

type webhookDescription struct {
	GenerateName            string                                          `json:"generateName"`
	Type                    string                                          `json:"type"`
	DeploymentName          string                                          `json:"deploymentName"`
	ContainerPort           int32                                           `json:"containerPort"`
	AdmissionReviewVersions []string                                        `json:"admissionReviewVersions"`
	Rules                   []admissionregistrationv1.RuleWithOperations    `json:"rules"`
	FailurePolicy           *admissionregistrationv1.FailurePolicyType      `json:"failurePolicy"`
	MatchPolicy             *admissionregistrationv1.MatchPolicyType        `json:"matchPolicy"`
	ObjectSelector          *metav1.LabelSelector                           `json:"objectSelector,omitempty"`
	SideEffects             *admissionregistrationv1.SideEffectClass        `json:"sideEffects"`
	TimeoutSeconds          *int32                                          `json:"timeoutSeconds"`
	ReinvocationPolicy      *admissionregistrationv1.ReinvocationPolicyType `json:"reinvocationPolicy,omitempty"`
	WebhookPath             *string                                         `json:"webhookPath"`
}

type namedInstallStrategy struct {
	Strategy string             `json:"strategy"`
	Spec     deploymentStrategy `json:"spec"`
}

type deploymentStrategy struct {
	Deployments        []deploymentSpec `json:"deployments"`
	ClusterPermissions []permissions    `json:"clusterPermissions,omitempty"`
	Permissions        []permissions    `json:"permissions,omitempty"`
}

type deploymentSpec struct {
	Name  string                `json:"name"`
	Label map[string]string     `json:"label,omitempty"`
	Spec  appsv1.DeploymentSpec `json:"spec"`
}

type permissions struct {
	ServiceAccountName string              `json:"serviceAccountName"`
	Rules              []rbacv1.PolicyRule `json:"rules"`
}
