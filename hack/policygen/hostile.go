package main

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// hostileGlob is where the review rounds' hostile cases live: each It of
// these files is one row of docs/compliance.md's hostile table.
const hostileGlob = "test/envtest/hostile/round3_*_test.go"

// hostileCase is one It of the hostile suite, as "<who> <does what>:
// <refused by layer | outcome>".
type hostileCase struct {
	File, Attack, Outcome string
}

// hostileCases reads the Its of the hostile suite's review files, in file
// order and then in source order. An It whose text is not a string
// literal, or lacks ": " between the attack and its outcome, is an error:
// the table would not say what it proves.
func hostileCases(root string) ([]hostileCase, error) {
	files, err := filepath.Glob(filepath.Join(root, hostileGlob))
	if err != nil {
		return nil, err
	}
	sort.Strings(files)
	var out []hostileCase
	for _, f := range files {
		fset := token.NewFileSet()
		file, err := parser.ParseFile(fset, f, nil, parser.SkipObjectResolution)
		if err != nil {
			return nil, err
		}
		rel, err := filepath.Rel(root, f)
		if err != nil {
			return nil, err
		}
		rel = filepath.ToSlash(rel)
		var perr error
		ast.Inspect(file, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok || perr != nil {
				return perr == nil
			}
			if id, ok := call.Fun.(*ast.Ident); !ok || id.Name != "It" || len(call.Args) == 0 {
				return true
			}
			lit, ok := call.Args[0].(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING {
				perr = fmt.Errorf("%s: an It whose text is not a string literal", fset.Position(call.Pos()))
				return false
			}
			text, err := strconv.Unquote(lit.Value)
			if err != nil {
				perr = err
				return false
			}
			attack, outcome, found := strings.Cut(text, ": ")
			if !found {
				perr = fmt.Errorf("%s: It %q does not read \"<who> <does what>: <refused by layer | outcome>\"", fset.Position(call.Pos()), text)
				return false
			}
			out = append(out, hostileCase{File: rel, Attack: escapeCell(attack), Outcome: escapeCell(outcome)})
			return true
		})
		if perr != nil {
			return nil, perr
		}
	}
	return out, nil
}

// escapeCell keeps a text inside its Markdown table cell.
func escapeCell(s string) string { return strings.ReplaceAll(s, "|", "\\|") }
