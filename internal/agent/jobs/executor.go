package jobs

import (
	"context"
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"

	"github.com/boualleiguie/macrack-operator/internal/gitlab"
	"github.com/boualleiguie/macrack-operator/internal/runner/jobloop"
)

// Executor is the job loop's jobloop.Executor for a VM: each of the job's
// steps runs in the VM as one bash script through Scripts, as
// gitlab-runner's shell executor writes it: the job's variables exported,
// then each command, echoed first as "$ command". The runner token is not
// among the variables GitLab sends a job, and nothing of the agent's own
// environment goes with the script.
type Executor struct {
	Scripts ScriptRunner
}

var _ jobloop.Executor = Executor{}

// Run implements jobloop.Executor.
func (e Executor) Run(ctx context.Context, job jobloop.Job, out io.Writer) (int, error) {
	return jobloop.RunSteps(ctx, job, out, func(ctx context.Context, step gitlab.Step, out io.Writer) (int, error) {
		return e.Scripts.RunScript(ctx, strings.NewReader(Script(job, step)), out)
	})
}

// shellName is a name a shell can export.
var shellName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// Script is step as a bash script. A variable whose key a shell cannot
// export is left out, as gitlab-runner's bash shell leaves it. A value
// that is not raw has $NAME and ${NAME} of the variables before it
// expanded, as GitLab documents, by this code and not by the shell: a
// value never runs as a command. A file variable's value goes into a file
// only the login user may read, and the variable names the file.
func Script(job jobloop.Job, step gitlab.Step) string {
	var b strings.Builder
	b.WriteString("set -eo pipefail\nset +o noclobber\numask 0077\n")
	// The job id is a number: safe unquoted.
	fmt.Fprintf(&b, "MACRACK_JOB_TMP=\"${TMPDIR:-/tmp}/macrack-job-%d\"\nmkdir -p \"$MACRACK_JOB_TMP\"\n", job.ID)
	seen := map[string]string{}
	for _, v := range job.Variables {
		if !shellName.MatchString(v.Key) {
			continue
		}
		val := v.Value
		if !v.Raw {
			val = os.Expand(val, func(k string) string { return seen[k] })
		}
		seen[v.Key] = val
		if v.File {
			fmt.Fprintf(&b, "printf '%%s' %s > \"$MACRACK_JOB_TMP/%s\"\nexport %s=\"$MACRACK_JOB_TMP/%s\"\n", quote(val), v.Key, v.Key, v.Key)
			continue
		}
		fmt.Fprintf(&b, "export %s=%s\n", v.Key, quote(val))
	}
	b.WriteString("unset MACRACK_JOB_TMP\ncd \"$HOME\"\n")
	for _, cmd := range step.Script {
		if strings.TrimSpace(cmd) == "" {
			continue
		}
		fmt.Fprintf(&b, "printf '%%s\\n' %s\n%s\n", quote("$ "+cmd), cmd)
	}
	return b.String()
}

// quote is s as one single-quoted shell word.
func quote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
