package main

import (
	"sort"
	"strings"
	"unicode"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
)

// The console's descriptors for the top-level fields of spec and status,
// taken from the schema: the description is the field's own (from its Go
// doc comment), the x-descriptor follows the field's type.
const (
	specText    = "urn:alm:descriptor:com.tectonic.ui:text"
	specNumber  = "urn:alm:descriptor:com.tectonic.ui:number"
	specBoolean = "urn:alm:descriptor:com.tectonic.ui:booleanSwitch"
	specSecret  = "urn:alm:descriptor:io.kubernetes:Secret"

	statusConditions = "urn:alm:descriptor:io.kubernetes.conditions"
	statusPhase      = "urn:alm:descriptor:io.kubernetes.phase"
	statusText       = "urn:alm:descriptor:text"
	statusTimestamp  = "urn:alm:descriptor:timestamp"
	statusNode       = "urn:alm:descriptor:io.kubernetes:Node"
)

func specDescriptors(s apiextensionsv1.JSONSchemaProps) []descriptor {
	var out []descriptor
	for _, name := range sortedKeys(s.Properties) {
		p := s.Properties[name]
		d := descriptor{Path: name, DisplayName: fieldDisplayName(name), Description: prose(p.Description)}
		switch {
		case strings.HasSuffix(name, "SecretName") && p.Type == "string":
			d.XDescriptors = []string{specSecret}
		case p.Type == "boolean":
			d.XDescriptors = []string{specBoolean}
		case p.Type == "integer" || p.Type == "number":
			d.XDescriptors = []string{specNumber}
		case p.Type == "string" || p.XIntOrString:
			d.XDescriptors = []string{specText}
		}
		out = append(out, d)
	}
	return out
}

func statusDescriptors(s apiextensionsv1.JSONSchemaProps) []descriptor {
	var out []descriptor
	for _, name := range sortedKeys(s.Properties) {
		p := s.Properties[name]
		d := descriptor{Path: name, DisplayName: fieldDisplayName(name), Description: prose(p.Description)}
		switch {
		case name == "conditions" && p.Type == "array":
			d.XDescriptors = []string{statusConditions}
		case name == "phase" && p.Type == "string":
			d.XDescriptors = []string{statusPhase}
		case name == "nodeName" && p.Type == "string":
			d.XDescriptors = []string{statusNode}
		case p.Type == "string" && p.Format == "date-time":
			d.XDescriptors = []string{statusTimestamp}
		case p.Type == "string" || p.Type == "integer" || p.Type == "number" || p.Type == "boolean" || p.XIntOrString:
			d.XDescriptors = []string{statusText}
		}
		out = append(out, d)
	}
	return out
}

func sortedKeys(m map[string]apiextensionsv1.JSONSchemaProps) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// prose joins a schema description's wrapped lines, keeping its paragraphs.
func prose(s string) string {
	var paras []string
	for _, p := range strings.Split(s, "\n\n") {
		if p = strings.Join(strings.Fields(p), " "); p != "" {
			paras = append(paras, p)
		}
	}
	return strings.Join(paras, "\n\n")
}

// acronyms are written in capitals in display names.
var acronyms = map[string]string{"cpu": "CPU", "vm": "VM", "vms": "VMs", "http": "HTTP", "id": "ID", "os": "OS", "uid": "UID"}

// fieldDisplayName is "nodeClassName" as "Node Class Name", "vmCapacity" as
// "VM Capacity".
func fieldDisplayName(name string) string {
	words := camelWords(name)
	for i, w := range words {
		if a, ok := acronyms[strings.ToLower(w)]; ok {
			words[i] = a
			continue
		}
		r := []rune(w)
		r[0] = unicode.ToUpper(r[0])
		words[i] = string(r)
	}
	return strings.Join(words, " ")
}

// kindDisplayName is "MacNodeLease" as "Mac Node Lease", and "MacOSImage"
// as "macOS Image", as Apple writes it.
func kindDisplayName(kind string) string {
	return strings.ReplaceAll(strings.Join(camelWords(kind), " "), "Mac OS", "macOS")
}

// camelWords splits a camelCase or PascalCase name into words; a run of
// capitals is one word ("plainHTTP": plain, HTTP; "MacOSImage": Mac, OS,
// Image).
func camelWords(s string) []string {
	r := []rune(s)
	var words []string
	start := 0
	for i := 1; i < len(r); i++ {
		lowerToUpper := unicode.IsLower(r[i-1]) && unicode.IsUpper(r[i])
		digitToUpper := unicode.IsDigit(r[i-1]) && unicode.IsUpper(r[i])
		acronymEnd := i+1 < len(r) && unicode.IsUpper(r[i-1]) && unicode.IsUpper(r[i]) && unicode.IsLower(r[i+1])
		if lowerToUpper || digitToUpper || acronymEnd {
			words = append(words, string(r[start:i]))
			start = i
		}
	}
	return append(words, string(r[start:]))
}
