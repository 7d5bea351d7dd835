// Package circumvent checks that nothing in the repository writes the
// settings that guard the kernel's VM quota: MacRack reads SIP and the
// boot-args, and never raises the quota or works around it (the
// quota.never-circumvent policy). A write form anywhere, in code, scripts,
// manifests or docs, fails the scan; reads pass.
//
// The patterns are built from parts so that this package does not match
// itself.
package circumvent

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
)

var (
	nvramCmd   = "nv" + "ram"
	csrutilCmd = "csr" + "util"
	sysctlCmd  = "sys" + "ctl"
	quotaName  = "hv_apple_isa" + "_vm" + "_quota"
)

// Between a command and its argument: blanks, as in a shell, or a quote,
// comma and quote, as in exec.Command("x", "y") or a JSON or YAML list.
const argSep = `(?:["'` + "`" + `]?\s*,\s*["'` + "`" + `]?|["'` + "`" + `]?\s+["'` + "`" + `]?)`

// A command word: not the tail of a longer name (nvram.bin, my-nvram).
func command(name string) string { return `(?:^|[^\w.-])` + name }

// Rule is one write form.
type Rule struct {
	Name string
	re   *regexp.Regexp
	// exempt, if set, clears a match on a line that is not a write.
	exempt func(line string) bool
}

// Rules are the write forms the scan refuses.
var Rules = []Rule{
	{
		// The NVRAM command given name=value, in a shell or an argument list.
		Name: "an assignment to an NVRAM variable",
		re:   regexp.MustCompile(`(?i)` + command(nvramCmd) + `(?:` + argSep + `-[a-z]+)*` + argSep + `[\w:%.-]+=`),
	},
	{
		// The NVRAM command's -d (delete a variable), -c (clear them all) and
		// -f (set them from a file).
		Name: "an NVRAM delete, clear or set from a file",
		re:   regexp.MustCompile(`(?i)` + command(nvramCmd) + argSep + `-[a-z]*[dcf][a-z]*\b`),
	},
	{
		// The SIP command's enable, disable and clear, also of its
		// authenticated-root and netboot subcommands.
		Name: "a change of System Integrity Protection",
		re: regexp.MustCompile(`(?i)` + command(csrutilCmd) + argSep +
			`(?:(?:authenticated-root|netboot)` + argSep + `)?(?:enable|disable|clear|add|remove)\b`),
	},
	{
		// sysctl's -w of the quota, with or without a value.
		Name: "a sysctl write of the VM quota",
		re:   regexp.MustCompile(`(?i)` + command(sysctlCmd) + argSep + `-[a-z]*w[a-z]*\b.*` + quotaName),
	},
	{
		// quota=N as a boot-arg or a sysctl, kern.quota=N: an assignment,
		// not a comparison (==).
		Name: "an assignment to the VM quota",
		re:   regexp.MustCompile(`(?i)` + quotaName + `\s*=(?:[^=]|$)`),
		// The boot-args a host reports are evidence the operator refuses,
		// not a write: a line that holds them in the API's bootArgs field,
		// and runs neither nvram nor sysctl, passes.
		exempt: func(line string) bool {
			l := strings.ToLower(line)
			return strings.Contains(l, "bootargs") && !strings.Contains(l, nvramCmd) && !strings.Contains(l, sysctlCmd)
		},
	},
}

// Match returns the name of the first rule line breaks.
func Match(line string) (string, bool) {
	for _, r := range Rules {
		if r.re.MatchString(line) && (r.exempt == nil || !r.exempt(line)) {
			return r.Name, true
		}
	}
	return "", false
}

// Finding is one write form in one file.
type Finding struct {
	Path string
	Line int
	Rule string
	Text string
}

func (f Finding) String() string { return fmt.Sprintf("%s:%d: %s: %s", f.Path, f.Line, f.Rule, f.Text) }

// ScanFile checks one file. A binary file (one with a NUL byte), and
// anything not a regular file (a submodule, a symlink), is skipped.
func ScanFile(path, name string) ([]Finding, error) {
	st, err := os.Lstat(path)
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if bytes.IndexByte(b, 0) >= 0 {
		return nil, nil
	}
	var out []Finding
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 0, 64*1024), len(b)+1)
	for n := 1; sc.Scan(); n++ {
		if rule, ok := Match(sc.Text()); ok {
			out = append(out, Finding{Path: name, Line: n, Rule: rule, Text: strings.TrimSpace(sc.Text())})
		}
	}
	return out, sc.Err()
}

// Files lists the repository's files under root, relative to it: git's
// tracked and untracked-but-not-ignored files, so that a file not yet
// committed is scanned too; without git, every file but .git's and bin's.
func Files(root string) ([]string, error) {
	cmd := exec.Command("git", "ls-files", "-z", "--cached", "--others", "--exclude-standard")
	cmd.Dir = root
	if out, err := cmd.Output(); err == nil {
		var files []string
		for _, f := range strings.Split(string(out), "\x00") {
			if f != "" {
				files = append(files, filepath.FromSlash(f))
			}
		}
		return files, nil
	}
	var files []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		if d.IsDir() && (rel == ".git" || rel == "bin") {
			return filepath.SkipDir
		}
		if d.Type().IsRegular() {
			files = append(files, rel)
		}
		return nil
	})
	return files, err
}

// Scan checks every file of the repository at root and returns the write
// forms found, and how many files it read.
func Scan(root string) ([]Finding, int, error) {
	files, err := Files(root)
	if err != nil {
		return nil, 0, err
	}
	var all []Finding
	scanned := 0
	for _, f := range files {
		found, err := ScanFile(filepath.Join(root, f), filepath.ToSlash(f))
		if errors.Is(err, fs.ErrNotExist) {
			continue // deleted in the work tree, not yet in the index
		}
		if err != nil {
			return nil, scanned, err
		}
		scanned++
		all = append(all, found...)
	}
	return all, scanned, nil
}
