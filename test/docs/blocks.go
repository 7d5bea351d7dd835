// Package docs runs the guides as written: every fenced shell block of the
// pages in Pages, in page order, as the identity its marker names, against
// a `make run` cluster, and compares what a block prints with the
// `<!-- output -->` block after it.
//
// The convention (docs/tenant.md, docs/platform-operator.md,
// docs/compliance.md): each ```sh, ```bash, ```console or ```shell block has,
// on the line right above its fence, exactly one of
//
//	<!-- run: as=tenant -->    bin/tenant.kubeconfig: macrack-tenant-edit in my-team
//	<!-- run: as=admin -->     bin/kubeconfig: the platform's administrator
//	<!-- run: as=reviewer -->  no cluster, from the root of a fresh clone
//	<!-- norun: <reason> -->   not run, and why
//
// A run marker may add exit=N: the block must end with status N (a denial
// the page shows). A ```text block after a run block, with
// `<!-- output -->` on the line above its fence, is what the block prints;
// see Match for how loosely. A norun block whose reason starts "ran above"
// must be, byte for byte, an earlier run block of the page: the page shows
// the same commands twice and runs them once.
package docs

import (
	"bufio"
	"bytes"
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// Identities a run block may name.
const (
	AsTenant   = "tenant"
	AsAdmin    = "admin"
	AsReviewer = "reviewer"
)

// Block is one fenced shell block of a page.
type Block struct {
	// Line is the fence's line, 1-based.
	Line int
	// Lang is the fence's language: sh, bash, console or shell.
	Lang string
	// Run says whether the block runs; As is its identity, Exit the
	// status it must end with; NoRun the reason it does not run.
	Run   bool
	As    string
	Exit  int
	NoRun string
	// Body is the block's text, its lines joined with "\n".
	Body string
	// Output is the <!-- output --> block after it; HasOutput says
	// whether there is one.
	Output    string
	HasOutput bool
}

var (
	shellLangs = map[string]bool{"sh": true, "bash": true, "console": true, "shell": true}
	runMarker  = regexp.MustCompile(`^<!--\s*run:\s*(.*?)\s*-->$`)
	noRunMark  = regexp.MustCompile(`^<!--\s*norun:\s*(.*?)\s*-->$`)
	outputMark = regexp.MustCompile(`^<!--\s*output\s*-->$`)
	fenceOpen  = regexp.MustCompile("^\\s*(```+)\\s*([A-Za-z0-9_+-]*)")
)

// Parse reads a page's shell blocks. It fails on a shell block with no
// marker, an unknown identity, an empty norun reason, or a "ran above"
// block that differs from every run block before it.
func Parse(page []byte) ([]Block, error) {
	var lines []string
	sc := bufio.NewScanner(bytes.NewReader(page))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	var blocks []Block
	var errs []string
	for i := 0; i < len(lines); i++ {
		m := fenceOpen.FindStringSubmatch(lines[i])
		if m == nil {
			continue
		}
		fence, lang := m[1], strings.ToLower(m[2])
		end := closing(lines, i, fence)
		body := strings.Join(lines[i+1:end], "\n")
		if !shellLangs[lang] {
			i = end
			continue
		}
		b := Block{Line: i + 1, Lang: lang, Body: body}
		above := ""
		if i > 0 {
			above = strings.TrimSpace(lines[i-1])
		}
		switch {
		case runMarker.MatchString(above):
			b.Run = true
			if err := parseRun(runMarker.FindStringSubmatch(above)[1], &b); err != nil {
				errs = append(errs, fmt.Sprintf("line %d: %v", b.Line, err))
			}
		case noRunMark.MatchString(above):
			b.NoRun = noRunMark.FindStringSubmatch(above)[1]
			if b.NoRun == "" {
				errs = append(errs, fmt.Sprintf("line %d: a norun marker must give its reason", b.Line))
			}
		default:
			errs = append(errs, fmt.Sprintf("line %d: a ```%s block with no <!-- run: as=... --> or <!-- norun: reason --> on the line above its fence", b.Line, lang))
		}
		i = end
		// The output block: blank lines, the marker, a fence.
		j := i + 1
		for j < len(lines) && strings.TrimSpace(lines[j]) == "" {
			j++
		}
		if j+1 < len(lines) && outputMark.MatchString(strings.TrimSpace(lines[j])) {
			if om := fenceOpen.FindStringSubmatch(lines[j+1]); om != nil {
				oend := closing(lines, j+1, om[1])
				b.Output, b.HasOutput = strings.Join(lines[j+2:oend], "\n"), true
				if !b.Run {
					errs = append(errs, fmt.Sprintf("line %d: an <!-- output --> block after a block that does not run", j+1))
				}
				i = oend
			}
		}
		blocks = append(blocks, b)
	}
	for _, b := range blocks {
		if b.Run || !strings.HasPrefix(b.NoRun, "ran above") {
			continue
		}
		ran := false
		for _, a := range blocks {
			if a.Line >= b.Line {
				break
			}
			ran = ran || (a.Run && a.Body == b.Body)
		}
		if !ran {
			errs = append(errs, fmt.Sprintf("line %d: marked %q, but no run block above it has the same text", b.Line, b.NoRun))
		}
	}
	if len(errs) > 0 {
		return blocks, fmt.Errorf("%s", strings.Join(errs, "\n"))
	}
	return blocks, nil
}

// closing is the line of the fence that closes the one opened at line i,
// or the last line.
func closing(lines []string, i int, fence string) int {
	for j := i + 1; j < len(lines); j++ {
		if strings.TrimSpace(lines[j]) == fence {
			return j
		}
	}
	return len(lines)
}

func parseRun(args string, b *Block) error {
	for _, f := range strings.Fields(args) {
		k, v, _ := strings.Cut(f, "=")
		switch k {
		case "as":
			if v != AsTenant && v != AsAdmin && v != AsReviewer {
				return fmt.Errorf("run as %q: want tenant, admin or reviewer", v)
			}
			b.As = v
		case "exit":
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 || n > 255 {
				return fmt.Errorf("exit=%q is not a status", v)
			}
			b.Exit = n
		default:
			return fmt.Errorf("unknown run option %q", f)
		}
	}
	if b.As == "" {
		return fmt.Errorf("a run marker must name its identity (as=tenant, as=admin or as=reviewer)")
	}
	return nil
}

// Pages are the guides the doc test runs, from the repository root. A page
// joins once every shell block in it is marked; docs/platform-operator.md
// and docs/compliance.md join when theirs are.
var Pages = []string{"docs/tenant.md", "docs/platform-operator.md", "docs/compliance.md"}
