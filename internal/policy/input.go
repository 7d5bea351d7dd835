package policy

import (
	"fmt"
	"strings"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Input is what every rule reads, with the names a ValidatingAdmissionPolicy
// uses: object, oldObject, request and params, plus now (from the caller's
// injected clock) and inventory (related objects from indexed caches).
type Input struct {
	// Object is the object being written; nil on DELETE.
	Object map[string]any
	// OldObject is the stored object; nil on CREATE.
	OldObject map[string]any
	Request   Request
	// Params are the settings a VAP receives as params.data (a ConfigMap).
	Params Params
	// Now is the caller's clock. A zero Now is refused: rules that need the
	// time would otherwise have to guess.
	Now time.Time
	// Inventory holds related objects by role, e.g. "lease", "nodeClass",
	// "leaseInstances"; each rule's METADATA lists what it reads.
	Inventory map[string]any
}

// Request describes the admission request (or the reconciler's intended write).
type Request struct {
	// Operation is CREATE, UPDATE, DELETE or CONNECT.
	Operation   string
	Kind        schema.GroupVersionKind
	Resource    schema.GroupVersionResource
	SubResource string
	Name        string
	Namespace   string
	UserInfo    UserInfo
}

// UserInfo is the requester.
type UserInfo struct {
	Username string
	UID      string
	Groups   []string
}

// Params are the policy parameters, the data of the params ConfigMap.
type Params struct {
	// AgentsNamespace holds the host agents' ServiceAccounts (agent-<node>).
	AgentsNamespace string
	// OperatorUsername is the operator's own identity.
	OperatorUsername string
	// AgentTokenAudiences are the API server's audiences, comma-separated:
	// an agent may request tokens for these only. (A string, not a slice,
	// so that Params stay comparable and can key caches.)
	AgentTokenAudiences string
}

// TokenAudiences lists AgentTokenAudiences, without empty entries.
func (p Params) TokenAudiences() []string {
	var out []string
	for _, a := range strings.Split(p.AgentTokenAudiences, ",") {
		if a = strings.TrimSpace(a); a != "" {
			out = append(out, a)
		}
	}
	return out
}

// Validate refuses settings the operator cannot enforce its policies with.
func (p Params) Validate() error {
	switch {
	case p.AgentsNamespace == "":
		return fmt.Errorf("%w: the agents' namespace is not set", ErrInput)
	case len(p.TokenAudiences()) == 0:
		return fmt.Errorf("%w: the API server's token audiences are not set", ErrInput)
	case p.OperatorUsername == "":
		return fmt.Errorf("%w: the operator's username is not set", ErrInput)
	}
	return nil
}

// Data is the params as a ConfigMap's data: what Rego reads as
// params.data, and what the params ConfigMap records.
func (p Params) Data() map[string]string {
	d := map[string]string{}
	if p.AgentsNamespace != "" {
		d["agentsNamespace"] = p.AgentsNamespace
	}
	if p.OperatorUsername != "" {
		d["operatorUsername"] = p.OperatorUsername
	}
	if p.AgentTokenAudiences != "" {
		d["agentTokenAudiences"] = p.AgentTokenAudiences
	}
	return d
}

// kindKey is how rules name the kinds they apply to: "group/Kind", with an
// empty group for the core API ("/Node").
func kindKey(gk schema.GroupKind) string { return gk.Group + "/" + gk.Kind }

// StripManagedFields returns obj without metadata.managedFields, which no
// rule reads and which dominate the size of a stored object. The caller's
// map is not modified.
func StripManagedFields(obj map[string]any) map[string]any {
	if obj == nil {
		return nil
	}
	meta, ok := obj["metadata"].(map[string]any)
	if !ok {
		return obj
	}
	if _, has := meta["managedFields"]; !has {
		return obj
	}
	out := make(map[string]any, len(obj))
	for k, v := range obj {
		out[k] = v
	}
	m := make(map[string]any, len(meta))
	for k, v := range meta {
		if k != "managedFields" {
			m[k] = v
		}
	}
	out["metadata"] = m
	return out
}

// complete fills what a caller may leave out: the resource from the kind,
// the name and namespace from the object.
func (in *Input) complete() error {
	r := &in.Request
	switch r.Operation {
	case "CREATE", "UPDATE", "DELETE", "CONNECT":
	default:
		return fmt.Errorf("%w: request.operation %q is not CREATE, UPDATE, DELETE or CONNECT", ErrInput, r.Operation)
	}
	if r.Kind.Kind == "" {
		return fmt.Errorf("%w: request.kind.kind is empty", ErrInput)
	}
	if in.Now.IsZero() {
		return fmt.Errorf("%w: now is not set; pass the caller's clock", ErrInput)
	}
	if r.Resource.Resource == "" {
		res, sub, ok := resourceFor(r.Kind.GroupKind())
		if !ok {
			return fmt.Errorf("%w: no resource known for kind %s; set request.resource", ErrInput, kindKey(r.Kind.GroupKind()))
		}
		r.Resource = schema.GroupVersionResource{Group: res.Group, Version: r.Kind.Version, Resource: res.Resource}
		if r.SubResource == "" {
			r.SubResource = sub
		}
	}
	src := in.Object
	if src == nil {
		src = in.OldObject
	}
	if meta, ok := src["metadata"].(map[string]any); ok {
		if r.Name == "" {
			r.Name, _ = meta["name"].(string)
		}
		if r.Namespace == "" {
			r.Namespace, _ = meta["namespace"].(string)
		}
	}
	return nil
}

// resourceFor maps the kinds MacRack's rules concern to their resources.
// TokenRequest is the token subresource of serviceaccounts.
func resourceFor(gk schema.GroupKind) (schema.GroupResource, string, bool) {
	switch kindKey(gk) {
	case "fleet.macrack.io/MacNodeClass":
		return schema.GroupResource{Group: gk.Group, Resource: "macnodeclasses"}, "", true
	case "fleet.macrack.io/MacNode":
		return schema.GroupResource{Group: gk.Group, Resource: "macnodes"}, "", true
	case "fleet.macrack.io/MacOSImage":
		return schema.GroupResource{Group: gk.Group, Resource: "macosimages"}, "", true
	case "leasing.macrack.io/MacNodeLease":
		return schema.GroupResource{Group: gk.Group, Resource: "macnodeleases"}, "", true
	case "compute.macrack.io/MacOSInstance":
		return schema.GroupResource{Group: gk.Group, Resource: "macosinstances"}, "", true
	case "workloads.macrack.io/GitLabRunner":
		return schema.GroupResource{Group: gk.Group, Resource: "gitlabrunners"}, "", true
	case "/Node":
		return schema.GroupResource{Resource: "nodes"}, "", true
	case "/Pod":
		return schema.GroupResource{Resource: "pods"}, "", true
	case "coordination.k8s.io/Lease":
		return schema.GroupResource{Group: gk.Group, Resource: "leases"}, "", true
	case "/Event", "events.k8s.io/Event":
		return schema.GroupResource{Group: gk.Group, Resource: "events"}, "", true
	case "authentication.k8s.io/TokenRequest":
		return schema.GroupResource{Resource: "serviceaccounts"}, "token", true
	case "certificates.k8s.io/CertificateSigningRequest":
		return schema.GroupResource{Group: gk.Group, Resource: "certificatesigningrequests"}, "", true
	case "/Secret":
		return schema.GroupResource{Resource: "secrets"}, "", true
	}
	return schema.GroupResource{}, "", false
}

// describe names the request for logs and messages.
func (r Request) describe() string {
	var b strings.Builder
	b.WriteString(r.Operation)
	b.WriteString(" ")
	b.WriteString(kindKey(r.Kind.GroupKind()))
	if r.SubResource != "" {
		b.WriteString("/" + r.SubResource)
	}
	b.WriteString(" ")
	if r.Namespace != "" {
		b.WriteString(r.Namespace + "/")
	}
	b.WriteString(r.Name)
	return b.String()
}

// RegoDocument is the JSON document Rego reads for in: the engine's own
// input value, after the same completion and stripping Decide applies,
// rendered as JSON. Generators use it, so that `opa test` sees exactly the
// engine's input.
func RegoDocument(in Input) (map[string]any, error) {
	in.Object = StripManagedFields(in.Object)
	in.OldObject = StripManagedFields(in.OldObject)
	if err := in.complete(); err != nil {
		return nil, err
	}
	var b regoInput
	v, err := b.value(&in)
	if err != nil {
		return nil, err
	}
	doc, err := ast.JSON(v)
	if err != nil {
		return nil, err
	}
	m, ok := doc.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("%w: the Rego input is a %T, not an object", ErrInput, doc)
	}
	return m, nil
}
