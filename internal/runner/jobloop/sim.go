package jobloop

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"k8s.io/utils/clock"

	"github.com/boualleiguie/macrack-operator/internal/gitlab"
)

// SimExecutor runs a job "in the simulator": each script line is echoed
// as "$ line" and then interpreted by a tiny shell:
//
//	echo …      prints the rest of the line (one level of quotes removed)
//	sleep D     waits D, a Go duration ("1m30s") or seconds ("2", "0.5"),
//	            on the clock, and stops at once when the job is cancelled
//	exit N      ends the step with exit code N (0-255)
//	fail        ends the step with exit code 1
//	anything    else succeeds silently
//
// so that tests and the fleet simulator can script durations, output and
// outcomes without a Mac.
type SimExecutor struct {
	// Clock times sleeps; the real clock if nil.
	Clock clock.Clock
}

// Run runs the job's steps.
func (s SimExecutor) Run(ctx context.Context, job Job, out io.Writer) (int, error) {
	return RunSteps(ctx, job, out, s.RunScript)
}

// RunScript runs one step's script.
func (s SimExecutor) RunScript(ctx context.Context, step gitlab.Step, out io.Writer) (int, error) {
	clk := s.Clock
	if clk == nil {
		clk = clock.RealClock{}
	}
	for _, entry := range step.Script {
		for _, line := range strings.Split(entry, "\n") {
			line = strings.TrimSpace(line)
			if line == "" {
				continue
			}
			if err := ctx.Err(); err != nil {
				return -1, err
			}
			fmt.Fprintf(out, "$ %s\n", line)
			code, done, err := s.interpret(ctx, clk, line, out)
			if err != nil || done {
				return code, err
			}
		}
	}
	return 0, nil
}

// interpret runs one line; done means the step ends with code.
func (SimExecutor) interpret(ctx context.Context, clk clock.Clock, line string, out io.Writer) (code int, done bool, err error) {
	fields := strings.Fields(line)
	switch fields[0] {
	case "echo":
		fmt.Fprintln(out, unquote(strings.TrimSpace(strings.TrimPrefix(line, "echo"))))
	case "fail":
		return 1, true, nil
	case "exit":
		if len(fields) == 1 {
			return 0, true, nil
		}
		n, err := strconv.Atoi(fields[1])
		if err != nil {
			fmt.Fprintf(out, "exit: %s: numeric argument required\n", fields[1])
			return 2, true, nil
		}
		return n & 0xff, true, nil
	case "sleep":
		d, ok := sleepArg(fields)
		if !ok {
			fmt.Fprintf(out, "sleep: invalid time interval %q\n", strings.Join(fields[1:], " "))
			return 1, true, nil
		}
		t := clk.NewTimer(d)
		defer t.Stop()
		select {
		case <-ctx.Done():
			return -1, true, ctx.Err()
		case <-t.C():
		}
	}
	return 0, false, nil
}

// sleepArg reads sleep's one argument, a Go duration or seconds.
func sleepArg(fields []string) (time.Duration, bool) {
	if len(fields) != 2 {
		return 0, false
	}
	if d, err := time.ParseDuration(fields[1]); err == nil && d >= 0 {
		return d, true
	}
	f, err := strconv.ParseFloat(fields[1], 64)
	if err != nil || f < 0 || f > float64(1<<31) {
		return 0, false
	}
	return time.Duration(f * float64(time.Second)), true
}

// unquote removes one level of matching quotes around s.
func unquote(s string) string {
	if len(s) >= 2 && (s[0] == '"' || s[0] == '\'') && s[len(s)-1] == s[0] {
		return s[1 : len(s)-1]
	}
	return s
}
