package access

import (
	"bytes"
	"context"
	"errors"
	"os/exec"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
)

// result is what a kubectl run printed and how it ended.
type result struct {
	Stdout, Stderr string
	Code           int
	// Elapsed is how long it ran: a refusal must come back, never hang.
	Elapsed time.Duration
}

// kubectlTimeout bounds every kubectl run: exec and logs into a VM that
// cannot serve them must fail with a message, not hang.
const kubectlTimeout = 45 * time.Second

// run runs the real kubectl with kubeconfig, feeding it stdin.
func run(kubeconfig, stdin string, args ...string) result {
	GinkgoHelper()
	cctx, cancel := context.WithTimeout(ctx, kubectlTimeout)
	defer cancel()
	cmd := exec.CommandContext(cctx, kubectl, append([]string{"--kubeconfig", kubeconfig}, args...)...)
	cmd.Stdin = strings.NewReader(stdin)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	start := time.Now()
	err := cmd.Run()
	r := result{Stdout: out.String(), Stderr: errOut.String(), Elapsed: time.Since(start)}
	var exit *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exit):
		r.Code = exit.ExitCode()
	default:
		Fail("running kubectl: " + err.Error())
	}
	if cctx.Err() != nil {
		Fail("kubectl " + strings.Join(args, " ") + " hung for " + kubectlTimeout.String() + ": " + r.Stderr)
	}
	GinkgoWriter.Printf("kubectl %s\n-> %d\n%s%s", strings.Join(args, " "), r.Code, r.Stdout, r.Stderr)
	return r
}
