package jobloop

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/boualleiguie/macrack-operator/internal/gitlab"
)

func script(lines ...string) gitlab.Step {
	return gitlab.Step{Name: gitlab.StepScript, Script: lines, When: gitlab.WhenOnSuccess}
}

func TestTheSimulatorInterpretsItsTinyShell(t *testing.T) {
	for _, tc := range []struct {
		name  string
		lines []string
		code  int
		out   string
	}{
		{"echo prints the rest of the line", []string{"echo hello   world"}, 0, "$ echo hello   world\nhello   world\n"},
		{"echo removes one level of quotes", []string{`echo "a 'b'"`}, 0, "$ echo \"a 'b'\"\na 'b'\n"},
		{"exit ends the script with its code", []string{"exit 42", "echo no"}, 42, "$ exit 42\n"},
		{"exit keeps the low byte as a shell does", []string{"exit 257"}, 1, "$ exit 257\n"},
		{"exit without a number is a shell error", []string{"exit x"}, 2, "$ exit x\nexit: x: numeric argument required\n"},
		{"fail exits 1", []string{"fail"}, 1, "$ fail\n"},
		{"an unknown command succeeds silently", []string{"make -j8", "xcodebuild test"}, 0, "$ make -j8\n$ xcodebuild test\n"},
		{"a multi-line entry runs line by line", []string{"echo a\n\necho b"}, 0, "$ echo a\na\n$ echo b\nb\n"},
		{"sleep without a valid interval fails", []string{"sleep soon"}, 1, "$ sleep soon\nsleep: invalid time interval \"soon\"\n"},
		{"sleep 0 returns at once", []string{"sleep 0", "echo up"}, 0, "$ sleep 0\n$ echo up\nup\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			code, err := SimExecutor{}.RunScript(context.Background(), script(tc.lines...), &out)
			if err != nil || code != tc.code || out.String() != tc.out {
				t.Fatalf("got %d %v %q", code, err, out.String())
			}
		})
	}
}

func TestSimulatedSleepsRunOnTheClockAndStopWhenCancelled(t *testing.T) {
	for _, tc := range []struct {
		name   string
		arg    string
		d      time.Duration
		cancel bool
	}{
		{"a Go duration sleeps that long", "1m30s", 90 * time.Second, false},
		{"a number sleeps that many seconds", "2.5", 2500 * time.Millisecond, false},
		{"a cancelled sleep returns at once", "1h", time.Hour, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := clocktesting.NewFakeClock(epoch)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			type res struct {
				code int
				err  error
			}
			done := make(chan res, 1)
			go func() {
				code, err := SimExecutor{Clock: clk}.RunScript(ctx, script("sleep "+tc.arg, "echo woke"), io.Discard)
				done <- res{code, err}
			}()
			eventually(t, "the script sleeps", clk.HasWaiters)
			if tc.cancel {
				cancel()
				if r := <-done; !errors.Is(r.err, context.Canceled) || r.code != -1 {
					t.Fatalf("got %+v", r)
				}
				return
			}
			clk.Step(tc.d - time.Millisecond)
			select {
			case r := <-done:
				t.Fatalf("woke early: %+v", r)
			case <-time.After(10 * time.Millisecond):
			}
			clk.Step(time.Millisecond)
			select {
			case r := <-done:
				if r.err != nil || r.code != 0 {
					t.Fatalf("got %+v", r)
				}
			case <-time.After(waitLimit):
				t.Fatal("never woke")
			}
		})
	}
}

func TestStepsRunAsGitLabRunnerOrdersThem(t *testing.T) {
	step := func(name gitlab.StepName, when gitlab.StepWhen, allow bool, lines ...string) gitlab.Step {
		return gitlab.Step{Name: name, Script: lines, When: when, AllowFailure: allow}
	}
	for _, tc := range []struct {
		name  string
		steps []gitlab.Step
		code  int
		ran   []string
	}{
		{
			"after_script runs after a success",
			[]gitlab.Step{step("script", "on_success", false, "echo s"), step("after_script", "always", true, "echo a")},
			0, []string{"s", "a"},
		},
		{
			"after_script runs after a failure and keeps the script's code",
			[]gitlab.Step{step("script", "", false, "echo s", "exit 4"), step("after_script", "always", true, "echo a", "exit 9")},
			4, []string{"s", "a"},
		},
		{
			"an on_success step is skipped after a failure",
			[]gitlab.Step{step("script", "", false, "fail"), step("release", "on_success", false, "echo r")},
			1, []string{},
		},
		{
			"an on_failure step runs only after a failure",
			[]gitlab.Step{step("script", "", false, "echo s"), step("notify", "on_failure", false, "echo n")},
			0, []string{"s"},
		},
		{
			"a failing step that allows failure does not fail the job",
			[]gitlab.Step{step("after_script", "always", true, "exit 3"), step("script", "", false, "echo s")},
			0, []string{"s"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			code, err := SimExecutor{}.Run(context.Background(), Job{Steps: tc.steps}, &out)
			if err != nil || code != tc.code {
				t.Fatalf("got %d %v\n%s", code, err, out.String())
			}
			var ran []string
			for _, l := range strings.Split(out.String(), "\n") {
				if len(l) == 1 {
					ran = append(ran, l)
				}
			}
			if strings.Join(ran, ",") != strings.Join(tc.ran, ",") {
				t.Fatalf("ran %v, want %v\n%s", ran, tc.ran, out.String())
			}
		})
	}
}

func TestTheMaskerCatchesASecretSplitAcrossWrites(t *testing.T) {
	secret := "glcbt-abcdef123456"
	text := "token " + secret + " and " + secret + "\n"
	for _, size := range []int{1, 2, 3, 7, len(text)} {
		tr := newTrace(1<<20, secret, "", secret)
		for i := 0; i < len(text); i += size {
			_, _ = tr.Write([]byte(text[i:min(i+size, len(text))]))
		}
		tr.finish("done")
		if got, want := tr.String(), "token [MASKED] and [MASKED]\ndone\n"; got != want {
			t.Fatalf("writes of %d: got %q", size, got)
		}
	}
}

func TestTheMaskerReleasesAHeldPrefixThatIsNoSecret(t *testing.T) {
	tr := newTrace(1<<20, "glcbt-abcdef123456")
	_, _ = tr.Write([]byte("prefix glcbt-abc"))
	if got := tr.String(); got != "prefix " {
		t.Fatalf("a possible secret's start is held back: %q", got)
	}
	_, _ = tr.Write([]byte("xyz\n"))
	if got := tr.String(); got != "prefix glcbt-abcxyz\n" {
		t.Fatalf("and released once it is none: %q", got)
	}
}

func TestTheTraceStopsAtItsLimitButKeepsTheLastLine(t *testing.T) {
	tr := newTrace(10)
	_, _ = tr.Write([]byte("0123456789abcdef"))
	n, err := tr.Write([]byte("more"))
	if n != 4 || err != nil {
		t.Fatalf("a write past the limit still succeeds: %d %v", n, err)
	}
	tr.finish("Job succeeded")
	got := tr.String()
	if !strings.HasPrefix(got, "0123456789\nJob's log exceeded limit of 10 bytes.") || strings.Contains(got, "abc") ||
		!strings.HasSuffix(got, "\nJob succeeded\n") {
		t.Fatalf("got %q", got)
	}
	_, _ = tr.Write([]byte("late"))
	if strings.Contains(tr.String(), "late") {
		t.Fatal("a write after finish was kept")
	}
}
