package custom

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"time"
)

// Stage names, the first argument of macrack-runner-stage.
const (
	StageConfig  = "config"
	StagePrepare = "prepare"
	StageRun     = "run"
	StageCleanup = "cleanup"
)

// cleanupTimeout bounds the cleanup stage's call to the agent; gitlab-
// runner's cleanup_exec_timeout bounds the whole stage.
const cleanupTimeout = 30 * time.Second

// Main is macrack-runner-stage: it runs the stage args[0] names, as
// gitlab-runner's custom executor calls it, and returns the exit code.
// It reads only the variables it names from getenv, and sends the VM
// nothing but the run stage's script: none of its environment, which is
// gitlab-runner's and holds the runner token.
func Main(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	codes, err := exitCodesFrom(getenv)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return codes.system
	}
	if len(args) == 0 {
		fmt.Fprintf(stderr, "%v: want a stage: config, prepare, run or cleanup\n", ErrUsage)
		return codes.system
	}
	stage, args := args[0], args[1:]
	socket := getenv(EnvSocket)
	if socket == "" && stage != StageCleanup {
		fmt.Fprintf(stderr, "%v: %s is not set; the MacRack agent sets it on gitlab-runner\n", ErrUsage, EnvSocket)
		return codes.system
	}
	switch stage {
	case StageConfig:
		err = config(getenv, stdout, stderr)
	case StagePrepare:
		err = prepare(ctx, newClient(socket), getenv, stdout)
	case StageRun:
		return run(ctx, newClient(socket), args, getenv, stdout, stderr, codes)
	case StageCleanup:
		cleanup(ctx, socket, stdout, stderr)
		return 0
	default:
		err = fmt.Errorf("%w: unknown stage %q", ErrUsage, stage)
	}
	if err != nil {
		fmt.Fprintln(stderr, err)
		return codes.system
	}
	return 0
}

// config prints the job's directories and shell in the VM.
func config(getenv func(string) string, stdout, stderr io.Writer) error {
	user := getenv(EnvVMUser)
	if !loginUserRe.MatchString(user) {
		return fmt.Errorf("%w: %s=%q is not a login user name", ErrUsage, EnvVMUser, user)
	}
	out := configOutput(user, getenv(EnvVMHostname))
	b, err := json.Marshal(out)
	if err != nil {
		return err
	}
	if _, err := fmt.Fprintf(stdout, "%s\n", b); err != nil {
		return err
	}
	// stderr goes to the job's log.
	fmt.Fprintf(stderr, "MacRack VM %s, builds in %s\n", out.Hostname, out.BuildsDir)
	return nil
}

// prepare checks that the VM, booted before gitlab-runner started, answers.
func prepare(ctx context.Context, c *client, getenv func(string) string, stdout io.Writer) error {
	fmt.Fprintf(stdout, "Checking that MacRack VM %s answers...\n", getenv(EnvVMHostname))
	if err := c.probe(ctx); err != nil {
		return err
	}
	fmt.Fprintln(stdout, "MacRack VM ready")
	return nil
}

// run sends the script file gitlab-runner wrote for a sub-stage to the VM.
func run(ctx context.Context, c *client, args []string, getenv func(string) string, stdout, stderr io.Writer, codes exitCodes) int {
	if len(args) != 2 || !stageRe.MatchString(args[1]) {
		fmt.Fprintf(stderr, "%v: want run <script path> <stage name>, got %q\n", ErrUsage, args)
		return codes.system
	}
	f, err := os.Open(args[0])
	if err != nil {
		fmt.Fprintln(stderr, "Opening the stage's script:", err)
		return codes.system
	}
	defer f.Close()
	fi, err := f.Stat()
	switch {
	case err != nil:
		fmt.Fprintln(stderr, "Opening the stage's script:", err)
		return codes.system
	case !fi.Mode().IsRegular() || fi.Size() > MaxScriptBytes:
		fmt.Fprintf(stderr, "The stage's script is not a file of at most %d bytes\n", MaxScriptBytes)
		return codes.system
	}
	code, err := c.run(ctx, args[1], io.LimitReader(f, fi.Size()), fi.Size(), stdout)
	switch {
	case err != nil && ctx.Err() != nil:
		fmt.Fprintln(stderr, "Stopped:", context.Cause(ctx))
		return codes.system
	case err != nil:
		fmt.Fprintln(stderr, err)
		return codes.system
	case code == 0:
		return 0
	}
	// gitlab-runner reads the script's own code from this file, for
	// allow_failure: exit_codes and the job log.
	if file := getenv(EnvBuildExitCodeFile); file != "" {
		if err := os.WriteFile(file, []byte(strconv.Itoa(code)+"\n"), 0o600); err != nil {
			fmt.Fprintln(stderr, "Writing the exit code file:", err)
		}
	}
	return codes.build
}

// cleanup tells the agent the stages are done. It cannot fail the job
// (gitlab-runner ignores cleanup's result), and the agent tears the VM
// down anyway, so it only warns.
func cleanup(ctx context.Context, socket string, stdout, stderr io.Writer) {
	if socket == "" {
		fmt.Fprintf(stderr, "%s is not set; nothing to clean up\n", EnvSocket)
		return
	}
	ctx, cancel := context.WithTimeout(ctx, cleanupTimeout)
	defer cancel()
	if err := newClient(socket).cleanup(ctx); err != nil {
		if errors.Is(err, ErrUnreachable) {
			err = fmt.Errorf("the agent is gone, and the VM with it: %w", err)
		}
		fmt.Fprintln(stderr, "Cleanup:", err)
		return
	}
	fmt.Fprintln(stdout, "MacRack VM released")
}
