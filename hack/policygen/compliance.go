package main

import (
	"bytes"
	_ "embed"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"text/template"

	"github.com/boualleiguie/macrack-operator/internal/policy"
	"github.com/boualleiguie/macrack-operator/internal/policy/vectors"
)

//go:embed compliance.md.tmpl
var complianceTemplate string

type docVector struct{ Name, Expected string }

type docRule struct {
	*policy.Rule
	RegoPath, Rego      string
	CELPath, CEL        string
	VAPName, VectorFile string
	Vectors             []docVector
}

// writeComplianceDoc renders docs/compliance.md from the rules' own sources
// and vectors, so that the reviewers' page cannot drift from what runs.
func writeComplianceDoc(root string, e *policy.Engine, cases []vectors.Case) error {
	var rules []docRule
	for _, r := range e.Rules() {
		area, name, _ := strings.Cut(strings.ReplaceAll(r.ID, "-", "_"), ".")
		d := docRule{Rule: r, RegoPath: area + "/" + name + ".rego"}
		src, err := os.ReadFile(filepath.Join(root, "policies", d.RegoPath))
		if err != nil {
			return fmt.Errorf("rule %s: %w", r.ID, err)
		}
		d.Rego = strings.TrimSpace(string(src))
		if r.HasCEL() {
			d.CELPath = area + "/" + name + ".cel.yaml"
			src, err := os.ReadFile(filepath.Join(root, "policies", d.CELPath))
			if err != nil {
				return fmt.Errorf("rule %s: %w", r.ID, err)
			}
			d.CEL = strings.TrimSpace(string(src))
			d.VAPName = "macrack-" + strings.NewReplacer(".", "-", "_", "-").Replace(r.ID)
		}
		for _, c := range cases {
			if c.Rule != r.ID {
				continue
			}
			d.VectorFile = c.File
			want := "allowed"
			if len(c.Expect) > 0 {
				want = "denied: `" + strings.Join(c.Expect, "`, `") + "`"
			}
			d.Vectors = append(d.Vectors, docVector{Name: strings.ReplaceAll(c.Name, "|", "\\\\|"), Expected: want})
		}
		rules = append(rules, d)
	}
	points, err := registry(root, e)
	if err != nil {
		return err
	}
	if err := checkRegistry(root, e, cases, points); err != nil {
		return fmt.Errorf("the enforcement registry does not hold:\n%w", err)
	}
	hostile, err := hostileCases(root)
	if err != nil {
		return fmt.Errorf("the hostile table: %w", err)
	}
	t, err := template.New("compliance").Parse(complianceTemplate)
	if err != nil {
		return err
	}
	var b bytes.Buffer
	if err := t.Execute(&b, map[string]any{"Revision": e.Revision(), "Rules": rules, "Matrix": renderMatrix(e.Rules(), points), "Hostile": hostile, "HostileGlob": hostileGlob}); err != nil {
		return err
	}
	return write(filepath.Join(root, "docs", "compliance.md"), b.Bytes())
}
