package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/debug"
	"strings"
	"time"

	"github.com/boualleiguie/macrack-operator/internal/policy"
	"github.com/boualleiguie/macrack-operator/policies"
)

// The exit codes; doc.go states the contract.
const (
	exitOK       = 0
	exitDenied   = 1
	exitInput    = 2
	exitPolicies = 3
)

// Sentinels that decide the exit code. Commands wrap them with %w; Main maps
// them with errors.Is, so that the code never depends on message text.
var (
	// errDenied: a policy denied or a test failed. The report already says
	// which, so Main prints nothing more.
	errDenied = errors.New("denied")
	// errInput: unreadable or malformed input.
	errInput = errors.New("malformed input")
	// errUsage: bad flags or arguments.
	errUsage = errors.New("usage")
	// errPolicies: the policies failed to load or compile.
	errPolicies = errors.New("policies failed to load")
	// errHelp: --help was asked for and printed; the run succeeded.
	errHelp = errors.New("help shown")
)

// usageError is a bad invocation; it names the command so that Main can
// point at its --help.
type usageError struct {
	cmd string
	err error
}

func (e *usageError) Error() string {
	if e.cmd == "" {
		return e.err.Error()
	}
	return e.cmd + ": " + e.err.Error()
}

func (e *usageError) Unwrap() error        { return e.err }
func (e *usageError) Is(target error) bool { return target == errUsage }

func usagef(cmd, format string, args ...any) error {
	return &usageError{cmd: cmd, err: fmt.Errorf(format, args...)}
}

// env is what a command may touch of the outside world; tests replace it.
type env struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	now            func() time.Time
}

// Main runs macrackctl with args (without the program name) and returns the
// exit code.
func Main(args []string, stdout, stderr io.Writer) int {
	// No signal handling: an interrupted run dies of the signal, which CI
	// reports as such, rather than passing for a denial.
	return run(context.Background(), env{stdin: os.Stdin, stdout: stdout, stderr: stderr, now: time.Now}, args)
}

func run(ctx context.Context, e env, args []string) int {
	err := dispatch(ctx, e, args)
	if err == nil || errors.Is(err, errHelp) {
		return exitOK
	}
	code := exitCode(err)
	if code != exitDenied {
		printError(e.stderr, err)
	}
	var ue *usageError
	if errors.As(err, &ue) {
		fmt.Fprintf(e.stderr, "Run '%s --help' for usage.\n", strings.TrimSpace("macrackctl "+ue.cmd))
	}
	return code
}

// exitCode maps an error to the documented exit codes. An error no command
// classified is treated as input the tool could not handle.
func exitCode(err error) int {
	switch {
	case err == nil:
		return exitOK
	case errors.Is(err, errUsage), errors.Is(err, errInput):
		// Input errors dominate denials: a run that could not read all its
		// input has not checked everything.
		return exitInput
	case errors.Is(err, errPolicies):
		return exitPolicies
	case errors.Is(err, errDenied):
		return exitDenied
	}
	return exitInput
}

// errorList is several errors of one run, such as every bad document of
// every file, so that one CI run reports them all.
type errorList []error

func (l errorList) Error() string {
	msgs := make([]string, len(l))
	for i, e := range l {
		msgs[i] = e.Error()
	}
	return strings.Join(msgs, "\n")
}

func (l errorList) Unwrap() []error { return l }

// printError prints an error, one line of "error: " for each of a list.
func printError(w io.Writer, err error) {
	var l errorList
	if errors.As(err, &l) {
		for _, e := range l {
			printError(w, e)
		}
		return
	}
	fmt.Fprintf(w, "error: %v\n", err)
}

// command is one node of the dispatcher: a group (policy) or a leaf.
type command struct {
	name    string
	summary string
	run     func(ctx context.Context, e env, args []string) error
}

// topCommands are macrackctl's groups. It is a function, not a variable, so
// that no package state exists and help can list the table it belongs to.
func topCommands() []command {
	return []command{
		{name: "policy", summary: "test, check and evaluate MacRack's policies", run: runPolicy},
		{name: "image", summary: "push a golden image to an OCI registry, or inspect one", run: runImage},
		{name: "node", summary: "enroll a chassis (printing its agent's bootstrap kubeconfig), or retire it", run: runNode},
		{name: "sim", summary: "inject faults into a simulated fleet: quota-stick", run: runSim},
		{name: "audit", summary: "print the audit stream's records (CloudEvents in NATS JetStream): tail", run: runAudit},
		{name: "billing", summary: "sum each tenant's billable chassis-hours from the audit stream: report", run: runBilling},
		{name: "version", summary: "print the version and the embedded policies' revision", run: runVersion},
		{name: "help", summary: "show help for a command", run: runHelp},
	}
}

const topUsage = `macrackctl is MacRack's command-line tool.

Usage:
  macrackctl <command> [arguments]

Commands:
%s
Run 'macrackctl help <command>' or 'macrackctl <command> --help' for details.
`

func writeTopUsage(w io.Writer) {
	fmt.Fprintf(w, topUsage, commandList(topCommands()))
}

func commandList(cmds []command) string {
	var b strings.Builder
	for _, c := range cmds {
		fmt.Fprintf(&b, "  %-8s %s\n", c.name, c.summary)
	}
	return b.String()
}

func dispatch(ctx context.Context, e env, args []string) error {
	if len(args) == 0 {
		writeTopUsage(e.stderr)
		return &usageError{cmd: "", err: errors.New("no command given")}
	}
	if isHelpFlag(args[0]) {
		writeTopUsage(e.stdout)
		return errHelp
	}
	for _, c := range topCommands() {
		if c.name == args[0] {
			return c.run(ctx, e, args[1:])
		}
	}
	return &usageError{cmd: "", err: fmt.Errorf("unknown command %q", args[0])}
}

func isHelpFlag(s string) bool { return s == "-h" || s == "-help" || s == "--help" }

// runHelp answers `macrackctl help [command...]` by asking the command for
// its own --help, so that the text lives in one place.
func runHelp(ctx context.Context, e env, args []string) error {
	if len(args) == 0 {
		writeTopUsage(e.stdout)
		return nil
	}
	return dispatch(ctx, e, append(append([]string{}, args...), "--help"))
}

const versionUsage = `Usage:
  macrackctl version

Prints macrackctl's version, its Go toolchain, and the revision (content
hash) of the policies it embeds, which every decision also reports.
`

func runVersion(ctx context.Context, e env, args []string) error {
	fs := newFlagSet("version")
	pos, err := parseFlags(fs, "version", args, e.stdout, versionUsage)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usagef("version", "unexpected argument %q", pos[0])
	}
	version, revision := "(devel)", ""
	if bi, ok := debug.ReadBuildInfo(); ok {
		if bi.Main.Version != "" {
			version = bi.Main.Version
		}
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" {
				revision = s.Value
			}
		}
	}
	fmt.Fprintf(e.stdout, "macrackctl %s", version)
	if revision != "" {
		fmt.Fprintf(e.stdout, " (commit %s)", revision)
	}
	fmt.Fprintf(e.stdout, " %s %s/%s\n", runtime.Version(), runtime.GOOS, runtime.GOARCH)
	eng, err := policy.Load(ctx, policies.FS)
	if err != nil {
		return fmt.Errorf("%w: the embedded policies: %w", errPolicies, err)
	}
	fmt.Fprintf(e.stdout, "policies %s (%d rules, embedded)\n", eng.Revision(), len(eng.Rules()))
	return nil
}
