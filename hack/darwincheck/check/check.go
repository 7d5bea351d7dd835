// Package check type-checks Go packages as they build for darwin/arm64 with
// cgo, on any host: hack/darwincheck's engine.
package check

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"golang.org/x/tools/go/packages"
)

// Platform is what the packages are checked for.
const Platform = "darwin/arm64 (cgo)"

// Options say what to check.
type Options struct {
	// Dir is where the go command runs; the current directory if empty.
	Dir string
	// Patterns are the go command's package patterns, e.g. ./...
	Patterns []string
	// Overlay replaces files' contents by absolute path, as the go
	// command's -overlay does: the negative control plants an error in a
	// copy of a real file without touching the tree.
	Overlay map[string][]byte
}

// Result is what a check found.
type Result struct {
	// Errors fail the check, each once, sorted.
	Errors []string
	// Skipped are the dependencies' "could not import C" errors: cgo does
	// not run off a Mac, so their C.x expressions go unchecked.
	Skipped []string
	// Packages is how many packages the patterns named, test variants
	// included.
	Packages int
	// DarwinFiles counts the files of those packages that build only for
	// darwin: what this check adds to a Linux build's.
	DarwinFiles int
}

// Run loads and type-checks o.Patterns, with their test files, and every
// dependency from source, for darwin/arm64 with CGO_ENABLED=1. The go
// command downloads the modules it needs, as go mod download would: vz only
// for this check, never for a Linux build.
func Run(o Options) (Result, error) {
	cfg := &packages.Config{
		Mode: packages.NeedName | packages.NeedFiles | packages.NeedImports |
			packages.NeedDeps | packages.NeedTypes | packages.NeedModule,
		Dir:   o.Dir,
		Env:   append(os.Environ(), "GOOS=darwin", "GOARCH=arm64", "CGO_ENABLED=1", "GOFLAGS=-mod=readonly"),
		Tests: true,
	}
	if len(o.Overlay) > 0 {
		cfg.Overlay = o.Overlay
	}
	roots, err := packages.Load(cfg, o.Patterns...)
	if err != nil {
		return Result{}, fmt.Errorf("loading %s for %s: %w", strings.Join(o.Patterns, " "), Platform, err)
	}
	if len(roots) == 0 {
		return Result{}, fmt.Errorf("%s names no package", strings.Join(o.Patterns, " "))
	}
	isRoot := map[*packages.Package]bool{}
	for _, p := range roots {
		isRoot[p] = true
	}
	var res Result
	errs, skipped := map[string]bool{}, map[string]bool{}
	darwinFiles := map[string]bool{}
	packages.Visit(roots, nil, func(p *packages.Package) {
		cgo := !isRoot[p] && slices.ContainsFunc(p.Errors, couldNotImportC)
		for _, e := range p.Errors {
			msg := e.Error()
			if cgo && (couldNotImportC(e) || cgoDidNotRun(p, e)) {
				skipped[p.PkgPath+": "+msg] = true
				continue
			}
			errs[msg] = true
		}
		if isRoot[p] {
			for _, f := range p.GoFiles {
				if buildsOnlyForDarwin(f) {
					darwinFiles[f] = true
				}
			}
		}
	})
	res.Packages = len(roots)
	res.DarwinFiles = len(darwinFiles)
	res.Errors = sortedKeys(errs)
	res.Skipped = sortedKeys(skipped)
	return res, nil
}

// couldNotImportC is go/types' error for a file's import "C" that the
// loader could not satisfy: cgo did not run.
func couldNotImportC(e packages.Error) bool {
	return e.Kind == packages.TypeError && strings.HasPrefix(e.Msg, "could not import C ")
}

// cgoDidNotRun is the go command's own report that it could not run cgo
// for p (go list -compiled runs it, for runtime/cgo first): no C compiler
// for darwin here. The same fact as couldNotImportC, said once per
// package that go list tried; it counts only beside that error.
func cgoDidNotRun(p *packages.Package, e packages.Error) bool {
	return e.Kind == packages.ListError && strings.HasPrefix(e.Msg, "# "+p.PkgPath+"\ncgo: ")
}

// buildsOnlyForDarwin is whether a file is darwin's alone: named so, or
// constrained to darwin by its //go:build line.
func buildsOnlyForDarwin(path string) bool {
	base := strings.TrimSuffix(strings.TrimSuffix(filepath.Base(path), ".go"), "_test")
	if strings.HasSuffix(base, "_darwin") || strings.HasSuffix(base, "_darwin_arm64") {
		return true
	}
	src, err := os.ReadFile(path)
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(src), "\n") {
		line = strings.TrimSpace(line)
		if strings.HasPrefix(line, "package ") {
			return false
		}
		if c, ok := strings.CutPrefix(line, "//go:build "); ok {
			return strings.HasPrefix(c, "darwin") && !strings.Contains(c, "||")
		}
	}
	return false
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
